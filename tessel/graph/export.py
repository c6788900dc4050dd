"""A compiled model as one shared library that runs without tessel, a compiler or a database.

    model = tessel.compile_model("resnet18.onnx", database="tessel.db")
    model.export("resnet18.so")            # or: tessel export resnet18.onnx --db tessel.db
    # then, anywhere with the same ISA features: tessel.runtime.load("resnet18.so") (numpy
    # alone), or from C through tessel_runtime.h (`tessel export --header` prints it)

The library holds:
- every kernel the model runs, compiled again from the same C with the target's features named
  (Target.portable_cflags) instead of -march=native, so that it runs on any CPU that has them;
  each kernel's entry renamed after its source's hash, its OpenMP threads a variable the API sets;
- the weights as the kernels read them (packed, Winograd-transformed), embedded in a read-only
  section (`.incbin`): one file to ship, mapped on demand and shared by every process that
  loads it, where a side file would be a second thing to keep next to the first;
- the call sequence: each call's entry and where each of its arguments lives, an offset in the
  weights or in the arena, one allocation made when an instance is created that holds the
  inputs, intermediates and outputs as the model's memory plan laid them out;
- the C entry points of tessel_runtime.h's ABI (tessel_model_*), compiled for the
  architecture's baseline, so that the CPU check runs before any kernel can;
- a trailer (tessel.runtime: meta JSON, ABI version, the file's size, a magic) that loaders
  read before they map the file.

The library needs at run time only the C library, libm (libmvec where a kernel calls its vector
math) and libgomp (OpenMP: not linkable statically into a shared object).
"""
from __future__ import annotations

import ctypes
import datetime
import hashlib
import json
import os
import tempfile
from bisect import bisect_right
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from tessel.codegen.compiler import compile_cached, link
from tessel.graph.ir import check
from tessel.runtime import ABI_VERSION, MAGIC, TRAILER
from tessel.target import Target

ALIGN = 64  # every region starts on a cache line, as the model's own arrays do
_BASELINE_FLAGS = ("-O2", "-fPIC", "-std=gnu11", "-fvisibility=hidden", "-c")


@dataclass(frozen=True)
class ExportSummary:
    """What an export wrote: the file, its kernels and calls, and the bytes it carries."""
    path: Path
    kernels: int
    calls: int
    weight_bytes: int
    arena_bytes: int
    file_bytes: int

    def line(self) -> str:
        return (f"{self.path}: {self.kernels} kernels, {self.calls} calls, "
                f"{self.weight_bytes / 2**20:.1f} MiB of weights, "
                f"{self.arena_bytes / 2**20:.1f} MiB of activations per instance, "
                f"{self.file_bytes / 2**20:.1f} MiB file")


