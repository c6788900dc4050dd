"""Build a PrimFunc into a loaded shared library and call or time it on numpy arrays.

    mod = build(func)               # tessel.codegen.build: generate C, compile, load here
    mod(a, b, c)                    # outputs are written in place
    secs = mod.time(a, b, c, number=10, repeat=3)
"""
from __future__ import annotations

import ctypes
import faulthandler
import math
import statistics
from pathlib import Path
from typing import Callable

import numpy as np

from tessel.codegen.c import ALIGN_BYTES, ALLOC_FAILED
from tessel.codegen.compiler import asm_for, compile_shared
from tessel.errors import TesselError
from tessel.ir import Buffer, PrimFunc, numpy_dtype
from tessel.target import Target

_ARGS = ctypes.POINTER(ctypes.c_void_p)
IN_MODEL_MAX_NUMBER = 8  # calls per batch timed in_model at most: each has a cache sweep first
SWEEP_MAX_BYTES = 32 << 20  # the sweep's bytes at most


def sweep_bytes(target: Target) -> int:
    """Bytes of the cache sweep before each call timed in_model: the last-level cache's, at
    most SWEEP_MAX_BYTES. Everything the kernel's arguments hold is flushed from every level
    by itself (tessel_evict), so the sweep has only the kernel's scratch and the private
    caches to clear; a last-level cache of hundreds of MB (a VM's: 480 MB on a 2-core Xeon;
    a large server's) took 72 ms to sweep before each call, 1.8 s of a candidate's 1.9 s,
    where 32 MB ordered the priors of seven MobileNet-v2 kernels the same but for ties
    within the noise (2026-11-28)."""
    return min(target.l3_bytes, SWEEP_MAX_BYTES)


_GROWTH = 1.618  # how fast `number` grows while calibrating for min_repeat_ms (as in TVM)
_MAX_NUMBER = 2**31 - 1


def calibrate(time_batch: Callable[[int], float], number: int, min_secs: float,
              cap: int | None = None) -> int:
    """Grow `number` until one batch of that many calls lasts at least `min_secs`
    (`time_batch(n)`: the seconds per call of a batch of n), or until it reaches `cap` (the
    calls a batch will make at most: timing in_model makes IN_MODEL_MAX_NUMBER, so growing
    further, 500 calls of a 30 us kernel, would only be thrown away)."""
    cap = _MAX_NUMBER if cap is None else cap
    while number < cap:
        batch_secs = time_batch(number) * number
        if batch_secs >= min_secs:
            break
        wanted = min_secs / max(batch_secs / number, 1e-9) * _GROWTH
        number = min(cap, max(math.ceil(number * _GROWTH), math.ceil(wanted)))
    return number


def load_library(path: str | Path) -> ctypes.CDLL:
    """A kernel's shared library, loaded with the C types of tessel_entry, tessel_time and
    tessel_time_in_model (generated code has it; hand-written C may not) set."""
    lib = ctypes.CDLL(str(path))
    lib.tessel_entry.argtypes, lib.tessel_entry.restype = [_ARGS], ctypes.c_int32
    lib.tessel_time.argtypes = [_ARGS, ctypes.c_int32, ctypes.c_int32,
                                ctypes.POINTER(ctypes.c_double)]
    lib.tessel_time.restype = ctypes.c_int32
    in_model = getattr(lib, "tessel_time_in_model", None)
    if in_model is not None:
        in_model.argtypes = [*lib.tessel_time.argtypes, ctypes.c_int64]
        in_model.restype = ctypes.c_int32
    return lib


def aligned_empty(shape: int | tuple[int, ...], dtype: str | np.dtype = np.uint8,
                  align: int = ALIGN_BYTES) -> np.ndarray:
    """An uninitialized C-contiguous array whose data starts on an `align`-byte boundary (a
    cache line): a 64-byte vector load from numpy's 16-byte-aligned memory straddles two
    lines."""
    dtype = np.dtype(dtype)
    shape = (shape,) if isinstance(shape, int) else tuple(shape)
    nbytes = math.prod(shape) * dtype.itemsize
    raw = np.empty(nbytes + align, np.uint8)
    start = -raw.ctypes.data % align
    return raw[start:start + nbytes].view(dtype).reshape(shape)


def aligned(array: np.ndarray, align: int = ALIGN_BYTES) -> np.ndarray:
    """`array` itself when C-contiguous and `align`-byte aligned, else such a copy."""
    if array.flags.c_contiguous and array.ctypes.data % align == 0:
        return array
    out = aligned_empty(array.shape, array.dtype, align)
    np.copyto(out, array)
    return out


