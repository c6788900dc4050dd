"""build(): a PrimFunc compiled for a target and loaded, ready to call.

    mod = build(func)                          # this host: a Module (ctypes)
    mod = build(func, Target("aarch64-neon"))  # another architecture: an EmulatedModule
    mod(a, b, c)

A target of this host's architecture gives a Module that calls the kernel in this process; one
of another architecture is cross-compiled and gives an EmulatedModule that runs it under
qemu-user (tessel.codegen.emulate).
"""
from __future__ import annotations

from pathlib import Path

from tessel.codegen.c import generate_c
from tessel.codegen.compiler import compile_shared
from tessel.codegen.emulate import check_cross_compiler, emulated_module, is_foreign
from tessel.codegen.module import Module
from tessel.codegen.passes import compact_buffers
from tessel.ir import PrimFunc
from tessel.target import Target, as_target


def build(func: PrimFunc, target: Target | str | None = None, *,
          cache_dir: str | Path | None = None, compact: bool = True) -> Module:
    """Generate C for `func`, compile it for `target` (a Target or a name such as "host";
    default: this host) and load it.

    With `compact` (the default), intermediate buffers are first allocated where they are
    used and shrunk to what is used there (tessel.codegen.passes.compact_buffers)."""
    target = as_target(target)  # None: this host; a name: Target(name)
    foreign = is_foreign(target)
    if foreign:
        check_cross_compiler(target)
    source = generate_c(compact_buffers(func) if compact else func, target,
                        constants=func.constant_params)
    lib_path = compile_shared(source, target, cache_dir=cache_dir)
    if foreign:
        return emulated_module(func, target, source, lib_path, cache_dir)
    return Module(func, target, source, lib_path)


__all__ = ["build"]