@dataclass
class _Regions:
    """Merged byte ranges of host memory, each placed at an offset of one region (the
    weights or the arena): where a pointer into them lands in the library."""
    starts: list[int]
    ends: list[int]
    offsets: list[int]
    size: int

    @classmethod
    def of(cls, spans: list[tuple[int, int]]) -> "_Regions":
        merged: list[list[int]] = []
        for start, end in sorted((s - s % ALIGN, e) for s, e in spans):
            if merged and start <= merged[-1][1]:
                merged[-1][1] = max(merged[-1][1], end)
            else:
                merged.append([start, end])
        offsets, size = [], 0
        for start, end in merged:
            offsets.append(size)
            size += -(-(end - start) // ALIGN) * ALIGN
        return cls([m[0] for m in merged], [m[1] for m in merged], offsets, size)

    def find(self, address: int) -> int | None:
        k = bisect_right(self.starts, address) - 1
        return k if k >= 0 and address < max(self.ends[k], self.starts[k] + 1) else None

    def place(self, address: int) -> int:
        k = self.find(address)
        assert k is not None, "an argument outside every region"
        return self.offsets[k] + address - self.starts[k]


def _span(array: np.ndarray) -> tuple[int, int]:
    return array.ctypes.data, array.ctypes.data + array.nbytes


def export_model(model: Any, path: str | Path, *, jobs: int | None = None) -> ExportSummary:
    """Write `model` (a tessel.graph.runtime.CompiledModel: CompiledModel.export calls this,
    so this module does not import that one) to `path` as one shared library (see the
    module); the C compilers run `jobs` at a time (the target's cores). Compiled objects are
    cached with the kernels."""
    path = Path(path)
    target: Target = model.target
    check(path.parent.is_dir(), f"export: directory {path.parent} does not exist")
    graph = model.graph
    planned = [model.value_array(v) for v in model.planned_values]
    arena = _Regions.of([_span(a) for a in planned])
    args = [list(call.arrays) for call in model.calls]
    constants = [a for call in args for a in call if arena.find(a.ctypes.data) is None]
    weights = _Regions.of([_span(a) for a in constants])

    def place(array: np.ndarray) -> int:  # offset * 2 + 1 in the arena, * 2 in the weights
        if arena.find(array.ctypes.data) is not None:
            return arena.place(array.ctypes.data) * 2 + 1
        return weights.place(array.ctypes.data) * 2

    sources: dict[str, str] = {}  # entry symbol -> kernel C
    entries = []
    for call in model.calls:
        digest = hashlib.sha256(call.module.source.encode()).hexdigest()[:16]
        entries.append(f"tessel_k_{digest}")
        sources.setdefault(entries[-1], call.module.source)
    tensors = {"inputs": [_tensor(graph, v, place(model.value_array(v))) for v in graph.inputs],
               "outputs": [_tensor(graph, v, place(model.value_array(v)))
                           for v in graph.outputs]}
    meta = _meta(model, tensors, sources, weights.size, arena.size)
    model_c = _model_source(meta, tensors, entries,
                            [[place(a) for a in call] for call in args],
                            [call.module.func.name for call in model.calls], target)
    kernel_flags = tuple(f for f in target.portable_cflags if f != "-shared") + (
        "-fvisibility=hidden", "-c")
    jobs = jobs or target.cores
    with tempfile.TemporaryDirectory(prefix="tessel-export-") as tmp:
        tmp_dir = Path(tmp)
        blob = tmp_dir / "weights.bin"
        _write_regions(blob, weights)
        asm = tmp_dir / "weights.S"
        asm.write_text(_weights_asm(blob, target))
        units = [(_kernel_unit(symbol, source), kernel_flags)
                 for symbol, source in sources.items()]
        units.append((model_c, _BASELINE_FLAGS))
        with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
            objects = list(pool.map(lambda u: compile_cached(u[0], target, u[1], (), ".o"),
                                    units))
        libs = ("-lm", *(("-lmvec",) if any("_ZGV" in s for s in sources.values()) else ()))
        out = tmp_dir / "model.so"
        link([*objects, asm], target, out, ("-shared", "-fopenmp", "-Wl,-z,noexecstack"),
             libs)
        trailer_meta = json.dumps(meta, sort_keys=True).encode()
        size = out.stat().st_size + len(trailer_meta) + TRAILER.size
        with open(out, "ab") as file:
            file.write(trailer_meta)
            file.write(TRAILER.pack(len(trailer_meta), ABI_VERSION, size, MAGIC))
        _copy(out, path)
    return ExportSummary(path, len(sources), len(model.calls), weights.size, arena.size,
                         path.stat().st_size)


def _meta(model: Any, tensors: dict, sources: dict[str, str], weight_bytes: int,
          arena_bytes: int) -> dict[str, Any]:
    """What the library says of itself (its trailer and tessel_model_meta): the model's
    inputs and outputs, the target and flags it was built for, where its programs came from
    (the database and its trials, a hash of the kernels' sources)."""
    target = model.target
    programs = hashlib.sha256(" ".join(sorted(sources)).encode()).hexdigest()
    return {
        "name": model.graph.name, "tessel_abi": ABI_VERSION, "arch": target.arch,
        "target": str(target), "features": sorted(target.features),
        "feature_flags": list(target.feature_flags), "cores": target.cores,
        "cflags": list(target.portable_cflags),
        "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "layout": model.layout, "provenance": {**model.provenance, "programs": programs},
        "tasks": {how: sum(s.how == how for s in model.statuses)
                  for how in ("tuned", "prior", "unscheduled")},
        "kernels": len(sources), "calls": len(model.calls), "weight_bytes": weight_bytes,
        "arena_bytes": arena_bytes,
        **{kind: [{k: t[k] for k in ("name", "shape", "dtype")} for t in ts]
           for kind, ts in tensors.items()}}


def _copy(src: Path, dst: Path) -> None:
    """`src` into `dst` through a temporary file beside it, renamed into place."""
    fd, name = tempfile.mkstemp(dir=dst.parent, prefix=f".{dst.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as out, open(src, "rb") as inp:
            while chunk := inp.read(1 << 24):
                out.write(chunk)
        os.chmod(name, 0o755)
        os.replace(name, dst)
    finally:
        if os.path.exists(name):
            os.unlink(name)


def _tensor(graph: Any, value: str, place: int) -> dict[str, Any]:
    t = graph.types[value]
    return dict(name=value, shape=list(t.shape), dtype=t.dtype, nbytes=t.nbytes, place=place)


def _write_regions(blob: Path, regions: _Regions) -> None:
    """The host bytes of each region at its offset (the weights as the kernels read them)."""
    with open(blob, "wb") as file:
        for start, end, offset in zip(regions.starts, regions.ends, regions.offsets):
            file.seek(offset)
            file.write(ctypes.string_at(start, end - start))
        file.truncate(regions.size)


def _weights_asm(blob: Path, target: Target) -> str:
    kind = "@progbits" if target.arch == "x86_64" else "%progbits"
    return "\n".join([
        f'    .section .rodata.tessel_weights,"a",{kind}',
        f"    .balign {ALIGN}",
        "    .globl tessel_weights",
        "    .hidden tessel_weights",
        "tessel_weights:",
        f'    .incbin "{blob}"',
        "    .byte 0",  # (a model without weights still has the symbol)
        f'    .section .note.GNU-stack,"",{kind}', ""])


def _kernel_unit(symbol: str, source: str) -> str:
    """A kernel's C with its entry points renamed and its threads the library's variable."""
    return "\n".join([
        f"#define tessel_entry {symbol}",
        f"#define tessel_time {symbol}_time",
        f"#define tessel_time_in_model {symbol}_time_in_model",
        "extern int tessel_model_threads;",
        "#define TESSEL_THREADS tessel_model_threads", source])


def _c_string(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def _c_array(ctype: str, name: str, items: list[Any]) -> str:
    items = items or [0]
    rows = [", ".join(map(str, items[k:k + 12])) for k in range(0, len(items), 12)]
    return f"static const {ctype} {name}[{len(items)}] = {{\n    " + ",\n    ".join(rows) + \
        "\n};"


def _model_source(meta: dict, tensors: dict, entries: list[str], places: list[list[int]],
                  names: list[str], target: Target) -> str:
    """The C of the library's entry points, its call table and its tensors (baseline ISA)."""
    symbols = list(dict.fromkeys(entries))
    first = np.cumsum([0] + [len(p) for p in places]).tolist()
    io = tensors["inputs"] + tensors["outputs"]
    shape_first = np.cumsum([0] + [len(t["shape"]) for t in io]).tolist()
    checks = [f'    if (!__builtin_cpu_supports("{f}")) {{ strcat(missing, " {f}"); }}'
              for f in target.feature_flags]
    cpu_check = "\n".join([
        "#if defined(__x86_64__) || defined(__i386__)",
        "    char missing[512] = \"\";",
        "    __builtin_cpu_init();", *checks,
        "    if (missing[0]) {",
        "        tessel_say(msg, cap, \"this CPU lacks%s, which the model's kernels use "
        f"(exported for {target})\", missing);",
        "        return 1;",
        "    }",
        "#endif"]) if checks else ""
    return f"""\
/* tessel exported model {meta['name']}: {len(symbols)} kernels, {len(entries)} calls */
#define _POSIX_C_SOURCE 200809L
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TESSEL_API __attribute__((visibility("default")))
#define N_CALLS {len(entries)}
#define N_INPUTS {len(tensors['inputs'])}
#define N_OUTPUTS {len(tensors['outputs'])}
#define ARENA_BYTES {meta['arena_bytes']}LL

int tessel_model_threads = {target.cores};  /* the kernels' OpenMP threads */
extern const unsigned char tessel_weights[];
typedef int32_t (*tessel_entry_fn)(void**);
{chr(10).join(f"int32_t {s}(void** args);" for s in symbols)}

static const tessel_entry_fn call_entry[N_CALLS ? N_CALLS : 1] = {{
    {", ".join(entries) or "0"}}};
static const char* const call_name[N_CALLS ? N_CALLS : 1] = {{
    {", ".join(_c_string(n) for n in names) or "0"}}};
{_c_array("int32_t", "call_first", first)}
/* where each argument lives: offset * 2 + 1 in the arena, offset * 2 in the weights */
{_c_array("int64_t", "arg_place", [p for ps in places for p in ps])}
static const char* const tensor_name[] = {{{", ".join(_c_string(t["name"]) for t in io)}}};
static const char* const tensor_dtype[] = {{{", ".join(_c_string(t["dtype"]) for t in io)}}};
{_c_array("int64_t", "tensor_shape", [d for t in io for d in t["shape"]])}
{_c_array("int32_t", "shape_first", shape_first)}
{_c_array("int64_t", "tensor_bytes", [t["nbytes"] for t in io])}
{_c_array("int64_t", "tensor_place", [t["place"] for t in io])}
static const char tessel_meta[] = {_c_string(json.dumps(meta, sort_keys=True))};

struct tessel_instance {{
    unsigned char* arena;
    void** args;
}};

static void tessel_say(char* msg, int64_t cap, const char* format, ...) {{
    if (msg != NULL && cap > 0) {{
        va_list ap;
        va_start(ap, format);
        vsnprintf(msg, (size_t)cap, format, ap);
        va_end(ap);
    }}
}}

static void* tessel_at(const struct tessel_instance* m, int64_t place) {{
    return place & 1 ? (void*)(m->arena + (place >> 1))
                     : (void*)(tessel_weights + (place >> 1));
}}

TESSEL_API int32_t tessel_model_abi_version(void) {{
    return {ABI_VERSION};
}}

TESSEL_API const char* tessel_model_meta(void) {{
    return tessel_meta;
}}

TESSEL_API int32_t tessel_model_check_cpu(char* msg, int64_t cap) {{
    (void)msg; (void)cap;
{cpu_check}
    return 0;
}}

TESSEL_API int32_t tessel_model_count(int32_t outputs) {{
    return outputs ? N_OUTPUTS : N_INPUTS;
}}

TESSEL_API int32_t tessel_model_tensor(int32_t outputs, int32_t i, const char** name,
                                       const char** dtype, int32_t* rank,
                                       const int64_t** shape, int64_t* nbytes) {{
    if (i < 0 || i >= (outputs ? N_OUTPUTS : N_INPUTS)) {{
        return 1;
    }}
    int32_t k = outputs ? N_INPUTS + i : i;
    *name = tensor_name[k];
    *dtype = tensor_dtype[k];
    *rank = shape_first[k + 1] - shape_first[k];
    *shape = tensor_shape + shape_first[k];
    *nbytes = tensor_bytes[k];
    return 0;
}}

TESSEL_API void tessel_model_destroy(void* handle) {{
    struct tessel_instance* m = (struct tessel_instance*)handle;
    if (m != NULL) {{
        free(m->arena);
        free(m->args);
        free(m);
    }}
}}

TESSEL_API void* tessel_model_create(void) {{
    struct tessel_instance* m = (struct tessel_instance*)calloc(1, sizeof *m);
    if (m == NULL) {{
        return NULL;
    }}
    m->arena = (unsigned char*)aligned_alloc(64, (size_t)(ARENA_BYTES > 0 ? ARENA_BYTES : 64));
    m->args = (void**)malloc(sizeof(void*) * (size_t)(call_first[N_CALLS] + 1));
    if (m->arena == NULL || m->args == NULL) {{
        tessel_model_destroy(m);
        return NULL;
    }}
    for (int32_t a = 0; a < call_first[N_CALLS]; ++a) {{
        m->args[a] = tessel_at(m, arg_place[a]);
    }}
    return m;
}}

TESSEL_API void* tessel_model_buffer(void* handle, int32_t outputs, int32_t i) {{
    if (handle == NULL || i < 0 || i >= (outputs ? N_OUTPUTS : N_INPUTS)) {{
        return NULL;
    }}
    return tessel_at((struct tessel_instance*)handle, tensor_place[outputs ? N_INPUTS + i : i]);
}}

/* inputs: N_INPUTS pointers copied in first (NULL: the inputs are in their buffers already,
   tessel_model_buffer); outputs: N_OUTPUTS pointers the results are copied to (NULL, or a
   NULL entry: left in the model's buffer) */
TESSEL_API int32_t tessel_model_run(void* handle, const void* const* inputs,
                                    void* const* outputs, char* msg, int64_t cap) {{
    struct tessel_instance* m = (struct tessel_instance*)handle;
    if (m == NULL) {{
        tessel_say(msg, cap, "no model instance (it was not created, or was destroyed)");
        return 2;
    }}
    for (int32_t i = 0; inputs != NULL && i < N_INPUTS; ++i) {{
        if (inputs[i] == NULL) {{
            tessel_say(msg, cap, "input %d (%s) is NULL", i, tensor_name[i]);
            return 2;
        }}
        memcpy(tessel_at(m, tensor_place[i]), inputs[i], (size_t)tensor_bytes[i]);
    }}
    for (int32_t c = 0; c < N_CALLS; ++c) {{
        int32_t status = call_entry[c](m->args + call_first[c]);
        if (status != 0) {{
            tessel_say(msg, cap, "kernel %d (%s) failed with status %d%s", c, call_name[c],
                       status, status == 1 ? " (memory allocation failed)" : "");
            return 3;
        }}
    }}
    for (int32_t i = 0; outputs != NULL && i < N_OUTPUTS; ++i) {{
        if (outputs[i] != NULL) {{
            memcpy(outputs[i], tessel_at(m, tensor_place[N_INPUTS + i]),
                   (size_t)tensor_bytes[N_INPUTS + i]);
        }}
    }}
    return 0;
}}

TESSEL_API int32_t tessel_model_set_threads(int32_t n) {{
    if (n < 1) {{
        return 2;
    }}
    tessel_model_threads = n;
    return 0;
}}

TESSEL_API int32_t tessel_model_get_threads(void) {{
    return tessel_model_threads;
}}
"""


__all__ = ["export_model", "ExportSummary"]
