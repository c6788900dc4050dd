"""Shared workloads and checks for the tests of tessel.space (test_space_*.py).

SMALL holds every suite operator at tiny odd shapes (a few hundred multiply-adds, so that
fully unrolled samples still compile in a fraction of a second). `distinct_programs` draws
samples until it has n structurally distinct valid programs; `check_matches` builds them
(in two worker processes: code generation is Python) and compares each with numpy.
"""
from __future__ import annotations

import random
import multiprocessing
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Callable

import numpy as np

import tessel
from tessel import ir, ops
from tessel.codegen.c import generate_c
from tessel.codegen.compiler import compile_shared
from tessel.codegen.module import Module
from tessel.codegen.passes import compact_buffers
from tessel.ir import BlockRealize, For, SeqStmt
from tessel.space import SearchSpace, default_postprocs, postprocess

TARGET = tessel.Target("host")
POSTPROCS = default_postprocs(TARGET)

SMALL: dict[str, Callable[[], ir.PrimFunc]] = {
    "C1D": lambda: ops.conv1d(1, 3, 11, 5, 3, stride=2, padding=1),
    "C2D": lambda: ops.conv2d(1, 2, 5, 3, 3, 3, 3, stride=2, padding=1),
    "C3D": lambda: ops.conv3d(1, 1, 3, 3, 3, 3, 2, 2, 2, stride=2, padding=1),
    "DEP": lambda: ops.depthwise_conv2d(1, 3, 5, 3, 3, 3, stride=2, padding=1),
    "DIL": lambda: ops.conv2d(1, 2, 5, 5, 2, 3, 3, stride=2, padding=2, dilation=2),
    "GMM": lambda: ops.matmul(3, 5, 7),
    "GRP": lambda: ops.conv2d(1, 4, 3, 3, 2, 3, 3, stride=2, padding=1, groups=2),
    "T2D": lambda: ops.conv2d_transpose(1, 2, 2, 1, 3, 3, 3, stride=2, padding=1),
    "CBR": lambda: ops.conv2d_bn_relu(1, 2, 5, 3, 2, 3, 3, stride=2, padding=1),
    "TBG": lambda: ops.transpose_batch_matmul(1, 3, 3, 5),
    "NRM": lambda: ops.layer_norm(5, 9),
    "SFM": lambda: ops.softmax(5, 9),
}
SUITE_NAMES = list(SMALL)
_small_cache: dict[str, ir.PrimFunc] = {}


def small(name: str) -> ir.PrimFunc:
    if name not in _small_cache:
        _small_cache[name] = SMALL[name]()
    return _small_cache[name]


def distinct_programs(space: SearchSpace, func: ir.PrimFunc, n: int, seed: int = 0,
                      max_draws: int = 400,
                      strict: bool = True) -> dict[str, tuple[tessel.Trace, ir.PrimFunc]]:
    """n samples whose postprocessed programs differ structurally: hash -> (trace, program).
    With `strict` every sample must pass postprocessing (a rejection fails the test);
    otherwise rejected samples (templates hold configs beyond the CPU's limits) are skipped."""
    rng = random.Random(seed)
    found: dict[str, tuple[tessel.Trace, ir.PrimFunc]] = {}
    for _ in range(max_draws):
        sch = space.sample(func, rng)
        final = postprocess(sch, POSTPROCS, strict=strict)
        if final is None:
            continue
        found.setdefault(ir.structural_hash(final.func), (sch.trace, final.func))
        if len(found) >= n:
            break
    return found


def max_errors(func: ir.PrimFunc, programs: list[ir.PrimFunc]) -> list[float]:
    """Build and run each program on the same inputs; the max abs error of each vs numpy.

    C generation and compilation run in two forked workers (code generation is Python: use
    both cores); the kernels run here. Running an OpenMP kernel in a child forked from a
    process whose OpenMP runtime has started hangs in libgomp, so children never run one."""
    inputs = ops.reference_inputs(func, seed=1)
    expected = ops.run_reference(func, *inputs)
    if len(programs) == 1:
        built = [_compile(programs[0])]
    else:
        with ProcessPoolExecutor(2, mp_context=multiprocessing.get_context("fork")) as pool:
            built = list(pool.map(_compile, programs))
    errors = []
    for program, (source, lib_path) in zip(programs, built):
        outputs = [np.full(b.shape, np.nan, b.dtype) for b in program.outputs]
        Module(program, TARGET, source, lib_path)(*inputs, *outputs)
        errors.append(float(np.max(np.abs(outputs[0] - expected))))
    return errors


def _compile(program: ir.PrimFunc) -> tuple[str, Path]:
    source = generate_c(compact_buffers(program), TARGET)
    return source, compile_shared(source, TARGET)


def loop_signature(stmt: object) -> tuple:
    """The loop nests of a program without unit loops and without naming: (extent, kind)
    per loop ("unrolled" counted as serial: the code generator unrolls both the same way),
    and per block the scope and shape of what it writes and whether it has an init."""
    if isinstance(stmt, For):
        inner = loop_signature(stmt.body)
        kind = "serial" if stmt.kind == "unrolled" else stmt.kind
        return inner if stmt.extent == 1 else (("for", stmt.extent, kind, inner),)
    if isinstance(stmt, SeqStmt):
        return tuple(x for child in stmt.seq for x in loop_signature(child))
    if isinstance(stmt, BlockRealize):
        block = stmt.block
        writes = tuple((w.buffer.scope, w.buffer.shape) for w in block.writes)
        return (("block", writes, block.init is not None, loop_signature(block.body)),)
    return ()
