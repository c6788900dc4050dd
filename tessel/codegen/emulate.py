"""Kernels built for another architecture, run under qemu-user on this host's arrays.

    mod = tessel.build(func, Target("aarch64-neon"))   # on x86-64: cross gcc, then qemu-aarch64
    mod(a, b, c)                                        # checked and written in place, as a Module
    mod.time(a, b, c)                                   # EmulationError: nothing to time

A small loader program, cross-compiled once and cached beside the kernels, runs under
`qemu-<arch> -L /usr/<arch>-linux-gnu` (Debian's qemu-user and cross toolchain): it reads the
kernel libraries, the bytes of every argument and the calls from its standard input, dlopens
the libraries, makes the calls in order and writes the arguments back. Each argument keeps its
offset within a cache line, and arguments that overlap on the host (a model's reshapes and
concat slices) share one block, so an emulated model computes on memory laid out as its
native run's. Timings are refused: qemu-user translates the instructions it runs, and how
long that takes says nothing about any CPU of the target's architecture.
"""
from __future__ import annotations

import bisect
import ctypes
import functools
import math
import shutil
import struct
import subprocess
from pathlib import Path

import numpy as np

from tessel.codegen.c import ALIGN_BYTES
from tessel.codegen.compiler import compile_cached
from tessel.codegen.module import BoundCall, KernelSequence, Module
from tessel.errors import TesselError
from tessel.ir import PrimFunc
from tessel.target import Target, TargetError, host_arch

_ARCH_NAMES = {"aarch64": "AArch64", "x86_64": "x86-64"}
_DEBIAN_ARCH = {"aarch64": "arm64", "x86_64": "amd64"}
_LOADER_C = r"""/* tessel's loader for kernels of another architecture (tessel.codegen.emulate).
   stdin: libraries, memory blocks and calls, as int64 fields; stdout: the status of the calls,
   the index of the failing one and the bytes of every block a call writes. */
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

typedef int32_t (*entry_fn)(void**);

static void fail(const char* what, const char* detail) {
    fprintf(stderr, "%s%s\n", what, detail ? detail : "");
    exit(3);
}

static void get(void* p, size_t n) {
    if (n && fread(p, 1, n, stdin) != n) fail("tessel loader: short request", NULL);
}

static int64_t get_i64(void) { int64_t v; get(&v, sizeof v); return v; }

static void* need(void* p) { if (!p) fail("tessel loader: out of memory", NULL); return p; }

int main(void) {
    int64_t n_libs = get_i64();
    entry_fn* entries = need(calloc(n_libs + 1, sizeof *entries));
    for (int64_t i = 0; i < n_libs; ++i) {
        int64_t len = get_i64();
        char* path = need(calloc(len + 1, 1));
        get(path, len);
        void* lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
        if (!lib) fail("", dlerror());
        entries[i] = (entry_fn)dlsym(lib, "tessel_entry");
        if (!entries[i]) fail("no tessel_entry in ", path);
    }
    int64_t n_blocks = get_i64();
    char** base = need(calloc(n_blocks + 1, sizeof *base));
    int64_t* size = need(calloc(n_blocks + 1, sizeof *size));
    int64_t* written = need(calloc(n_blocks + 1, sizeof *written));
    for (int64_t b = 0; b < n_blocks; ++b) {
        size[b] = get_i64();
        int64_t skew = get_i64();  /* the block's offset within a cache line on the host */
        written[b] = get_i64();
        char* raw = need(malloc(size[b] + 2 * ALIGN));
        base[b] = raw + (ALIGN - (uintptr_t)raw % ALIGN) % ALIGN + skew;
        get(base[b], size[b]);
    }
    int64_t n_calls = get_i64();
    int64_t* lib_of = need(calloc(n_calls + 1, sizeof *lib_of));
    void*** args = need(calloc(n_calls + 1, sizeof *args));
    for (int64_t c = 0; c < n_calls; ++c) {
        lib_of[c] = get_i64();
        int64_t n_args = get_i64();
        args[c] = need(calloc(n_args + 1, sizeof **args));
        for (int64_t a = 0; a < n_args; ++a) {
            int64_t block = get_i64();
            args[c][a] = base[block] + get_i64();
        }
    }
    int32_t status = 0, failed = -1;
    for (int64_t c = 0; c < n_calls && status == 0; ++c) {
        status = entries[lib_of[c]](args[c]);
        if (status != 0) failed = (int32_t)c;
    }
    fwrite(&status, sizeof status, 1, stdout);
    fwrite(&failed, sizeof failed, 1, stdout);
    for (int64_t b = 0; b < n_blocks; ++b) {
        if (written[b]) fwrite(base[b], 1, size[b], stdout);
    }
    return fflush(stdout) == 0 ? 0 : 4;
}
""".replace("ALIGN", str(ALIGN_BYTES))


