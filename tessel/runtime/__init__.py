"""Run a model exported by `tessel export` with numpy alone: no compiler, no tuning records,
no onnx, no torch, not even the rest of tessel.

    import tessel.runtime
    model = tessel.runtime.load("resnet18.so")
    (logits,) = model(image)                  # as a CompiledModel: numpy in, numpy out
    model.threads = 1                         # the kernels' OpenMP threads (all models)

An exported model is one shared library (tessel.graph.export writes it): every kernel the model
runs, its call sequence and memory plan, its packed weights, and C entry points that this
module calls through ctypes and that the C header (`header_path()`, tessel_runtime.h) calls
from C. The library ends in a trailer, read before anything in the file runs:

    meta (JSON, utf-8) | u32 meta bytes | u32 ABI version | u64 file bytes | 8-byte magic

so a truncated file (its size disagrees), a foreign one (no magic), one from a tessel whose
ABI differs, and one built for another architecture are refused with one line each before it is
mapped; one built for ISA features this CPU lacks is refused by the library's own check, which
is compiled for the architecture's baseline (no SIGILL).
"""
from __future__ import annotations

import contextlib
import ctypes
import json
import os
import platform
import struct
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

from tessel.errors import TesselError

ABI_VERSION = 1
MAGIC = b"TESSELM\x00"
TRAILER = struct.Struct("<IIQ8s")  # meta bytes, ABI version, file bytes, magic
HEADER_NAME = "tessel_runtime.h"
_ARCH = {"amd64": "x86_64", "x64": "x86_64", "arm64": "aarch64"}


class LoadError(TesselError, OSError):
    """A file that is not an exported model this machine can run: truncated, foreign, from
    another tessel ABI, for another architecture or ISA features this CPU lacks."""


class InputError(TesselError, TypeError, ValueError):
    """Inputs an exported model cannot take: their count, names, shapes, dtypes or layout."""


class RunError(TesselError, RuntimeError):
    """A kernel of an exported model failed (memory allocation, in its scratch buffers)."""


def header_path() -> Path:
    """The C header of the exported models' API (tessel_runtime.h), shipped with tessel."""
    return Path(__file__).with_name(HEADER_NAME)


def read_meta(path: str | os.PathLike) -> dict[str, Any]:
    """The description an exported model's trailer carries (its inputs and outputs, target,
    provenance), read without loading it; LoadError for a file that is not one."""
    path = Path(path)
    try:
        with open(path, "rb") as file:
            size = os.fstat(file.fileno()).st_size
            if size < TRAILER.size:
                raise LoadError(f"{path}: not a model exported by tessel ({size} bytes)")
            file.seek(size - TRAILER.size)
            n_meta, abi, expected, magic = TRAILER.unpack(file.read(TRAILER.size))
            if magic != MAGIC:
                raise LoadError(f"{path}: not a model exported by tessel (no tessel trailer: "
                                "a foreign file, or one cut short)")
            if expected != size:
                raise LoadError(f"{path}: truncated or padded: {size} bytes where the export "
                                f"wrote {expected}")
            if abi != ABI_VERSION:
                raise LoadError(f"{path}: exported with runtime ABI {abi}; this tessel reads "
                                f"ABI {ABI_VERSION}: export the model again with this tessel")
            if n_meta > size - TRAILER.size:
                raise LoadError(f"{path}: damaged trailer (meta of {n_meta} bytes)")
            file.seek(size - TRAILER.size - n_meta)
            meta = json.loads(file.read(n_meta).decode())
    except OSError as err:
        if isinstance(err, LoadError):
            raise
        raise LoadError(f"{path}: cannot read: {err.strerror or err}") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise LoadError(f"{path}: damaged trailer: {err}") from None
    return meta


def host_arch() -> str:
    machine = platform.machine().lower()
    return _ARCH.get(machine, machine)


