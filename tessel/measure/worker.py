"""The measuring process: loads compiled kernels with ctypes, checks and times them.

Started by `tessel.measure.session.DeviceSession` (a `tessel.measure.process.WorkerProcess`) as
`python -m tessel.measure.worker`; it reads length-prefixed pickled requests on stdin and
answers on stdout (tessel.measure.child: anything a kernel prints to stdout goes to stderr
instead, and the process dies with its parent). A kernel that segfaults, aborts or hangs takes
only this process down; the parent turns that into an error result and starts a new one.

Requests (dicts, "op" says which):
    reference  run the unscheduled program once on seeded inputs; keep its outputs under "key"
    measure    run the candidate once, compare with a kept reference, then time it
Replies: {"costs": [...]} or {"ok": True}, or {"error": kind, "msg": text}.

A candidate's first call cannot be interrupted, and random programs of a conv can run seconds
a call where the best runs in a fraction of a millisecond. When a best is known
(`stop_above_s`), a watchdog answers for a first call that outlasts CUT_RATIO times that limit
(and CUT_MIN_S): {"error": "timeout", "msg": ..., "cut": True}; the parent then kills this
process and the next request starts a fresh one (about 0.4 s, the reference outputs read back
from the file a slow reference run leaves beside its library instead of computed again).
"""
from __future__ import annotations

import ctypes
import math
import os
import sys
import threading
import time
import traceback
from collections import OrderedDict
from typing import Any

import numpy as np

from tessel.codegen.compiler import compile_shared
from tessel.codegen.module import (IN_MODEL_MAX_NUMBER, aligned, aligned_empty, calibrate,
                                   load_library, numpy_dtype)
from tessel.measure.child import serve
from tessel.target import Target

_ARGS = ctypes.POINTER(ctypes.c_void_p)
_FAR_BEYOND = 3.0  # a checked call this many times stop_above_s is the candidate's cost...
_FAR_MIN_S = 0.02  # ...if it also lasted this long (a first call's fresh pages: microseconds)
_FIRST_BATCH_S = 1e-3  # a timing against stop_above_s lasts at least about this long
_KEPT_REFERENCES = 4
REFERENCE_MISSING = "reference_missing"  # an internal error kind: the session retries
_KEPT_INPUTS = 2
CUT_RATIO = 30.0  # a first call past this many times stop_above_s (at least CUT_MIN_S) is cut
CUT_MIN_S = 0.25  # ...it costs this plus a restart instead of its whole length (1-5 s)
_SAVE_REFERENCE_S = 0.05  # a reference run this slow is saved beside its library
_FLUSH_SOURCE = """\
#define _POSIX_C_SOURCE 200809L
#include <stdint.h>
#include <time.h>
typedef int32_t (*tessel_entry_fn)(void**);
/* Like tessel_time, but each repeat first writes every cache line of `flush` (sized to the
   last-level cache), so the first call of a repeat starts from a cold cache. */
int32_t tessel_time_flushed(tessel_entry_fn entry, void** args, int32_t number, int32_t repeat,
                            volatile char* flush, int64_t flush_bytes, double* out_secs) {
    int32_t status = 0;
    for (int32_t r = 0; status == 0 && r < repeat; ++r) {
        for (int64_t i = 0; i < flush_bytes; i += 64) flush[i] += 1;
        struct timespec start, stop;
        clock_gettime(CLOCK_MONOTONIC, &start);
        for (int32_t n = 0; status == 0 && n < number; ++n) status = entry(args);
        clock_gettime(CLOCK_MONOTONIC, &stop);
        out_secs[r] = ((double)(stop.tv_sec - start.tv_sec)
                       + 1e-9 * (double)(stop.tv_nsec - start.tv_nsec)) / number;
    }
    return status;
}
"""


class KernelFailure(Exception):
    """A kernel misbehaved in a way the process survives; `kind` is a MeasureResult error kind."""

    def __init__(self, kind: str, msg: str) -> None:
        super().__init__(msg)
        self.kind = kind


# ---- arrays ----