class ArgumentError(TesselError, TypeError, ValueError):
    """A built module called with arrays it cannot take (count, type, dtype, shape, layout,
    overlap) or bad timing arguments; also a TypeError and a ValueError, as numpy's are."""


class KernelError(TesselError, RuntimeError):
    """A kernel returned a failure status (memory allocation failed)."""


class Module:
    """A compiled PrimFunc: `mod(*arrays)` runs it, `mod.time(*arrays)` measures it."""

    def __init__(self, func: PrimFunc, target: Target, source: str, lib_path: Path) -> None:
        self.func, self.target, self.source, self.lib_path = func, target, source, lib_path
        target.check_runs_here(f"kernel {func.name}")  # its instructions: SIGILL otherwise
        if not faulthandler.is_enabled():
            # a kernel that crashes (a hand-written program reading out of bounds) takes the
            # interpreter down: say where, instead of dying silently
            faulthandler.enable()
        self._lib = load_library(lib_path)
        self._entry, self._time = self._lib.tessel_entry, self._lib.tessel_time
        self._time_in_model = getattr(self._lib, "tessel_time_in_model", None)
        self._describe_params(func)

    def _describe_params(self, func: PrimFunc) -> None:
        """What the argument checks and the C argument vector need of `func`'s parameters."""
        self._params = func.params
        self._dtypes = [numpy_dtype(p.dtype) for p in func.params]
        outputs = set(func.outputs)
        self._is_output = [p in outputs for p in func.params]
        self._arg_array = ctypes.c_void_p * len(func.params)

    def __repr__(self) -> str:
        return f"Module({self.func.name}, {self.lib_path.name})"

    def asm(self) -> str:
        """The assembly the target's compiler makes of this module's C source."""
        return asm_for(self.source, self.target)

    def __call__(self, *arrays: np.ndarray) -> None:
        self.check_status(self._entry(self._pack(arrays)))

    def bind(self, *arrays: np.ndarray) -> BoundCall:
        """Check the arguments once and return a call without arguments that runs the kernel
        on them (a compiled model's arrays live as long as the model)."""
        return BoundCall(self, self._pack(arrays), arrays)

    def time(self, *arrays: np.ndarray, number: int = 10, repeat: int = 3,
             min_repeat_ms: float = 10.0, in_model: bool = False) -> float:
        """Median over `repeat` batches of the mean seconds per call in a batch; each batch
        lasts at least `min_repeat_ms` (as the tuner's runner times candidates: a batch of a
        few tens of microseconds measures the thread pool waking up). With `in_model`, each call
        is timed alone from the caches a model leaves it (as the tuner times a model's
        kernels: tessel.ir.MEASURE)."""
        return statistics.median(self.time_all(*arrays, number=number, repeat=repeat,
                                               min_repeat_ms=min_repeat_ms, in_model=in_model))

    def time_all(self, *arrays: np.ndarray, number: int = 10, repeat: int = 3,
                 min_repeat_ms: float = 10.0, in_model: bool = False) -> list[float]:
        """Mean seconds per call of each of `repeat` batches of `number` calls (after one
        warm-up call). With min_repeat_ms > 0, `number` first grows until a batch lasts that
        long (timed warm, also `in_model`)."""
        for key, value in (("number", number), ("repeat", repeat)):
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ArgumentError(f"{key} must be a positive int, got {value!r}")
        args = self._pack(arrays)
        if min_repeat_ms > 0:
            number = calibrate(lambda n: self._run_timed(args, n, 1)[0], number,
                               min_repeat_ms / 1e3,
                               IN_MODEL_MAX_NUMBER if in_model else None)
        return self._run_timed(args, number, repeat, in_model)

    def _run_timed(self, args, number: int, repeat: int, in_model: bool = False) -> list[float]:
        out = (ctypes.c_double * repeat)()
        if not in_model:
            self.check_status(self._time(args, number, repeat, out))
            return list(out)
        if self._time_in_model is None:
            raise ArgumentError(f"kernel {self.func.name}: its library has no "
                             "tessel_time_in_model (hand-written C?)")
        self.check_status(self._time_in_model(args, min(number, IN_MODEL_MAX_NUMBER), repeat,
                                               out, sweep_bytes(self.target)))
        return list(out)

    def check_status(self, status: int) -> None:
        """Raise KernelError for a failing status of this kernel (0: it ran)."""
        if status == ALLOC_FAILED:
            raise KernelError(f"kernel {self.func.name}: memory allocation failed")
        if status != 0:
            raise KernelError(f"kernel {self.func.name} failed with status {status}")

    # ---- argument checking ----

    def _pack(self, arrays: tuple[np.ndarray, ...]) -> ctypes.Array:
        """Validate the arguments and return the C `void*[]` pointing at their data."""
        params = self._params
        if len(arrays) != len(params):
            names = ", ".join(p.name for p in params)
            raise ArgumentError(f"{self.func.name} takes {len(params)} arrays ({names}), "
                            f"got {len(arrays)}")
        for k, (param, array) in enumerate(zip(params, arrays)):
            self._check_array(k, param, array)
        for k, array in enumerate(arrays):
            if self._is_output[k]:
                self._check_not_aliased(k, arrays)
        return self._arg_array(*[a.ctypes.data for a in arrays])

    def _label(self, k: int) -> str:
        kind = "output" if self._is_output[k] else "input"
        return f"{self.func.name}: {kind} {self._params[k].name} (argument {k})"

    def _check_array(self, k: int, param: Buffer, array: object) -> None:
        if not isinstance(array, np.ndarray):
            raise ArgumentError(f"{self._label(k)} must be a numpy.ndarray, got "
                            f"{type(array).__name__}")
        if array.dtype != self._dtypes[k]:
            raise ArgumentError(f"{self._label(k)} must have dtype {self._dtypes[k]}, got "
                            f"{array.dtype}; convert it with .astype() first")
        if array.shape != param.shape:
            raise ArgumentError(f"{self._label(k)} must have shape {param.shape}, got "
                                f"{array.shape}")
        flags = array.flags
        if not (flags.c_contiguous and flags.aligned):
            raise ArgumentError(f"{self._label(k)} must be C-contiguous and aligned; pass "
                             "np.ascontiguousarray(...)")
        if self._is_output[k] and not flags.writeable:
            raise ArgumentError(f"{self._label(k)} is read-only, but the kernel writes it")

    def _check_not_aliased(self, k: int, arrays: tuple[np.ndarray, ...]) -> None:
        for j, other in enumerate(arrays):
            if j != k and np.shares_memory(arrays[k], other):
                raise ArgumentError(f"{self._label(k)} shares memory with {self._params[j].name} "
                                 f"(argument {j}); outputs must not overlap other arguments")