Span = tuple[int, int, bool]  # an argument: (host address, bytes, written by the call)
Block = tuple[int, int, bool]  # memory sent to the loader: (host start, end, written)


class EmulationError(TesselError, RuntimeError):
    """Code of another architecture cannot be run or timed here (no emulator, a crash under
    it, or a timing asked of it)."""


def is_foreign(target: Target) -> bool:
    """Whether `target`'s code is of another architecture than this host's."""
    return target.arch != host_arch()


def debian_packages(arch: str) -> str:
    """The Debian packages that cross-compile C for `arch` and run its programs here."""
    return (f"qemu-user gcc-{arch.replace('_', '-')}-linux-gnu "
            f"libc6-dev-{_DEBIAN_ARCH.get(arch, arch)}-cross")


@functools.cache
def emulator(arch: str) -> tuple[str, ...] | None:
    """The command prefix that runs an `arch` Linux program here (qemu-user with the cross
    C library's root), or None when no qemu-<arch> is on PATH."""
    for name in (f"qemu-{arch}", f"qemu-{arch}-static"):
        path = shutil.which(name)
        if path:
            return (path, "-L", f"/usr/{arch}-linux-gnu")
    return None


@functools.cache
def _compiler_arch(compiler: str) -> str:
    """The architecture `compiler` makes code for (its -dumpmachine, e.g. aarch64-linux-gnu)."""
    try:
        proc = subprocess.run([compiler, "-dumpmachine"], capture_output=True, text=True,
                              timeout=30)
    except (OSError, subprocess.TimeoutExpired) as err:
        raise TargetError(f"cannot run C compiler {compiler!r}: {err}") from err
    machine = proc.stdout.strip().split("-")[0]
    return {"amd64": "x86_64", "arm64": "aarch64"}.get(machine, machine)


def check_cross_compiler(target: Target) -> None:
    """Raise TargetError when `target`'s compiler does not make code of its architecture."""
    made = _compiler_arch(target.compiler)
    if made != target.arch:
        raise TargetError(
            f"{target.name} builds need a C compiler for {target.arch}, but {target.compiler} "
            f"makes {made or 'unknown'} code: install {debian_packages(target.arch)} "
            f"(Debian) or pass Target({target.name!r}, compiler=...)")


def emulated_module(func: PrimFunc, target: Target, source: str, lib_path: Path,
                    cache_dir: str | Path | None = None) -> EmulatedModule:
    """The module that runs `func`, built for another architecture at `lib_path`, under
    qemu-user (TargetError when no emulator of that architecture is installed)."""
    if emulator(target.arch) is None:
        raise TargetError(
            f"kernel {func.name} for {target} was built ({lib_path}), but this {host_arch()} "
            f"host cannot run it: install qemu-user (Debian) to run it under emulation")
    return EmulatedModule(func, target, source, lib_path, cache_dir)


class EmulatedModule(Module):
    """A kernel of another architecture: `mod(*arrays)` checks the arrays as a Module does and
    runs the kernel on them in an emulated process; `time` raises EmulationError."""

    def __init__(self, func: PrimFunc, target: Target, source: str, lib_path: Path,
                 cache_dir: str | Path | None = None) -> None:
        self.func, self.target, self.source, self.lib_path = func, target, source, lib_path
        self.cache_dir = cache_dir
        self._describe_params(func)  # (not Module.__init__: it loads the library here)
        self._nbytes = [math.prod(p.shape) * d.itemsize
                        for p, d in zip(func.params, self._dtypes)]
        self._entry = self._run

    def __repr__(self) -> str:
        return f"EmulatedModule({self.func.name}, {self.lib_path.name}, {self.target.arch})"

    def time_all(self, *arrays: np.ndarray, **options: object) -> list[float]:
        raise timing_refused(f"kernel {self.func.name}", self.target)

    def spans(self, args: ctypes.Array) -> list[Span]:
        """The span of each argument in a packed argument vector (Module._pack's)."""
        return list(zip(args, self._nbytes, self._is_output))

    def _run(self, args: ctypes.Array) -> int:
        """tessel_entry under emulation: the kernel's status."""
        status, _ = run_calls([(self.lib_path, self.spans(args))], self.target, self.cache_dir,
                              f"kernel {self.func.name}")
        return status


class EmulatedSequence:
    """A model's bound kernel calls run in order in one emulated process (KernelSequence for
    another architecture); errors name the kernel that failed."""

    def __init__(self, calls: list[BoundCall], target: Target) -> None:
        self.calls, self.target = list(calls), target

    def __call__(self) -> None:
        if not self.calls:
            return
        first = self.calls[0].module
        status, failed = run_calls([(c.module.lib_path, c.module.spans(c.args))
                                    for c in self.calls], self.target, first.cache_dir,
                                   f"{len(self.calls)} kernels from {first.func.name} on")
        if status != 0:
            self.calls[failed].module.check_status(status)


