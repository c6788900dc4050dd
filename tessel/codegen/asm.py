"""Reading a kernel's assembly: is its hot loop register-blocked SIMD with FMA?

    loop = hot_loop(mod.asm())                   # the innermost loop with the most FMAs
    vector_fmas(loop, mod.target)                # its FMAs on full vectors of the target
    spills(loop)                                 # vector stores / stack operands inside it
    print(summary(mod.asm(), mod.target))        # "hot loop: 24 zmm FMAs, 0 spills"

x86-64 AT&T syntax, as gcc and clang print it; the full vector register of a target is xmm,
ymm or zmm by its vector width.
"""
from __future__ import annotations

import re

from tessel.target import Target

_REGISTERS = {128: "xmm", 256: "ymm", 512: "zmm"}


def hot_loop(asm: str) -> str:
    """The innermost loop (a label up to the backward jump to it, holding no other such loop)
    with the most FMAs; "" when the assembly has no loop."""
    spans = []
    for label in re.finditer(r"^(\.L\w+):$", asm, re.M):
        jump = re.compile(rf"^\s+j\w+\s+{re.escape(label.group(1))}$", re.M)
        end = jump.search(asm, label.end())
        if end is not None:
            spans.append((label.start(), end.end()))
    innermost = [(a, b) for a, b in spans
                 if not any(a < c and d <= b for c, d in spans if (c, d) != (a, b))]
    loops = [asm[a:b] for a, b in innermost]
    return max(loops, key=lambda body: body.count("vfmadd"), default="")


def vector_register(target: Target) -> str:
    """The name prefix of `target`'s full vector registers (xmm, ymm or zmm)."""
    return _REGISTERS.get(target.vector_bits, "zmm")


def vector_fmas(loop: str, target: Target) -> list[str]:
    """The packed single-precision FMAs of `loop` on full vectors of `target`."""
    return re.findall(rf"\bvfn?m(?:add|sub)\d+ps\s+[^\n]*%{vector_register(target)}", loop)


def spills(loop: str) -> list[str]:
    """Vector stores and vector instructions with a stack operand in `loop`: accumulators
    that left their registers (a register-blocked inner loop has none). Integer reloads
    from the stack (address arithmetic under register pressure) are not counted."""
    stores = re.findall(r"\bvmov\w*\s+%[xyz]mm\d+,\s*[-\w]*\([^\n]*", loop)
    stack = re.findall(r"\bv\w+\s+[^\n]*\((?:%rsp|%rbp)\)[^\n]*", loop)
    return stores + [line for line in stack if line not in stores]


def summary(asm: str, target: Target) -> str:
    """One line about the hot loop of `asm` compiled for `target`."""
    loop = hot_loop(asm)
    return (f"hot loop: {len(vector_fmas(loop, target))} {vector_register(target)} FMAs, "
            f"{len(spills(loop))} spills")


__all__ = ["hot_loop", "spills", "summary", "vector_fmas", "vector_register"]
