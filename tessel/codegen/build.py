"""build(): a PrimFunc compiled for a target and loaded, ready to call.

    mod = build(func)                          # this host: a Module (ctypes)
    mod = build(func, Target("aarch64-neon"))  # another architecture: an EmulatedModule
    mod(a, b, c)

A target of this host's architecture gives a Module that calls the kernel in this process; one
of another architecture is cross-compiled and gives an EmulatedModule that runs it under
qemu-user (tessel.codegen.emulate).
"""
from __future__ import annotations

import functools
import hashlib
import json
import os
import tempfile
from pathlib import Path

import tessel
from tessel.codegen.c import generate_c
from tessel.codegen.compiler import compile_shared, default_cache_dir
from tessel.codegen.emulate import check_cross_compiler, emulated_module, is_foreign
from tessel.codegen.module import Module
from tessel.codegen.passes import compact_buffers
from tessel.ir import PrimFunc, structural_key
from tessel.target import Target, as_target

# the code that decides what C a PrimFunc becomes: a change to any of it is a new generator
_GENERATOR = ("codegen", "intrin", "ir", "arith", "te", "target.py", "errors.py")


@functools.cache
def generator_version() -> str:
    """A hash of the source of everything generate_c's output depends on (_GENERATOR)."""
    root = Path(tessel.__file__).parent
    digest = hashlib.sha256()
    for name in _GENERATOR:
        files = [root / name] if name.endswith(".py") else sorted((root / name).rglob("*.py"))
        for path in files:
            digest.update(str(path.relative_to(root)).encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()


def _source_key(func: PrimFunc, target: Target, compact: bool) -> str:
    """What the C of `func` for `target` is stored under (its text depends on the program's
    structure, its names and attributes, the target and the generator's code)."""
    parts = [generator_version(), repr(structural_key(func)), func.name,
             [p.name for p in func.params], repr(sorted(func.attrs.items())), compact,
             target.compiler, target.fingerprint()]
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=repr).encode()).hexdigest()


def _source_path(func: PrimFunc, target: Target, compact: bool,
                 cache_dir: str | Path | None) -> Path:
    key = _source_key(func, target, compact)
    root = Path(cache_dir).expanduser() if cache_dir is not None else default_cache_dir()
    return root / "sources" / key[:2] / f"{key}.c"


def has_source(func: PrimFunc, target: Target, *, cache_dir: str | Path | None = None,
               compact: bool = True) -> bool:
    """Whether build finds `func`'s C in the cache (it need not lower and print it)."""
    return _source_path(func, target, compact, cache_dir).exists()


def _generated_c(func: PrimFunc, target: Target, compact: bool,
                 cache_dir: str | Path | None) -> str:
    """generate_c's text for `func`, from the cache when this generator wrote it before (a
    compiled model's second compile: lowering and printing take most of its time when every
    kernel is compiled already, 21 of 47 profiled seconds for ResNet-18)."""
    path = _source_path(func, target, compact, cache_dir)
    try:
        return path.read_text()
    except (OSError, UnicodeDecodeError):
        pass
    source = generate_c(compact_buffers(func) if compact else func, target,
                        constants=func.constant_params)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f"{path.stem}.", suffix=".tmp")
        with os.fdopen(fd, "w") as file:
            file.write(source)
        os.replace(tmp, path)
    except OSError:
        pass  # (a read-only cache: the next compile generates it again)
    return source


def build(func: PrimFunc, target: Target | str | None = None, *,
          cache_dir: str | Path | None = None, compact: bool = True) -> Module:
    """Generate C for `func`, compile it for `target` (a Target or a name such as "host";
    default: this host) and load it.

    With `compact` (the default), intermediate buffers are first allocated where they are
    used and shrunk to what is used there (tessel.codegen.passes.compact_buffers)."""
    target = as_target(target)  # None: this host; a name: Target(name)
    source, lib_path = build_files(func, target, cache_dir=cache_dir, compact=compact)
    if is_foreign(target):
        return emulated_module(func, target, source, lib_path, cache_dir)
    return Module(func, target, source, lib_path)


def build_files(func: PrimFunc, target: Target, *, cache_dir: str | Path | None = None,
                compact: bool = True) -> tuple[str, Path]:
    """build's C source and compiled library, both left in the cache, without loading it
    (what a build process does for a model compiled on several cores: prebuild in
    tessel.measure)."""
    if is_foreign(target):
        check_cross_compiler(target)
    source = _generated_c(func, target, compact, cache_dir)
    return source, compile_shared(source, target, cache_dir=cache_dir)


__all__ = ["build", "build_files", "generator_version", "has_source"]
