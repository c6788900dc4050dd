"""int8 GEMM with a tensor intrinsic, against the host's int8 dot-product peak and the libraries.

    python benchmarks/int8_gemm.py [--size 1024] [--intrin NAME] [--rounds 5]
                                   [--trials 64 --db int8.db]

The schedule is gmm_schedule.py's for integers, with the innermost block tensorized:

    B_global = cache_read(C, B); transform_layout -> B_global[j // L, k // G, j % L, k % G]
                        (the instruction's operand: L lanes of G consecutive k, packed once)
    C_local  = cache_write(C, "local")   (the register tile of mr x nv int32 vectors)
    i -> i0 i1 i2(mr)   j -> j0 j1 j2(nv) j3(L)   k -> k0 k1 k2(G)
    order i0 j0 k0 i1 j1 k1 i2 j2 j3 k2;   tensorize(j3, intrin): one instruction per j3 k2
    i2 and j2 unrolled (the accumulators stay in registers), fuse(i0, j0) parallel

With --trials, the workload is also tuned in the auto space (MultiLevelTilingWithIntrin: the
same structure with sampled tiles, the expert priors first) and the best program is timed
beside the hand schedule. The intrinsic is the first vector intrinsic of
tessel.intrin.for_target(host) for u8 x s8 (VNNI-512 on an AVX-512 VNNI CPU, the exact 16-bit
AVX2 path without VNNI). The *peak* is measured by a probe that runs that same intrinsic's C
function on a 4 x 3 register tile in every thread (probe_source), as the fp32 peak is
measured with FMAs. On a host with AMX, a second hand schedule runs in 32 x 32 blocks of AMX's
memory intrinsic (schedule_amx), the auto space tunes with it, and the host's peak is the
tile unit's (amx_probe_source: four tdpbusd on four accumulator tiles per round in every
thread). The references,
timed in the same run, interleaved: onnxruntime's MatMulInteger (u8 x s8, its MLAS kernels)
and torch._int_mm (s8 x s8), and tessel's own fp32 GMM of the same size (gmm_schedule.py's
schedule).
"""
from __future__ import annotations

import argparse
import ctypes
import time

import numpy as np

import tessel
from tessel import intrin, ops
from tessel.codegen.c_vector import vector_source, vtype
from tessel.codegen.compiler import compile_shared

from common import best_secs, gflops, settle
from gmm_schedule import largest_divisor, schedule_gmm

PROBE_ROWS, PROBE_COLS = 4, 3  # the probe's register tile: 12 accumulators


def pick_intrin(target: tessel.Target, a: str = "uint8", b: str = "int8",
                memory: bool = False) -> intrin.TensorIntrin | None:
    """The first intrinsic of the target for a x b dot products (the widest, VNNI first), or
    with `memory` its first memory intrinsic (AMX; None without one)."""
    for spec in intrin.for_target(target):
        dtypes = [p.dtype for p in spec.desc.params]
        if dtypes[:2] == [a, b] and spec.memory == memory:
            return spec
    if memory:
        return None
    raise SystemExit(f"no tensor intrinsic for {a} x {b} on {target}")


