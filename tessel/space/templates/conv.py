"""Direct NCHW conv2d and depthwise conv2d templates for CPUs, with spatial packing of the
output (after TVM's conv2d_spatial_pack_nchw): every (co, oh, ow) tile of the output is
accumulated in a packed "local" buffer and copied out once.

    for n, co0, oh0 (fused, parallel):
      for ow0, co1, oh1, ow1:
        for ci0:                                  # conv2d only
          for (ci1, kh, kw) in reorder_reduce:    # ann_reduce: kh, kw unrolled?
            for (co2, oh2, ow2) in reorder_inner: # ann_spatial: unroll / vectorize
              out_local[co2, oh2, ow2] += pad[...] * weight[...]
        out[...] = out_local[...]                 # at ow1 or ow0 (knob pack_at)

Knobs: tile_co, tile_oh, tile_ow (3 factors), tile_ci (2, conv2d), reorder_reduce,
reorder_inner, ann_reduce, ann_spatial, pack_at, pad ("inline" or "root"),
auto_unroll_max_step. Applies to any block with 4 spatial (n, c, h, w) and 3 reduce
(ci, kh, kw) iter vars (conv2d, grouped, dilated, transposed) or 2 reduce (depthwise).
"""
from __future__ import annotations

from tessel.schedule import BlockRV, LoopRV, Schedule
from tessel.space.templates.base import TemplateContext
from tessel.space.templates.common import (auto_unroll, compute_block, inline_spatial_producers,
                                           pack_output, parallel_outer, parallel_rest)


def conv2d_nchw(cfg: TemplateContext, sch: Schedule) -> None:
    block = compute_block(sch, "conv2d_nchw", n_spatial=4, n_reduce=3)
    n, co, oh, ow, ci, kh, kw = sch.get_loops(block)
    _direct(cfg, sch, block, [n, co, oh, ow], ci, [kh, kw])


def depthwise_conv2d_nchw(cfg: TemplateContext, sch: Schedule) -> None:
    block = compute_block(sch, "depthwise_conv2d_nchw", n_spatial=4, n_reduce=2)
    n, c, oh, ow, kh, kw = sch.get_loops(block)
    _direct(cfg, sch, block, [n, c, oh, ow], None, [kh, kw])


def _direct(cfg: TemplateContext, sch: Schedule, block: BlockRV, spatial: list[LoopRV],
            ci: LoopRV | None, kernel: list[LoopRV]) -> None:
    name = sch.get(block).name
    cfg.define_knob("pad", ["inline", "root"])
    inline_spatial_producers(sch, block, keep_padding=cfg["pad"] == "root")
    n, co, oh, ow = spatial
    tiles = {}
    for knob, loop, cap in (("tile_co", co, 32), ("tile_oh", oh, 16), ("tile_ow", ow, 64)):
        cfg.define_split(knob, loop, num_outputs=3, max_factor=cap)
        tiles[knob] = cfg.apply_split(knob, loop)
    (co0, co1, co2), (oh0, oh1, oh2), (ow0, ow1, ow2) = tiles.values()
    reduce_outer, reduce_inner = _split_channels(cfg, ci)
    reduce = [reduce_inner[0], *kernel] if reduce_inner else list(kernel)
    cfg.define_reorder("reorder_reduce", reduce, policy="all")
    cfg.define_reorder("reorder_inner", [co2, oh2, ow2], policy="all")
    reduce = [reduce[p] for p in cfg["reorder_reduce"]]
    inner = [(co2, oh2, ow2)[p] for p in cfg["reorder_inner"]]
    sch.reorder(n, co0, oh0, ow0, co1, oh1, ow1, *reduce_outer, *reduce, *inner)
    cfg.define_knob("pack_at", ["ow1", "ow0"])
    out = pack_output(sch, block, ow1 if cfg["pack_at"] == "ow1" else ow0)
    cfg.define_annotate("ann_reduce", kernel, policy="try_unroll")
    cfg.define_annotate("ann_spatial", inner, policy="try_unroll_vec")
    cfg.apply_annotate("ann_reduce", kernel)
    cfg.apply_annotate("ann_spatial", inner)
    sch.decompose_reduction(block, (reduce_outer or reduce)[0])
    cfg.define_knob("auto_unroll_max_step", [0, 16, 64, 512])
    outer = parallel_outer(sch, [n, co0, oh0])
    auto_unroll(sch, outer, cfg["auto_unroll_max_step"])
    parallel_rest(sch, {name, sch.get(out).name})


def _split_channels(cfg: TemplateContext, ci: LoopRV | None) -> tuple[list[LoopRV], list[LoopRV]]:
    if ci is None:
        return [], []
    cfg.define_split("tile_ci", ci, num_outputs=2)
    ci0, ci1 = cfg.apply_split("tile_ci", ci)
    return [ci0], [ci1]


__all__ = ["conv2d_nchw", "depthwise_conv2d_nchw"]
