"""Matmul / dense and batch matmul templates for CPUs (after TVM's x86 dense and batch_matmul).

    for b.., i0, j0 (fused, parallel):      # batch axes and the outer tiles
      for i1, j1:
        for k0:
          for (k1, i2) in the order of knob reorder_inner:
            for j2:                          # ann_inner: i2 unrolled?, j2 vectorized?
              C_local[...] += A[...] * B[...]
        C[...] = C_local[...]                # write_cache: none / at j1 / at j0

Knobs: tile_i, tile_j (3 factors each), tile_k (2), reorder_inner, ann_inner, write_cache,
auto_unroll_max_step. Elementwise producers (the transposes of TBG) are inlined, an
elementwise consumer (dense's bias add) is folded into the copy-out of the local tile.
"""
from __future__ import annotations

from tessel.schedule import Schedule
from tessel.space.templates.base import TemplateContext
from tessel.space.templates.common import (auto_unroll, compute_block, inline_spatial_producers,
                                           pack_output, parallel_outer, parallel_rest)


def matmul(cfg: TemplateContext, sch: Schedule) -> None:
    """C[i, j] = sum_k A[i, k] * B[k, j] (matmul, dense)."""
    _gemm(cfg, sch, "matmul", n_spatial=2)


def batch_matmul(cfg: TemplateContext, sch: Schedule) -> None:
    """C[b.., i, j] = sum_k A[b.., i, k] * B[b.., k, j] (batch matmul, transpose + batch matmul)."""
    _gemm(cfg, sch, "batch_matmul", n_spatial=None)


def _gemm(cfg: TemplateContext, sch: Schedule, name: str, n_spatial: int | None) -> None:
    block = compute_block(sch, name, n_spatial, n_reduce=1)
    block_name = sch.get(block).name
    inline_spatial_producers(sch, block, keep_padding=False)
    *batch, i, j, k = sch.get_loops(block)
    cfg.define_split("tile_i", i, num_outputs=3)
    cfg.define_split("tile_j", j, num_outputs=3, max_factor=64)
    cfg.define_split("tile_k", k, num_outputs=2)
    i0, i1, i2 = cfg.apply_split("tile_i", i)
    j0, j1, j2 = cfg.apply_split("tile_j", j)
    k0, k1 = cfg.apply_split("tile_k", k)
    cfg.define_reorder("reorder_inner", [k1, i2], policy="all")
    cfg.define_annotate("ann_inner", [i2, j2], policy="try_unroll_vec")
    cfg.define_knob("write_cache", [0, 1, 2])
    cfg.define_knob("auto_unroll_max_step", [0, 16, 64, 512])
    inner = [(k1, i2)[p] for p in cfg["reorder_inner"]]
    sch.reorder(*batch, i0, j0, i1, j1, k0, *inner, j2)
    skip = {block_name}
    if cfg["write_cache"]:
        out = pack_output(sch, block, j1 if cfg["write_cache"] == 1 else j0)
        skip.add(sch.get(out).name)
    cfg.apply_annotate("ann_inner", [i2, j2])
    sch.decompose_reduction(block, k0)
    outer = parallel_outer(sch, [*batch, i0, j0])
    auto_unroll(sch, outer, cfg["auto_unroll_max_step"])
    parallel_rest(sch, skip)


__all__ = ["matmul", "batch_matmul"]
