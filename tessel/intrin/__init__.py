"""Tensor intrinsics: instructions that do a small tensor computation at once, as a pair of a
description in tessel's IR and an implementation in C.

    intrin = tessel.intrin.get("dot_u8s8_16x4_vnni")    # C[j] += A[k] * B[j, k], j 16, k 4
    sch.tensorize(loop, intrin.name)                    # the subtree under loop must match it

The *description* is a PrimFunc whose one block updates an accumulator without an init (what
the schedule's block must match structurally, access by access: see match.py). Its buffers
are dense and row-major: the instruction reads each operand as that many consecutive
elements, so the program's accesses must move through memory as the description's do (a
weight packed by transform_layout). The *implementation* is a C function the printer emits
and inlines: it takes the accumulator's vector and each input's (in the description's
parameter order) and returns the new accumulator. `features` are the target features it
needs; a target without them is refused at code generation, and the space offers an
intrinsic only where the target has its features (`for_target`).

Intrinsics of x86 (VNNI, AVX2) are in x86.py, AMX's (a memory intrinsic: a statement on
pointers, see base.TensorIntrin) in amx.py, of AArch64 in arm.py; REGISTRY maps each name to
its TensorIntrin.
"""
from __future__ import annotations

from tessel.intrin import amx, arm, x86
from tessel.intrin.base import IntrinError, TensorIntrin, dot_desc
from tessel.intrin.match import Binding, Operand, bind, match

ANNOTATION = "tensorize"  # the block annotation naming the intrinsic that computes the block
REGISTRY: dict[str, TensorIntrin] = {i.name: i for i in (*amx.INTRINSICS, *x86.INTRINSICS,
                                                        *arm.INTRINSICS)}


def get(name: str) -> TensorIntrin:
    """The registered intrinsic `name`, or IntrinError naming the known ones."""
    if not isinstance(name, str) or name not in REGISTRY:
        raise IntrinError(f"unknown tensor intrinsic {name!r}; known: "
                          f"{', '.join(sorted(REGISTRY))}")
    return REGISTRY[name]


def for_target(target) -> list[TensorIntrin]:
    """The registered intrinsics `target` can run, in registration order (fastest first
    within each description)."""
    return [i for i in REGISTRY.values() if not i.missing(target)]


__all__ = ["ANNOTATION", "TensorIntrin", "IntrinError", "REGISTRY", "get", "for_target",
           "dot_desc", "match", "bind", "Binding", "Operand"]