def schedule_amx(sch: tessel.Schedule, spec: intrin.TensorIntrin, chunk: int = 1024,
                 decompose: bool = False) -> tessel.Schedule:
    """The integer (or bfloat16) matmul block "C" of `sch` in 32 x 32 blocks of AMX's memory
    intrinsic (tessel.intrin.amx), each call over `chunk` of the reduction (the largest
    multiple of a tile row's elements, 64 bytes, up to it that divides K): B packed as for
    VNNI, a local accumulator per block, the blocks in parallel; zeroed by the first call, or
    with `decompose` by a block of its own."""
    group = spec.block.iter_vars[-1].extent  # 4 8-bit integers or 2 bfloat16 in 4 bytes
    step = 16 * group
    c = sch.get_block("C")
    n_k = sch.get(sch.get_loops(c)[2]).extent
    chunk = largest_divisor(n_k // step, chunk // step) * step
    pack = sch.cache_read(c, 1, "global")
    sch.transform_layout(c, 1, "read",
                         f"lambda k, j: (j // 16, k // {group}, j % 16, k % {group})")
    sch.parallel(sch.get_loops(pack)[1])
    c_local = sch.cache_write(c, 0, "local")
    i, j, k = sch.get_loops(c)
    i0, i1 = sch.split(i, [None, 32])
    j0, j1, j2 = sch.split(j, [None, 2, 16])
    k0, k1, k2 = sch.split(k, [None, chunk // group, group])
    sch.reorder(i0, j0, k0, i1, j1, j2, k1, k2)
    sch.reverse_compute_at(c_local, j0)
    if decompose:
        sch.decompose_reduction(c, k0)
    sch.tensorize(i1, spec.name)
    sch.vectorize(sch.get_loops(c_local)[-1])
    sch.parallel(sch.fuse(i0, j0))
    return sch


def amx_probe_source(target: tessel.Target, spec: intrin.TensorIntrin | None = None) -> str:
    """C of `double tessel_probe(int64 iters)`: every thread configures the tiles and runs
    `iters` rounds of four tdpbusd (tdpbf16ps for a bfloat16 `spec`) on four accumulator
    tiles (the tile unit's peak, as the fp32 peak is measured with FMAs); returns the ops
    done."""
    bf16 = spec is not None and spec.desc.params[0].dtype == "bfloat16"
    dot, k = ("_tile_dpbf16ps", 32) if bf16 else ("_tile_dpbusd", 64)
    return "\n".join([
        "#include <stdint.h>", "#include <string.h>", "#include <immintrin.h>",
        "#include <omp.h>", "long syscall(long number, ...);",
        f"__attribute__((target(\"amx-tile,{'amx-bf16' if bf16 else 'amx-int8'}\")))",
        "double tessel_probe(int64_t iters) {", "    int threads = 1;",
        "    syscall(158, 0x1023, 18);  /* arch_prctl(ARCH_REQ_XCOMP_PERM, XTILEDATA) */",
        f"    #pragma omp parallel num_threads({target.cores})", "    {",
        "        uint8_t cfg[64] = {1};",
        "        for (int t = 0; t < 8; ++t) { cfg[16 + 2 * t] = 64; cfg[48 + t] = 16; }",
        "        _tile_loadconfig(cfg);",
        "        _tile_zero(0); _tile_zero(1); _tile_zero(2); _tile_zero(3);",
        "        _tile_zero(4); _tile_zero(5); _tile_zero(6); _tile_zero(7);",
        "        for (int64_t it = 0; it < iters; ++it) {",
        f"            {dot}(0, 4, 6); {dot}(1, 4, 7);",
        f"            {dot}(2, 5, 6); {dot}(3, 5, 7);", "        }",
        "        _tile_release();",
        "        #pragma omp single", "        threads = omp_get_num_threads();", "    }",
        f"    return 2.0 * 4 * 16 * 16 * {k} * (double)iters * threads;", "}"])


def schedule_int8(sch: tessel.Schedule, spec: intrin.TensorIntrin, target: tessel.Target,
                  mr: int | None = None, nv: int = 4, i1: int = 4, j1: int = 1,
                  kt: int = 256) -> tessel.Schedule:
    """Schedule the integer matmul block "C" of `sch` with `spec` as its innermost block."""
    lanes, group = spec.block.iter_vars[0].extent, spec.block.iter_vars[1].extent
    c = sch.get_block("C")
    rows = sch.get(sch.get_loops(c)[0]).extent
    mr = mr or largest_divisor(rows, target.accumulator_registers // nv)
    pack = sch.cache_read(c, 1, "global")
    sch.transform_layout(c, 1, "read",
                         f"lambda k, j: (j // {lanes}, k // {group}, j % {lanes}, k % {group})")
    sch.parallel(sch.get_loops(pack)[1])
    c_local = sch.cache_write(c, 0, "local")
    i, j, k = sch.get_loops(c)
    i0, i1_, i2 = sch.split(i, [None, i1, mr])
    j0, j1_, j2, j3 = sch.split(j, [None, j1, nv, lanes])
    k0, k1, k2 = sch.split(k, [None, kt // group, group])
    sch.reorder(i0, j0, k0, i1_, j1_, k1, i2, j2, j3, k2)
    sch.reverse_compute_at(c_local, j0)
    init = sch.decompose_reduction(c, k0)
    sch.tensorize(j3, spec.name)
    sch.unroll(i2)
    sch.unroll(j2)
    for block in (init, c_local):
        sch.vectorize(sch.get_loops(block)[-1])
    sch.parallel(sch.fuse(i0, j0))
    return sch


def probe_source(spec: intrin.TensorIntrin, target: tessel.Target) -> str:
    """C of `double tessel_probe(int64 iters)`: every thread runs `iters` rounds of a register
    tile of PROBE_ROWS x PROBE_COLS accumulators, each round one intrinsic per accumulator
    (each row its own A operand, each column its own B, all opaque to the compiler, as in a
    GEMM's register tile: a B widened once per round serves every row); returns the int ops
    done (a multiply and an add per product)."""
    params = spec.desc.params
    a, b, acc = params
    used = {(p.dtype, p.size, "") for p in params} | {(acc.dtype, acc.size, f"intrin {spec.name}")}
    tiles = [(r, c) for r in range(PROBE_ROWS) for c in range(PROBE_COLS)]
    macs = spec.block.iter_vars[0].extent * spec.block.iter_vars[1].extent
    return "\n".join([
        "#include <stdint.h>", "#include <omp.h>", vector_source(used),
        "double tessel_probe(int64_t iters) {", "    int threads = 1;",
        f"    #pragma omp parallel num_threads({target.cores})", "    {",
        *(f"        {vtype(a.dtype, a.size)} a{r} = {{{', '.join([str(r + 1)] * a.size)}}};"
          for r in range(PROBE_ROWS)),
        *(f"        {vtype(b.dtype, b.size)} b{c} = {{{', '.join([str(c + 1)] * b.size)}}};"
          for c in range(PROBE_COLS)),
        *(f"        {vtype(acc.dtype, acc.size)} acc{r}_{c} = {{0}};" for r, c in tiles),
        "        for (int64_t it = 0; it < iters; ++it) {",
        *(f"            __asm__ volatile(\"\" : \"+v\"(b{c}));" for c in range(PROBE_COLS)),
        *(f"            __asm__ volatile(\"\" : \"+m\"(a{r}));" for r in range(PROBE_ROWS)),
        *(f"            acc{r}_{c} = {spec.c_name}(acc{r}_{c}, a{r}, b{c});" for r, c in tiles),
        *(f"            __asm__ volatile(\"\" : \"+v\"(acc{r}_{c}));" for r, c in tiles),
        "        }",
        f"        int32_t sink = {' + '.join(f'acc{r}_{c}[0]' for r, c in tiles)};",
        "        __asm__ volatile(\"\" : : \"r\"(sink));",
        "        #pragma omp single", "        threads = omp_get_num_threads();", "    }",
        f"    return 2.0 * {macs} * {len(tiles)} * (double)iters * threads;", "}"])


def probe_peak(spec: intrin.TensorIntrin, target: tessel.Target, rounds: int = 5) -> float:
    """The host's dot-product peak in GOP/s (one multiply and one add per product) for the
    operands of `spec`: of the tile unit for a memory (AMX) intrinsic, else of the vector
    intrinsic `spec`."""
    source = amx_probe_source(target, spec) if spec.memory else probe_source(spec, target)
    lib = ctypes.CDLL(str(compile_shared(source, target)))
    lib.tessel_probe.restype = ctypes.c_double
    lib.tessel_probe.argtypes = [ctypes.c_int64]
    best = 0.0
    for _ in range(rounds):
        start = time.perf_counter()
        ops_done = lib.tessel_probe(2_000_000 if spec.memory else 20_000_000)
        best = max(best, ops_done / (time.perf_counter() - start) / 1e9)
    return best


def _onnx_matmul_integer(n: int):
    """An onnxruntime session of MatMulInteger (u8 x s8 -> int32), or None without it."""
    try:
        import onnxruntime as ort
        from onnx import TensorProto, helper
    except ImportError:
        return None
    node = helper.make_node("MatMulInteger", ["A", "B"], ["C"])
    graph = helper.make_graph([node], "mmi", [
        helper.make_tensor_value_info("A", TensorProto.UINT8, [n, n]),
        helper.make_tensor_value_info("B", TensorProto.INT8, [n, n])],
        [helper.make_tensor_value_info("C", TensorProto.INT32, [n, n])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = tessel.Target("host").cores
    return ort.InferenceSession(model.SerializeToString(), opts,
                                providers=["CPUExecutionProvider"])


def _torch_int_mm():
    try:
        import torch
    except ImportError:
        return None
    torch.set_num_threads(tessel.Target("host").cores)
    return torch


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--intrin", default="", help="a tessel.intrin name (default: the "
                                                     "host's first for u8 x s8)")
    parser.add_argument("--rounds", type=int, default=5, help="alternating timing rounds")
    parser.add_argument("--trials", type=int, default=0, help="also tune this many trials")
    parser.add_argument("--db", default="int8_gemm.db", help="the tuning records")
    args = parser.parse_args()
    n, target = args.size, tessel.Target("host")
    spec = intrin.get(args.intrin) if args.intrin else pick_intrin(target)
    a_dtype, b_dtype = (p.dtype for p in spec.desc.params[:2])
    amx = spec if spec.memory else pick_intrin(target, a_dtype, b_dtype, memory=True)
    if spec.memory:
        spec = pick_intrin(target, a_dtype, b_dtype)
    func = ops.matmul(n, n, n, dtype=a_dtype, b_dtype=b_dtype, out_dtype="int32")
    mod = tessel.build(schedule_int8(tessel.Schedule(func), spec, target).func, target)
    hands = {"tessel int8 (hand schedule)": mod}
    if amx is not None:
        hands["tessel int8 (hand schedule, AMX)"] = tessel.build(
            schedule_amx(tessel.Schedule(func), amx).func, target)
    tuned = None
    if args.trials:
        start = time.perf_counter()
        result = tessel.tune(func, target, args.trials, database=args.db)
        tuned = result.module
        print(f"tuned {len(result.history)} trials in {time.perf_counter() - start:.0f} s")
    rng = np.random.default_rng(0)
    lo = 0 if a_dtype == "uint8" else -128
    a = rng.integers(lo, lo + 256, (n, n)).astype(a_dtype)
    b = rng.integers(-128, 128, (n, n)).astype(np.int8)
    c = np.zeros((n, n), np.int32)
    want = a.astype(np.int64) @ b.astype(np.int64)
    for m in (*hands.values(), *([tuned] if tuned is not None else [])):
        c[:] = 0
        m(a, b, c)
        assert np.array_equal(c, want), "wrong int8 result"
    fmod = tessel.build(schedule_gmm(tessel.Schedule(ops.matmul(n, n, n)), target).func, target)
    af, bf = a.astype(np.float32), b.astype(np.float32)
    cf = np.zeros((n, n), np.float32)
    session, torch = _onnx_matmul_integer(n), _torch_int_mm()
    runs: dict[str, list[float]] = {**{label: [] for label in hands}, "tessel fp32": []}
    if tuned is not None:
        runs[f"tessel int8 ({args.trials} trials)"] = []
    if session is not None and a_dtype == "uint8":
        runs["onnxruntime MatMulInteger"] = []
        assert np.array_equal(session.run(None, {"A": a, "B": b})[0], c)
    if torch is not None:
        runs["torch._int_mm (s8 x s8)"] = []
        ta = torch.from_numpy(rng.integers(-128, 128, (n, n)).astype(np.int8))
        tb = torch.from_numpy(b)
    for _ in range(args.rounds):
        settle()
        for label, m in hands.items():
            runs[label].append(m.time(a, b, c, number=5, repeat=3))
        if tuned is not None:
            runs[f"tessel int8 ({args.trials} trials)"].append(
                tuned.time(a, b, c, number=5, repeat=3))
        runs["tessel fp32"].append(fmod.time(af, bf, cf, number=5, repeat=3))
        if "onnxruntime MatMulInteger" in runs:
            runs["onnxruntime MatMulInteger"].append(
                best_secs(lambda: session.run(None, {"A": a, "B": b}), 3))
        if torch is not None:
            runs["torch._int_mm (s8 x s8)"].append(best_secs(lambda: torch._int_mm(ta, tb), 3))
    peak = probe_peak(spec, target)
    flops = 2.0 * n ** 3
    print(f"target: {target}\nintrinsic: {spec.name} ({spec.exact})")
    print(f"int8 dot-product peak (probe, {target.cores} threads): {peak:7.1f} GOP/s")
    if amx is not None:  # the host's int8 peak is the tile unit's
        vnni, peak = peak, probe_peak(amx, target)
        print(f"AMX tile peak (probe, {target.cores} threads): {peak:7.1f} GOP/s "
              f"({peak / vnni:.1f}x the vector instruction's); percentages of it")
    for label, secs in runs.items():
        g = gflops(flops, min(secs))
        print(f"  {label:30s} {g:7.1f} GOP/s  ({min(secs) * 1e3:.2f} ms)  {g / peak:5.1%} of peak")


if __name__ == "__main__":
    main()