def random_input(rng: np.random.Generator, name: str, shape: tuple, dtype: str) -> np.ndarray:
    """As tessel.ops.reference_inputs: small ints, uniform floats (positive for `var`)."""
    np_dtype = numpy_dtype(dtype)
    if np_dtype == np.bool_:
        return rng.integers(0, 2, size=shape).astype(np.bool_)
    if np.issubdtype(np_dtype, np.integer):
        low = 0 if np.issubdtype(np_dtype, np.unsignedinteger) else -8
        return rng.integers(low, 9, size=shape).astype(np_dtype)
    low, high = (0.5, 1.5) if name == "var" else (-1.0, 1.0)
    return rng.uniform(low, high, size=shape).astype(np_dtype)


def sentinel_output(shape: tuple, dtype: str) -> np.ndarray:
    """An output buffer whose every element a correct kernel overwrites (NaN for floats), on
    a cache line as a compiled model's arrays are (tessel.graph.runtime)."""
    np_dtype = numpy_dtype(dtype)
    out = aligned_empty(tuple(shape), np_dtype)
    if np_dtype == np.bool_:
        out.fill(True)
    elif np.issubdtype(np_dtype, np.integer):
        out.fill(np.iinfo(np_dtype).max)
    else:
        out.fill(np.nan)
    return out


def mismatch(out: np.ndarray, ref: np.ndarray, rtol: float, atol: float) -> str | None:
    """None if `out` matches `ref` (exactly for ints and bools; within rtol and atol scaled by
    the largest finite |ref| for floats, NaN only where ref has NaN), else what differs."""
    if out.dtype.kind in "iub":
        bad = out != ref
    else:
        finite = np.abs(ref[np.isfinite(ref)])
        scale = max(1.0, float(finite.max())) if finite.size else 1.0
        bad = ~np.isclose(out, ref, rtol=rtol, atol=atol * scale, equal_nan=True)
    count = int(np.count_nonzero(bad))
    if count == 0:
        return None
    first = tuple(int(i) for i in np.argwhere(bad)[0])
    got, want = out[first].item(), ref[first].item()
    return (f"{count} of {out.size} elements differ (first at {first}: got {got!r}, "
            f"expected {want!r}; rtol {rtol:g}, atol {atol:g})")


# ---- the process state ----

class _Answered(Exception):
    """The watchdog has answered for this request: the handler sends nothing more."""


class Watchdog:
    """Guards one kernel call: if it outlasts `secs` (0: never), sends the cut-off reply for
    it from a timer thread. Exactly one of the watchdog and the guarded code answers."""

    def __init__(self, secs: float, send: Any) -> None:
        self.secs, self.send = secs, send
        self.lock = threading.Lock()
        self.done = self.fired = False
        self.timer: threading.Timer | None = None

    def __enter__(self) -> "Watchdog":
        self.start = time.perf_counter()
        if self.secs > 0 and self.send is not None:
            self.timer = threading.Timer(self.secs, self._fire)
            self.timer.daemon = True
            self.timer.start()
        return self

    def _fire(self) -> None:
        with self.lock:
            if self.done:
                return
            self.fired = True
        self.send({"error": "timeout", "cut": True,
                   "msg": f"the first call was still running after {self.secs:.3g} s "
                          f"({CUT_RATIO:g}x the limit the best so far sets, at least "
                          f"{CUT_MIN_S:g} s); cut off, its measuring process killed"})

    def __exit__(self, *exc: object) -> None:
        with self.lock:
            self.done = True
        if self.timer is not None:
            self.timer.cancel()
        if self.fired:
            raise _Answered