def _bind(lib: ctypes.CDLL) -> None:
    """The C types of the library's entry points (the ABI: tessel_runtime.h's loader)."""
    c = ctypes
    sigs = {
        "tessel_model_abi_version": ([], c.c_int32),
        "tessel_model_check_cpu": ([c.c_char_p, c.c_int64], c.c_int32),
        "tessel_model_create": ([], c.c_void_p),
        "tessel_model_destroy": ([c.c_void_p], None),
        "tessel_model_buffer": ([c.c_void_p, c.c_int32, c.c_int32], c.c_void_p),
        "tessel_model_run": ([c.c_void_p, c.c_void_p, c.c_void_p, c.c_char_p, c.c_int64],
                             c.c_int32),
        "tessel_model_set_threads": ([c.c_int32], c.c_int32),
        "tessel_model_get_threads": ([], c.c_int32),
    }
    for name, (args, res) in sigs.items():
        fn = getattr(lib, name)
        fn.argtypes, fn.restype = args, res


class ExportedModel:
    """A loaded exported model: `model(*inputs)` (or by name) returns its outputs as a list
    of new arrays, as CompiledModel does. One call at a time per model object (calls from
    several threads wait for each other); load the file again for a second instance."""

    def __init__(self, path: str | os.PathLike) -> None:
        self.path = Path(path)
        self.meta = read_meta(self.path)
        arch = self.meta.get("arch")
        if arch != host_arch():
            raise LoadError(f"{self.path}: built for {arch}; this machine is {host_arch()}")
        try:
            lib = ctypes.CDLL(str(self.path.resolve()))
            _bind(lib)
        except (OSError, AttributeError) as err:
            raise LoadError(f"{self.path}: cannot load: {err}") from None
        message = ctypes.create_string_buffer(512)
        if lib.tessel_model_check_cpu(message, len(message)) != 0:
            raise LoadError(f"{self.path}: {message.value.decode()}")
        self._lib = lib
        self._handle = lib.tessel_model_create()
        if not self._handle:
            raise LoadError(f"{self.path}: cannot allocate the model's "
                            f"{self.meta['arena_bytes']} bytes of activations")
        self.inputs = [_tensor(t) for t in self.meta["inputs"]]
        self.outputs = [_tensor(t) for t in self.meta["outputs"]]
        self.input_names = [t[0] for t in self.inputs]
        self.output_names = [t[0] for t in self.outputs]
        self._message = message
        self._lock = threading.Lock()
        n_in, n_out = len(self.inputs), len(self.outputs)
        self._in_ptrs = (ctypes.c_void_p * max(n_in, 1))()
        self._out_ptrs = (ctypes.c_void_p * max(n_out, 1))()

    def __repr__(self) -> str:
        return (f"ExportedModel({self.meta['name']!r}, {len(self.inputs)} inputs, "
                f"{len(self.outputs)} outputs, {self.meta['target']})")

    def __call__(self, *inputs: np.ndarray, **named: np.ndarray) -> list[np.ndarray]:
        feeds = self._check_inputs(inputs, named)
        outs = [np.empty(shape, dtype) for _, shape, dtype in self.outputs]
        with self._lock:
            if not self._handle:
                raise InputError(f"model {self.meta['name']} was closed")
            for k, (name, _, _) in enumerate(self.inputs):
                self._in_ptrs[k] = feeds[name].ctypes.data
            for k, out in enumerate(outs):
                self._out_ptrs[k] = out.ctypes.data
            status = self._lib.tessel_model_run(self._handle, self._in_ptrs, self._out_ptrs,
                                                self._message, len(self._message))
            if status != 0:
                raise RunError(f"model {self.meta['name']}: {self._message.value.decode()}")
        return outs

    def _check_inputs(self, inputs: tuple, named: dict) -> dict[str, np.ndarray]:
        if inputs and named:
            raise InputError("pass the model's inputs by position or by name, not both")
        feeds = dict(zip(self.input_names, inputs)) if inputs else dict(named)
        if sorted(feeds) != sorted(self.input_names) or len(inputs) > len(self.input_names):
            got = list(feeds) if named else f"{len(inputs)} arrays"
            raise InputError(f"model {self.meta['name']} takes inputs {self.input_names}, "
                             f"got {got}")
        for name, shape, dtype in self.inputs:
            value = feeds[name]
            if not isinstance(value, np.ndarray):
                raise InputError(f"input {name}: expected a numpy array, got "
                                 f"{type(value).__name__}")
            if value.ndim != len(shape) or value.shape != shape:
                raise InputError(f"input {name}: shape {value.shape}, expected {shape}")
            if value.dtype != dtype:
                raise InputError(f"input {name}: dtype {value.dtype}, expected {dtype}")
            if not value.flags.c_contiguous:
                raise InputError(f"input {name}: not C-contiguous; pass "
                                 "np.ascontiguousarray(...)")
        return feeds

    @property
    def threads(self) -> int:
        """The OpenMP threads of the kernels of every model loaded from this file (the
        kernels were tuned for meta["target"]'s cores: more threads than their parallel
        loops have iterations do nothing)."""
        return int(self._lib.tessel_model_get_threads())

    @threads.setter
    def threads(self, n: int) -> None:
        if not isinstance(n, int) or isinstance(n, bool) or n < 1:
            raise InputError(f"threads must be a positive int, got {n!r}")
        self._lib.tessel_model_set_threads(n)

    def random_inputs(self, seed: int = 0) -> list[np.ndarray]:
        """Arrays of the model's input shapes and dtypes, as CompiledModel.random_inputs."""
        return random_arrays([(shape, dtype) for _, shape, dtype in self.inputs], seed)

    def latency(self, budget: float = 0.3, seed: int = 0) -> float:
        """Median seconds of a call on random inputs over about `budget` seconds (one
        warm-up call first, at least 3 timed), as CompiledModel.latency."""
        feeds = self.random_inputs(seed)
        return median_seconds(lambda: self(*feeds), budget)

    def close(self) -> None:
        """Free the model's activations (the library stays mapped while the process runs)."""
        with self._lock:
            if self._handle:
                self._lib.tessel_model_destroy(self._handle)
                self._handle = None

    def __enter__(self) -> "ExportedModel":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        handle = getattr(self, "_handle", None)
        if handle:
            with contextlib.suppress(Exception):  # (at interpreter shutdown, anything)
                self._lib.tessel_model_destroy(handle)
            self._handle = None