def kernel_sequence(calls: list[BoundCall], target: Target) -> KernelSequence | EmulatedSequence:
    """What runs a model's bound calls in order: from C, or under emulation for a target of
    another architecture."""
    return EmulatedSequence(calls, target) if is_foreign(target) else KernelSequence(calls,
                                                                                     target)


def timing_refused(what: str, target: Target) -> EmulationError:
    arch = _ARCH_NAMES.get(target.arch, target.arch)
    return EmulationError(f"{what} cannot be timed under emulation: qemu-user's timings say "
                          f"nothing about an {arch} CPU")


def check_timeable(runner: object, what: str) -> None:
    """Raise EmulationError when `runner` (a module or a kernel sequence) runs emulated."""
    if isinstance(runner, (EmulatedModule, EmulatedSequence)):
        raise timing_refused(what, runner.target)


# ---- the loader and its request ----


def run_calls(calls: list[tuple[Path, list[Span]]], target: Target,
              cache_dir: str | Path | None, what: str) -> tuple[int, int]:
    """Run each (library, argument spans) call in order in one emulated process on the host
    memory the spans address, write back what the calls write; (status, failing call)."""
    blocks = _blocks([span for _, spans in calls for span in spans])
    reply = _run_loader(_request(calls, blocks), target, cache_dir, what)
    written = sum(end - start for start, end, w in blocks if w)
    if len(reply) != 8 + written:
        raise EmulationError(f"{what}: the loader answered {len(reply)} bytes, not "
                             f"{8 + written}")
    status, failed = struct.unpack_from("<ii", reply)
    offset = 8
    for start, end, w in blocks:
        if w:
            ctypes.memmove(start, reply[offset:offset + end - start], end - start)
            offset += end - start
    return status, failed


def _request(calls: list[tuple[Path, list[Span]]], blocks: list[Block]) -> bytes:
    """The loader's standard input (the layout its C reads): libraries, blocks with their
    bytes, then each call's library and its arguments as (block, offset)."""
    libs = sorted({lib for lib, _ in calls})
    request = bytearray(_i64(len(libs)))
    for lib in libs:
        path = str(lib).encode()
        request += _i64(len(path)) + path
    request += _i64(len(blocks))
    for start, end, written in blocks:
        request += _i64(end - start) + _i64(start % ALIGN_BYTES) + _i64(written)
        request += ctypes.string_at(start, end - start)
    request += _i64(len(calls))
    starts = [start for start, _, _ in blocks]
    for lib, spans in calls:
        request += _i64(libs.index(lib)) + _i64(len(spans))
        for address, _, _ in spans:
            b = bisect.bisect_right(starts, address) - 1
            request += _i64(b) + _i64(address - starts[b])
    return bytes(request)


def _i64(value: int) -> bytes:
    return struct.pack("<q", value)


def _blocks(spans: list[Span]) -> list[Block]:
    """The host memory the spans cover as disjoint (start, end, written) blocks: overlapping
    spans (a reshape's alias, a concat's slices) share one block."""
    out: list[list] = []
    for address, nbytes, written in sorted(spans):
        end = address + max(nbytes, 1)
        if out and address < out[-1][1]:
            out[-1][1] = max(out[-1][1], end)
            out[-1][2] = out[-1][2] or written
        else:
            out.append([address, end, written])
    return [tuple(block) for block in out]


def _run_loader(request: bytes, target: Target, cache_dir: str | Path | None,
                what: str) -> bytes:
    """The loader's standard output for `request`, run under qemu-user."""
    prefix = emulator(target.arch)
    if prefix is None:
        raise EmulationError(f"{what}: no qemu-{target.arch} on PATH; install qemu-user")
    cmd = [*prefix, str(loader_path(target, cache_dir))]
    proc = subprocess.run(cmd, input=request, capture_output=True)
    if proc.returncode != 0 or len(proc.stdout) < 8:
        said = proc.stderr.decode(errors="replace").strip().splitlines()
        raise EmulationError(f"{what} failed under {Path(prefix[0]).name} (exit "
                             f"{proc.returncode}): {said[-1] if said else 'no message'}")
    return proc.stdout


def loader_path(target: Target, cache_dir: str | Path | None = None) -> Path:
    """The loader program for `target`'s architecture, compiled once with its compiler and
    cached like the kernels."""
    return compile_cached(_LOADER_C, target, ("-O2", "-std=gnu11"), ("-ldl",), ".loader",
                          cache_dir=cache_dir)


__all__ = ["EmulatedModule", "EmulatedSequence", "EmulationError", "emulated_module",
           "check_cross_compiler", "check_timeable", "debian_packages", "emulator",
           "is_foreign", "kernel_sequence", "loader_path", "run_calls"]