class Worker:
    """Loaded libraries, cached inputs and reference outputs of one measuring process."""

    def __init__(self) -> None:
        self.references: OrderedDict[str, tuple[np.ndarray, ...]] = OrderedDict()
        self.inputs: OrderedDict[tuple, tuple[np.ndarray, ...]] = OrderedDict()
        self.flush_timer: Any = None
        self.flush_buffer: np.ndarray | None = None
        self.send: Any = None  # serve's reply function (the watchdog answers through it)

    def bind(self, send: Any) -> None:
        self.send = send

    def handle(self, request: dict) -> dict | None:
        try:
            if request["op"] == "ping":
                return {"ok": True, "pid": os.getpid()}
            if request["op"] == "reference":
                return self.reference(request)
            if request["op"] == "measure":
                costs, stopped = self.measure(request)
                return {"costs": costs, "stopped": stopped}
            return {"error": "runtime_error", "msg": f"unknown request {request['op']!r}"}
        except _Answered:
            return None
        except KernelFailure as err:
            return {"error": err.kind, "msg": str(err)}
        except Exception:  # noqa: BLE001 - report, keep serving
            return {"error": "runtime_error", "msg": traceback.format_exc(limit=4)}

    def reference(self, request: dict) -> dict:
        saved = f"{request['lib']}.seed{request['seed']}.npz"
        args, outputs = self.arguments(request["params"], request["seed"])
        try:  # a slow reference run is saved beside its library: a fresh process reads it
            with np.load(saved) as data:
                kept = tuple(data[f"out{k}"] for k in range(len(outputs)))
        except (OSError, KeyError, ValueError):
            lib = load_library(request["lib"])
            start = time.perf_counter()
            _check_status(lib.tessel_entry(args), "reference program")
            kept = tuple(o.copy() for o in outputs)
            if time.perf_counter() - start > _SAVE_REFERENCE_S:
                _save(saved, kept)
        self.references[request["key"]] = kept
        while len(self.references) > _KEPT_REFERENCES:
            self.references.popitem(last=False)
        return {"ok": True}

    def measure(self, request: dict) -> tuple[list[float], bool]:
        """The costs of every repeat, and whether timing stopped after one call (a candidate
        slower than the request's `stop_above_s`)."""
        lib = load_library(request["lib"])
        config = request["config"]
        args, outputs = self.arguments(request["params"], config["seed"])
        limit = config.get("stop_above_s", 0.0)
        cut = max(CUT_MIN_S, CUT_RATIO * limit) if limit > 0 else 0.0
        with Watchdog(cut, self.send) as guard:
            status = lib.tessel_entry(args)
        first = time.perf_counter() - guard.start
        _check_status(status, "kernel")
        if request.get("check") is not None:
            self.compare(outputs, request["check"])
        if 0 < limit and first > max(limit * _FAR_BEYOND, _FAR_MIN_S):
            # far past the limit (cold caches and fresh pages cannot explain it): the checked
            # call is its one timing; random programs, often 30-1000x the best, cost one call
            return [first], True
        # a first call already slower than the limit is warm-up enough for the deciding one
        for _ in range(config["warmup"] if not 0 < limit < first else 0):
            _check_status(lib.tessel_entry(args), "kernel")
        if limit > 0:
            slow = _slower_than(lib, args, limit)
            if slow is not None:
                return [slow], True
        number, in_model = config["number"], config.get("in_model_sweep", 0) > 0
        if config["min_repeat_ms"] > 0:
            number = calibrate(lambda n: _time(lib, args, n, 1)[0], number,
                               config["min_repeat_ms"] / 1e3,
                               IN_MODEL_MAX_NUMBER if in_model else None)
        if in_model:
            return _time_in_model(lib, args, min(number, IN_MODEL_MAX_NUMBER), config["repeat"],
                                  config["in_model_sweep"]), False
        if config["flush_bytes"] > 0:
            return self.time_flushed(lib, args, number, config["repeat"],
                                     config["flush_bytes"]), False
        return _time(lib, args, number, config["repeat"]), False

    def compare(self, outputs: list[np.ndarray], check: dict) -> None:
        reference = self.references.get(check["key"])
        if reference is None:  # evicted: the session loads it again and retries
            raise KernelFailure(REFERENCE_MISSING, "reference output missing in the worker")
        self.references.move_to_end(check["key"])
        for k, (out, ref) in enumerate(zip(outputs, reference)):
            problem = mismatch(out, ref, check["rtol"], check["atol"])
            if problem is not None:
                raise KernelFailure("wrong_result", f"output {k}: {problem}")

    def arguments(self, params: list, seed: int) -> tuple[ctypes.Array, list[np.ndarray]]:
        """The C argument array: cached seeded inputs, fresh sentinel outputs."""
        inputs = self.seeded_inputs(params, seed)
        outputs = [sentinel_output(shape, dtype) for _, shape, dtype, out in params if out]
        it_in, it_out = iter(inputs), iter(outputs)
        arrays = [next(it_out) if out else next(it_in) for _, _, _, out in params]
        return (ctypes.c_void_p * len(arrays))(*[a.ctypes.data for a in arrays]), outputs

    def seeded_inputs(self, params: list, seed: int) -> tuple[np.ndarray, ...]:
        key = (tuple((n, tuple(s), d) for n, s, d, out in params if not out), seed)
        if key not in self.inputs:
            rng = np.random.default_rng(seed)
            # on cache lines, as a compiled model's arrays are (tessel.graph.runtime)
            self.inputs[key] = tuple(aligned(random_input(rng, n, tuple(s), d))
                                     for n, s, d in key[0])
            while len(self.inputs) > _KEPT_INPUTS:
                self.inputs.popitem(last=False)
        return self.inputs[key]

    def time_flushed(self, lib, args, number: int, repeat: int, flush_bytes: int) -> list[float]:
        if self.flush_timer is None:
            self.flush_timer = _flush_timer()
        if self.flush_buffer is None or self.flush_buffer.size != flush_bytes:
            self.flush_buffer = np.zeros(flush_bytes, np.uint8)
        out = (ctypes.c_double * repeat)()
        entry = ctypes.cast(lib.tessel_entry, ctypes.c_void_p)
        status = self.flush_timer[1](entry, args, number, repeat,
                                  ctypes.c_void_p(self.flush_buffer.ctypes.data), flush_bytes, out)
        _check_status(status, "kernel")
        return list(out)