def random_arrays(specs: list[tuple[tuple[int, ...], Any]], seed: int = 0) -> list[np.ndarray]:
    """An array per (shape, dtype): standard normal float32, integers in [0, 8] (valid token
    ids and indices), 0/1 bools."""
    rng = np.random.default_rng(seed)
    out = []
    for shape, dtype in specs:
        dtype = np.dtype(dtype)
        if dtype == np.float32:
            out.append(rng.standard_normal(shape).astype(dtype))
        else:
            out.append(rng.integers(0, 2 if dtype == np.bool_ else 9, shape).astype(dtype))
    return out


def median_seconds(call: Any, budget: float) -> float:
    """Median seconds of `call()` over about `budget` seconds, after one warm-up call (at
    least 3 timed)."""
    call()
    times: list[float] = []
    start = time.perf_counter()
    while len(times) < 3 or time.perf_counter() - start < budget:
        t0 = time.perf_counter()
        call()
        times.append(time.perf_counter() - t0)
    return float(np.median(times))


def _tensor(t: dict) -> tuple[str, tuple[int, ...], np.dtype]:
    dtype = np.dtype(np.bool_ if t["dtype"] == "bool" else t["dtype"])
    return t["name"], tuple(t["shape"]), dtype


def load(path: str | os.PathLike) -> ExportedModel:
    """The exported model in `path`, ready to call (LoadError for a file it cannot run)."""
    return ExportedModel(path)


__all__ = ["load", "read_meta", "header_path", "ExportedModel", "LoadError", "InputError",
           "RunError", "ABI_VERSION", "MAGIC", "TRAILER", "median_seconds", "random_arrays"]