class BoundCall:
    """A kernel bound to its arrays (Module.bind): `call()` runs it; `entry` and `args` are
    the C function and its argument vector, for a caller that runs many calls from C
    (KernelSequence)."""

    __slots__ = ("module", "args", "arrays")

    def __init__(self, module: Module, args: ctypes.Array, arrays: tuple[np.ndarray, ...]):
        self.module, self.args, self.arrays = module, args, arrays  # arrays: kept alive

    def __call__(self) -> None:
        self.module.check_status(self.module._entry(self.args))

    @property
    def entry(self) -> int:
        return ctypes.cast(self.module._entry, ctypes.c_void_p).value


_SEQUENCE_C = """#include <stdint.h>
/* runs a model's kernels in order; the first failing one stops the run (its index in
   *failed, its status returned) */
typedef int32_t (*tessel_entry_fn)(void**);
int32_t tessel_run_sequence(int32_t n, void** entries, void*** args, int32_t* failed) {
    for (int32_t i = 0; i < n; ++i) {
        int32_t status = ((tessel_entry_fn)entries[i])(args[i]);
        if (status != 0) {
            *failed = i;
            return status;
        }
    }
    return 0;
}
"""


class KernelSequence:
    """Bound kernel calls run in order by one C call: a model's run pays the interpreter's
    call overhead once, not per kernel (about 1 us each: MobileNet-v2's 54 kernels took 2.03
    ms from a Python loop, 1.98 ms from C). Errors name the kernel that failed, as its own
    call does."""

    def __init__(self, calls: list[BoundCall], target: Target) -> None:
        self.calls = list(calls)
        lib = ctypes.CDLL(str(compile_shared(_SEQUENCE_C, target)))
        self._run = lib.tessel_run_sequence
        self._run.argtypes = [ctypes.c_int32, ctypes.c_void_p, ctypes.c_void_p,
                              ctypes.POINTER(ctypes.c_int32)]
        self._run.restype = ctypes.c_int32
        n = len(self.calls)
        self._entries = (ctypes.c_void_p * n)(*[c.entry for c in self.calls])
        self._args = (ctypes.c_void_p * n)(*[ctypes.addressof(c.args) for c in self.calls])
        self._failed = ctypes.c_int32(-1)

    def __call__(self) -> None:
        status = self._run(len(self.calls), self._entries, self._args,
                           ctypes.byref(self._failed))
        if status != 0:
            self.calls[self._failed.value].module.check_status(status)