def _save(path: str, outputs: tuple[np.ndarray, ...]) -> None:
    """Write the outputs to `path` whole or not at all (a temporary file renamed)."""
    tmp = f"{path}.{os.getpid()}.tmp.npz"
    try:
        np.savez(tmp, **{f"out{k}": o for k, o in enumerate(outputs)})
        os.replace(tmp, path)
    except OSError:  # a read-only cache: the reference is computed again after a restart
        if os.path.exists(tmp):
            os.remove(tmp)


def _check_status(status: int, what: str) -> None:
    if status != 0:
        reason = " (memory allocation failed)" if status == 1 else ""
        raise KernelFailure("runtime_error", f"{what} returned status {status}{reason}")


def _time(lib: ctypes.CDLL, args, number: int, repeat: int) -> list[float]:
    out = (ctypes.c_double * repeat)()
    _check_status(lib.tessel_time(args, number, repeat, out), "kernel")
    return list(out)


def _time_in_model(lib: ctypes.CDLL, args, number: int, repeat: int,
                   sweep_bytes: int) -> list[float]:
    """tessel_time_in_model (generated code: tessel.codegen.c): each call timed alone from
    the caches a model leaves it."""
    fn = getattr(lib, "tessel_time_in_model", None)  # (its types set by _load)
    if fn is None:
        raise KernelFailure("runtime_error", "the library has no tessel_time_in_model: a "
                            "workload measured in_model needs a generated kernel")
    out = (ctypes.c_double * repeat)()
    _check_status(fn(args, number, repeat, out, sweep_bytes), "kernel")
    return list(out)


def _slower_than(lib: ctypes.CDLL, args, limit: float) -> float | None:
    """Seconds per call if the kernel is slower than `limit`, else None. One call decides,
    unless it lasted under _FIRST_BATCH_S (noise at that scale): then a batch that long."""
    number = 1
    while True:
        secs = _time(lib, args, number, 1)[0]
        if secs <= limit:
            return None
        if secs * number >= _FIRST_BATCH_S or number > 1:
            return secs
        number = math.ceil(_FIRST_BATCH_S / secs)


def _flush_timer() -> Any:
    lib = ctypes.CDLL(str(compile_shared(_FLUSH_SOURCE, Target("host"))))
    fn = lib.tessel_time_flushed
    fn.argtypes = [ctypes.c_void_p, _ARGS, ctypes.c_int32, ctypes.c_int32, ctypes.c_void_p,
                   ctypes.c_int64, ctypes.POINTER(ctypes.c_double)]
    fn.restype = ctypes.c_int32
    return lib, fn  # the function is valid only while its library is loaded


def main() -> None:
    worker = Worker()
    serve(worker.handle, bind=worker.bind)


if __name__ == "__main__":
    sys.exit(main())
