"""Expert priors: for each design of a space, decisions that give a register-blocked kernel.

Uniform sampling of tile sizes rarely lands on what a CPU kernel needs all at once (a vector
tile of whole vectors, a few rows of register accumulators, a packed operand, the padding
computed once), and a cost model cannot learn that from a handful of measurements. So the
search measures these first, as AutoTVM measures a template's fallback configuration: each
design's tiling gets

- the vector axis (the block's last tiled spatial loop): an innermost tile of two vectors or
  one (32 or 16 float lanes with AVX-512, 16 or 8 with AVX2);
- the row axis (the spatial loop before it): as many rows as keep the accumulators within
  three quarters of the vector registers (Target.accumulator_registers: 12 of AVX2's 16, 24
  of AVX-512's 32), and at most 12 (each row broadcasts from an address of its own: more
  spill x86-64's general registers, and a 24 x 1-vector AVX-512 tile ran at half speed); a
  cache tile of up to 4 x 2 register tiles. When no divisor of the row extent gives 4 rows
  (a prime like the 17-wide output of a stride-2 convolution) but the whole extent fits the
  accumulators, a prior that takes all of it goes first. A design that splits the rows by
  what fills the accumulators, the last tile partial (MultiLevelTiling.partial_row_tile:
  AVX2's 6 rows over 1024 or 128), tiles whole splits; it goes first where the perfect tile
  keeps fewer than SLACK_CHAINS accumulators, after it otherwise;
- a register tile of fewer than MIN_CHAINS / 2 vectors (a matrix-vector product, M=1) widens
  its vector tile to MIN_CHAINS independent accumulators, or as many as fit, so its steps do
  not wait on one FMA's latency; one of fewer than MIN_CHAINS (7 pixels of a 7x7 map by one
  vector) is preceded by a variant that also holds a few iterations of the outermost spatial
  axis (output-channel blocks: 2 x 7 x 1 vector); one of one vector that loads more than it
  multiplies (AVX2's 7 or 8 pixels by one channel block of a convolution over a long
  reduction: a weight vector and a broadcast per pixel a step) by one of two channel blocks
  and as many pixels as fit beside them (4 x 2: 6 loads for 8 FMAs);
- every reduction: an inner tile of at most 256 (a conv's input channels and window whole),
  so the register tile accumulates long before it is stored;
- a tensorized design (MultiLevelTilingWithIntrin: an int8 dot-product instruction computes
  the innermost block, each iteration of its vector axis a whole vector): the same register
  tile counted in those vectors, unrolled up to 64 steps so that all its rows and vectors
  are (their accumulators then stay in registers);
- packing of the read along the vector axis on, a modest unroll (16), padding at the root;
  and each again with the padding inlined and nothing packed, reading the input where it
  lies: first when the reduction is short (SHORT_REDUCTION: a depthwise convolution or a
  pooling window of 9, MobileNet's 3-channel stem of 27), where copying the whole input costs
  about as much as the computation (MobileNet-v2's stride-2 depthwise at 112x112 91 -> 55 us),
  last otherwise, where a conditional load in the hot loop costs more (ResNet-18's 7x7 stem:
  573 -> 959 us).

Only decisions of sampling instructions a design has are set; the rest keep the design's own.
A prior that does not fit a design (ScheduleError) is dropped. The priors come ranked: whole
vector tiles first, then a local accumulator tile, then a packed operand; only the two best
ranks are kept (a design that vectorizes a strided axis without a local tile is hopeless).
"""
from __future__ import annotations

import math
from functools import partial
from typing import Any, Callable

from tessel.ir import PrimFunc
from tessel.schedule import Schedule, ScheduleError, Trace

SPATIAL_LEVELS, REDUCE_LEVELS = 4, 2  # MultiLevelTiling's "SSRSRS"
MAX_ROWS = 12  # rows of a register tile: each broadcasts from its own address
MIN_CHAINS = 8  # accumulators that hide FMA latency (about 4 cycles x 2 FMAs a cycle)
SLACK_CHAINS = 12  # accumulators that hide it with loads and broadcasts in between
PARTIAL_WASTE = 32  # a partial row tile goes first if it computes at most 1/32 more rows
REDUCE_INNER = 256
SHORT_REDUCTION = 32  # a reduction this short (a depthwise 3x3: 9) reads its padding inline
UNROLL = 16
TENSORIZED_UNROLL = 64  # a tensorized register tile unrolls rows x vectors (up to 24) whole
ROW_WISE = 8  # _promise of a design placing stages row by row: above 4 + 2 + 1
PARALLEL_TASKS = 4  # _rows_in_task: parallel tasks a core, at least
LOCAL_TILE_BYTES = 64 * 1024  # _rows_in_task: a task's accumulators, all its rows in one tile
WIDE, ROWS_INSIDE = 64, 8  # _rows_inside: vector tiles that make a product wide; row tiles


def prior_schedules(space: Any, func: PrimFunc, limit: int | None = None) -> list[Schedule]:
    """Schedules of `func`: the designs of `space` under the register-tile priors, likeliest
    first, at most `limit` of them (none for a space without MultiLevelTiling, e.g. a
    template: its author's defaults rule there)."""
    out = []
    for design, decisions in ranked_priors(space, func):
        if limit is not None and len(out) >= limit:
            break
        try:
            out.append(design.apply(Schedule(func), decisions))
        except ScheduleError:
            continue
    return out


def ranked_priors(space: Any, func: PrimFunc) -> list[tuple[Trace, dict[int, Any]]]:
    """(design, decisions) pairs of the two best ranks, likeliest first; nothing replayed."""
    from tessel.space.base import UnionSpace
    from tessel.space.rules import MultiLevelTiling
    if isinstance(space, UnionSpace):
        return [p for member in space.spaces for p in ranked_priors(member, func)]
    tiling = [r for r in getattr(space, "rules", ()) if isinstance(r, MultiLevelTiling)]
    if not tiling:
        return []
    lanes, accumulators = tiling[0].lanes, tiling[0].accumulators
    cores = max((getattr(r, "cores", 1) for r in space.rules), default=1)
    ranked = [(-_promise(design, decisions, _lanes(design, lanes)), -preference, k, design,
               decisions)
              for design in space.designs(func)
              for preference in [_partial_preference(design)]
              for k, decisions in enumerate(prior_decisions(design, _lanes(design, lanes),
                                                            accumulators,
                                                            shape=func.params[-1].shape,
                                                            cores=cores))]
    ranked.sort(key=lambda r: r[:3])  # stable: design order breaks ties
    best = ranked[0][0] if ranked else 0
    return [(design, decisions) for score, _, _, design, decisions in ranked
            if score <= best + 1]


def _lanes(design: Trace, lanes: int) -> int:
    """The lanes of one iteration of a design's vector axis: 1 where a tensor intrinsic
    computes the innermost block (MultiLevelTilingWithIntrin: each iteration of the tiled
    outer block is a whole vector of int32 accumulators)."""
    return 1 if _tensorized(design) else lanes


def _tensorized(design: Trace) -> bool:
    return any(inst.kind == "blockize" for inst in design.instructions)


def _promise(design: Trace, decisions: dict[int, Any], lanes: int) -> int:
    """How much a prior looks like a vendor kernel, to measure the likeliest first: its vector
    tile is whole vectors, it accumulates in a local (register) tile, it packs the operand.
    A design that places a row-wise operator's stages row by row ranks above all: AddRFactor's
    designs of a layer norm tile the partial sums of each row (768 wide on a 2-core Xeon:
    23-47 us a call under their priors, 12.5 row by row)."""
    sites = design.sampling_sites()
    if not any(design.instructions[s].kind == "sample_perfect_tile" for s in sites) and \
            any(_is_location(design, s) for s in sites):
        return ROW_WISE  # stages placed row by row (_rowwise): before any rfactor's tiling
    tiles = [decisions[s] for s in sites if isinstance(decisions.get(s), tuple)
             and _levels(design, s) == SPATIAL_LEVELS]
    whole = bool(tiles) and tiles[-1][-1] % lanes == 0
    local = any(inst.kind == "cache_write" for inst in design.instructions)
    # an inlined producer leaves nothing to pack: the read is where the data lies
    packed = any((_is_pack(design, s) and v == 1) or (_is_location(design, s) and v == -2)
                 for s, v in decisions.items())
    return 4 * whole + 2 * local + packed


def partial_rows(design: Trace) -> tuple[int, int] | None:
    """(row extent, rows of a register tile) of a design whose tiling splits the rows by a
    count that leaves a partial last tile (MultiLevelTiling.partial_row_tile); None for any
    other design."""
    from tessel.space.rules.tiling import PARTIAL
    extent = next((dict(inst.args)["value"] for inst in design.instructions
                   if inst.kind == "annotate" and dict(inst.args).get("key") == PARTIAL), None)
    if extent is None:
        return None
    rows = next(f[-1] for inst in design.instructions if inst.kind == "split"
                and isinstance(f := dict(inst.args)["factors"], tuple)
                and len(f) == 2 and f[0] is None and isinstance(f[1], int))
    return extent, rows


def _partial_preference(design: Trace) -> int:
    """For a design with partial row tiles: 1 when the perfect tiles of two vectors would
    hold fewer than SLACK_CHAINS accumulators (AVX2's 4 x 16 over 1024 or 128 rows: 8, the
    FMAs in flight with nothing to spare; 6 x 16 with a tail ran GMM-1024 10% faster on a
    Zen 3), the partial tile's rows are at most 1/PARTIAL_WASTE of the computed ones and the
    reduction at least REDUCE_INNER long, so it goes first among priors of equal promise;
    -1 otherwise: AVX-512's 8 x 32 hold 16; Winograd's 36 products of 16 rows (6 + 6 + 4:
    11% wasted) and of 196 rows by 64 (a short reduction: its 12 accumulators loaded and
    stored every 64 steps) ran 3-15% slower so, on a Zen 3. 0 for other designs."""
    partial = partial_rows(design)
    if partial is None:
        return 0
    extent, rows = partial
    whole = _largest_divisor(extent, min(MAX_ROWS, rows))
    waste = -(-extent // rows) * rows - extent
    reduction = math.prod(math.prod(design.decisions[s]) for s in design.sampling_sites()
                          if design.instructions[s].kind == "sample_perfect_tile"
                          and _levels(design, s) == REDUCE_LEVELS and s in design.decisions)
    first = 2 * whole < SLACK_CHAINS and waste * PARTIAL_WASTE <= extent and \
        reduction >= REDUCE_INNER
    return 1 if first else -1


def prior_decisions(design: Trace, lanes: int, accumulators: int, cores: int = 1,
                    shape: tuple | None = None) -> list[dict[int, Any]]:
    """Decision sets for `design` on a target with `lanes` float32 lanes, `accumulators`
    registers for the register tile and `cores`: one per vector width (2 or 1 vectors) that
    fits its vector axis; for a design that tiles nothing but places stages, one per loop over
    the rows of its output of `shape` (_rowwise; a matrix without it), or one for a tensorized
    design whose intrinsic's blocks leave no loop to tile (a 16 x 64 matmul in one AMX call);
    none when the design does neither."""
    tiles = [(site, math.prod(design.decisions[site]))
             for site in design.sampling_sites()
             if design.instructions[site].kind == "sample_perfect_tile"
             and site in design.decisions]
    spatial = [(s, e) for s, e in tiles if _levels(design, s) == SPATIAL_LEVELS]
    kept = _rfactored(design)
    reduce = [(s, e) for s, e in tiles if _levels(design, s) == REDUCE_LEVELS and s not in kept]
    if not spatial and not tiles and _tensorized(design):  # one intrinsic call does it all
        return [_categoricals(design, TENSORIZED_UNROLL)]
    if not spatial:
        return [] if tiles else _rowwise(design, shape)
    unroll = TENSORIZED_UNROLL if _tensorized(design) else UNROLL
    fixed = {**_categoricals(design, unroll),
             **{s: _reduce_tile(e, _cap(design, s, REDUCE_INNER)) for s, e in reduce}}
    out = []
    by_width: list[tuple[int, list[dict[int, Any]]]] = []  # (rows of the register tile, variants)
    split = partial_rows(design)
    for width in (2 * lanes, lanes):
        if spatial[-1][1] % width and width != lanes:
            continue  # two vectors must divide the axis; one may leave a tail
        if split is not None and (width != 2 * lanes or len(spatial) < 2):
            continue  # its rows fill the accumulators with two vectors
        decisions = dict(fixed)
        decisions.update({s: (e, 1, 1, 1) for s, e in spatial[:-2]})
        vec_site, vec_extent = spatial[-1]
        inner = _vector_tile(vec_extent, width, lanes)
        rows = 1
        if split is not None:  # the row site tiles whole splits of split[1] rows
            row_site, row_extent = spatial[-2]
            if split[1] * math.ceil(inner / lanes) > accumulators:
                continue
            tiles = _largest_divisor(row_extent, 4)
            decisions[row_site] = (row_extent // tiles, 1, tiles, 1)
            rows = split[1]
        elif len(spatial) >= 2:
            row_site, row_extent = spatial[-2]
            budget = accumulators // math.ceil(inner / lanes)
            decisions[row_site] = _row_tile(row_extent, min(MAX_ROWS, budget))
            rows = decisions[row_site][-1]
        if rows * math.ceil(inner / lanes) < MIN_CHAINS // 2:  # a matrix-vector product
            inner = _chain_tile(vec_extent, rows, lanes, accumulators, inner,
                                _cap(design, vec_site, inner))
        tiles = _largest_divisor(vec_extent // inner, 2)
        decisions[vec_site] = (vec_extent // inner // tiles, 1, tiles, inner)
        if len(spatial) >= 2:
            decisions[row_site] = _rows_inside(decisions[row_site], decisions[vec_site])
        vectors = math.ceil(inner / lanes)
        variants = [decisions]
        if len(spatial) >= 2:
            if rows < 4 and row_extent <= accumulators // vectors:  # 17, 13: no divisor
                # whole rows first: a 1-row tile reloads every weight vector per pixel
                variants.insert(0, {**decisions, row_site: (1, 1, 1, row_extent)})
            outer = [(s, e) for s, e in spatial[:-2] if e > 1]
            if not outer and row_extent <= vec_extent:  # the weight outweighs the rows
                inside = _rows_in_task(decisions[row_site], decisions[vec_site], cores,
                                       rows)
                if inside != decisions[row_site]:
                    variants.insert(0, {**decisions, row_site: inside})
            if outer and split is None:  # a 7x7 map's 7 rows: two channel blocks, 14
                grown = (_grown(d, row_site, outer[0], vectors, accumulators)
                         for d in variants)
                variants = [v for d, g in zip(variants, grown) for v in (g, d) if v]
                if vectors == 1 and math.prod(e for _, e in reduce) > SHORT_REDUCTION:
                    balanced = (_balanced(d, row_site, outer, accumulators)
                                for d in variants)
                    variants = [v for d, b in zip(variants, balanced) for v in (b, d) if v]
        by_width.append((rows, variants))
    if len(by_width) == 2 and by_width[0][0] == 1 and by_width[1][0] >= MIN_CHAINS // 2:
        # two vectors leave no divisor of the rows but 1 within the accumulators (49 rows of
        # ConvNeXt's 7 x 7 stage, AVX2's 6 rows of 2 vectors): the chain rule then widens the
        # one row, which reloads every weight vector per row (1 x 64 lanes: 9.7 ms a call of its
        # 3072 -> 768 dense on a Zen 3, 7 rows x 1 vector: 2.8 ms); one vector first there
        by_width.reverse()
    for _, variants in by_width:
        out += [d for d in variants if d not in out]
    inlined = [d for d in map(partial(_inlined, design), out) if d and d not in out]
    short = math.prod(e for _, e in reduce) <= SHORT_REDUCTION
    return inlined + out if short else out + inlined


def _rfactored(design: Trace) -> set[int]:
    """The sampling sites whose split an rfactor factors (AddRFactor's designs): the loops of
    every later tile come from that split, their extents from its decision, so it keeps the
    design's own (a 768-wide layer norm's prior of (12, 64) against a design drawn at
    (64, 12) failed each later tile)."""
    source: dict[Any, int] = {}  # a loop or factor -> the site it comes from
    out = set()
    for index, inst in enumerate(design.instructions):
        if inst.kind == "sample_perfect_tile":
            source.update((rv, index) for rv in inst.outputs)
        elif inst.kind == "split":
            sites = [source[rv] for rv in inst.inputs() if rv in source]
            source.update((rv, sites[0]) for rv in inst.outputs if sites)
        elif inst.kind == "rfactor":
            out.update(source[rv] for rv in inst.inputs() if rv in source)
    return out


def _levels(design: Trace, site: int) -> int:
    return int(dict(design.instructions[site].args).get("n", 0))


def _largest_divisor(n: int, limit: int) -> int:
    return max(d for d in _divisors(n) if d <= limit)


def _chain_tile(extent: int, rows: int, lanes: int, accumulators: int, inner: int,
                cap: int) -> int:
    """A vector tile wide enough for MIN_CHAINS independent accumulators over `rows` rows
    (a matrix-vector product has one row: a tile of one vector, or of 10 lanes when 1000 has
    no divisor of 16, waits on one FMA's latency at every step): a divisor of `extent` from
    `inner` up to `cap` lanes (the tiling's max_innermost_factor)."""
    widths = [d for d in _divisors(extent) if inner <= d <= cap]
    return _chain_count(widths, lambda d: rows * math.ceil(d / lanes), accumulators) or inner


def _grown(decisions: dict[int, Any], row_site: int, outer: tuple[int, int], vectors: int,
           accumulators: int) -> dict[int, Any] | None:
    """`decisions` with the register tile also holding a few of the `outer` (site, extent)
    axis's iterations when its rows x vectors fall short of MIN_CHAINS; None when they do not
    (or nothing more fits)."""
    chains = decisions[row_site][-1] * vectors
    site, extent = outer
    count = _chain_count(_divisors(extent), lambda f: chains * f, accumulators)
    if chains >= MIN_CHAINS or count <= 1:
        return None
    return {**decisions, site: (extent // count, 1, 1, count)}


def _balanced(decisions: dict[int, Any], row_site: int, outer: list[tuple[int, int]],
              accumulators: int) -> dict[int, Any] | None:
    """`decisions` of a one-vector register tile of p rows (a blocked convolution's pixels:
    each step broadcasts p inputs and loads one weight vector for p FMAs, more loads than
    FMAs, and a core loads no faster than it multiplies) with two iterations of the first
    `outer` (site, extent) axis (output-channel blocks, which share the broadcasts) and the
    most pixels whose accumulators fit beside them: q x 2 FMAs for q + 2 loads, as a matrix
    product's two-vector tile. The q pixels are a divisor of the row; where that gives fewer
    than MIN_CHAINS // 2, a square of the row's and the next `outer` axis's (image rows:
    2 x 2 pixels of a 14 x 14 map). Only where q >= MIN_CHAINS // 2 and that is a quarter
    more FMAs a load than now; None otherwise. A third block (4 x 3 over 15 or 3 blocks)
    took all 16 AVX2 registers and ran 1.5x slower. On a Zen 3 (AVX2, 8-channel blocks),
    ResNet-50's 1x1 convolution 128 -> 512 at 28 x 28 went 7 x 1 -> 4 x 2 tiles, 0.80 ->
    0.65 ms a call (onnxruntime 0.65), its stride-2 1x1 256 -> 512 1.26x faster, the stride-2
    3x3 128 -> 128 1.21x; MobileNet-v2's 1x1 96 -> 576 at 14 x 14 (2 x 2) x 2 1.5x (2 x 4
    blocks 1.18x); a 7 x 7 map keeps 7 x 1 (7 x 2 spills: 0.82x)."""
    if len(outer) < 2:
        return None  # no channel blocks beside the image's rows: nothing shares broadcasts
    (site, extent), *others = outer
    o, m, t, p = decisions[row_site]
    if decisions[site][-1] != 1 or extent % 2:
        return None  # grown already, or no pair of blocks
    rows, most = o * m * t * p, min(MAX_ROWS, accumulators // 2)
    q, c = _largest_divisor(rows, most), 1
    if q < MIN_CHAINS // 2 and others and decisions[others[0][0]][-1] == 1:
        image = others[0][1]
        c, q = max(((k, d) for k in _divisors(image) for d in _divisors(rows)
                    if k * d <= most), key=lambda kd: (kd[0] * kd[1], kd[1]))
    if q * c < MIN_CHAINS // 2 or 2 * q * c / (q * c + 2) < 1.25 * p / (p + 1):
        return None
    outside = o if (rows // q) % o == 0 else 1
    out = {**decisions, row_site: (outside, 1, rows // q // outside, q),
           site: (extent // 2, 1, 1, 2)}
    if c > 1:
        out[others[0][0]] = (others[0][1] // c, 1, 1, c)
    return out


def _chain_count(options: list[int], chains: Callable[[int], int],
                 accumulators: int) -> int:
    """The least of `options` whose `chains(option)` reaches MIN_CHAINS within the accumulator
    registers, else the greatest within them (0 when none fits)."""
    fits = [o for o in options if chains(o) <= accumulators]
    enough = [o for o in fits if chains(o) >= MIN_CHAINS]
    return min(enough) if enough else max(fits, default=0)


def _divisors(n: int) -> list[int]:
    """The divisors of `n`, ascending, from its prime factors: trial division stops at the
    square root of what is left, so 10**18 takes a few dozen steps and a large prime at most
    sqrt(n) (counting to n hung on a 10**9-wide loop)."""
    divisors = [1]
    for prime, power in _factorize(n).items():
        divisors = [d * prime ** k for d in divisors for k in range(power + 1)]
    return sorted(divisors)


def _factorize(n: int) -> dict[int, int]:
    """{prime: power} of n >= 1."""
    factors: dict[int, int] = {}
    d = 2
    while d * d <= n:
        while n % d == 0:
            factors[d] = factors.get(d, 0) + 1
            n //= d
        d += 1 if d == 2 else 2
    if n > 1:
        factors[n] = factors.get(n, 0) + 1
    return factors


def _vector_tile(extent: int, width: int, lanes: int) -> int:
    """The vector axis's innermost tile: the largest divisor of `extent` up to `width` lanes
    that fills whole vectors of min(lanes, 8) lanes, else the largest divisor (2600 LSTM gate
    columns: 8 lanes, not 13 of a 16-lane vector)."""
    whole = [d for d in _divisors(extent) if d <= width and d % min(lanes, 8) == 0]
    return max(whole) if whole else _largest_divisor(extent, width)


def _rows_inside(row: tuple[int, ...], vec: tuple[int, ...]) -> tuple[int, ...]:
    """The row tiling `row` with all its register tiles inside the cache tile when there are
    few of them (at most ROWS_INSIDE) and many vector tiles (at least WIDE): a product of a
    few rows by many columns (the LSTM decoder's 35 x 10000) otherwise streams the whole
    weight once per row tile (5 times 26 MB: 83 GFLOP/s), where inside each panel of the
    weight is reused by every row while in cache."""
    outer, _, tiles, rows = row
    if vec[0] < WIDE or not 1 < outer * tiles <= ROWS_INSIDE:
        return row
    return (1, 1, outer * tiles, rows)


def _rows_in_task(row: tuple[int, ...], vec: tuple[int, ...], cores: int,
                  tile_rows: int = 1) -> tuple[int, ...]:
    """The row tiling `row` of a matrix product with no more rows than columns (a
    transformer's dense layers: 128 or 197 tokens by 768 to 3072 columns) with the row
    blocks inside each parallel task, as few outside as leave PARALLEL_TASKS tasks a core
    among the vector tiles `vec`: with row blocks outermost each core streamed the whole
    weight once per row block (five times for ViT's 200 rows), from memory in a model, whose
    weights do not stay in the caches between layers; inside, a core reads its columns' panel
    of the weight once and keeps it in its cache for every row (an MLP of 768 -> 3072 -> 768
    layers on a 2-core Xeon, in sequence: 194 -> 268 GFLOP/s, torch 278).

    Where the task's rows (register tiles of `tile_rows`) make a local tile of at most
    LOCAL_TILE_BYTES (it stays in L2 between the reduction's chunks), all its register tiles
    go between the two reduction levels: each chunk of the weight is read into L1 once and
    used by every row before the next; above the reduction, each block of rows cycled the
    task's whole panel through L1 again. On a Zen 3, untuned, against onnxruntime in one
    process: BERT-base 0.93x -> 1.03x, GPT-2 0.81x -> 0.93x, ViT-B/16 0.83x -> 0.87x,
    ConvNeXt-T 0.92x -> 0.98x (BERT's 768 -> 3072 dense layer alone 7.2 -> 6.0 ms a call,
    its 3072 -> 768 one 5.5 -> 6.3 alone, faster in the model's sequence)."""
    outer, middle, tiles, rows = row
    blocks = outer * middle
    for d in _divisors(blocks):
        if d * vec[0] >= PARALLEL_TASKS * cores:
            inside = blocks // d * tiles
            if inside * tile_rows * vec[2] * vec[3] * 4 <= LOCAL_TILE_BYTES:
                return (d, 1, inside, rows)
            return (d, blocks // d, tiles, rows)
    return row


def _row_tile(extent: int, rows_max: int) -> tuple[int, int, int, int]:
    rows = _largest_divisor(extent, max(1, rows_max))
    tiles = _largest_divisor(extent // rows, 4)
    return (extent // rows // tiles, 1, tiles, rows)


def _cap(design: Trace, site: int, default: int) -> int:
    """The largest innermost factor the tiling at `site` accepts (its max_innermost_factor)."""
    return dict(design.instructions[site].args).get("max_innermost_factor", default)


def _reduce_tile(extent: int, cap: int) -> tuple[int, int]:
    """A reduction's two-level tile: the longest inner loop up to REDUCE_INNER the site
    accepts (an rfactor's split takes at most 64: a 768-wide layer norm's 256 failed every
    prior of GPT-2's, ViT's and BERT's layer norms, which then ran unscheduled)."""
    inner = _largest_divisor(extent, min(REDUCE_INNER, cap))
    return (extent // inner, inner)


def _rowwise(design: Trace, shape: tuple | None = None) -> list[dict[int, Any]]:
    """For a design that tiles nothing but places stages (a softmax's maximum, exponentials,
    sum and quotient; a layer norm's mean, variance and output): every stage computed inside
    one loop over the leading axes of the output of `shape` (a matrix without it), the rows in
    parallel: first inside the loop over rows (the one above the last axis), then outward
    from there (where that one is not a legal place: the next sets). Inside the rows, a
    row's intermediates stay in L1 however long the rows are; placed in a loop over heads,
    a head's exponentials went through memory (Whisper's 6 x 1500 x 1500 scores: 11.7 ms a
    call inside the heads, 6.7 inside the rows; BERT's 12 x 512 x 512 3.35 and 1.13; at
    128 and 197 columns the same; 2-core Xeon, 2026-11-28)."""
    sites = [s for s in design.sampling_sites() if _is_location(design, s)]
    if not sites:
        return []
    rank = len(shape) if shape is not None else 2
    depths = list(range(max(rank - 2, 0), -1, -1))
    return [{**_categoricals(design), **{s: depth for s in sites}} for depth in depths]


def _inlined(design: Trace, decisions: dict[int, Any]) -> dict[int, Any] | None:
    """`decisions` with the producers (padding) inlined into their consumer and nothing
    packed, or None when the design has no producer to place: a depthwise convolution then
    reads its input where it lies (the padding at the root copies all of it first, and so does
    the pack of the input that inlining it makes the read along the vector axis)."""
    sites = [s for s in design.sampling_sites() if _is_location(design, s)]
    if not sites:
        return None
    return {**decisions, **{s: -2 for s in sites}, **{s: 0 for s in design.sampling_sites()
                                                      if _is_pack(design, s)}}


def _is_location(design: Trace, site: int) -> bool:
    return design.instructions[site].kind == "sample_compute_location"


def _is_pack(design: Trace, site: int) -> bool:
    inst = design.instructions[site]
    return inst.kind == "sample_categorical" and \
        tuple(dict(inst.args).get("candidates", ())) == (0, 1)


def _categoricals(design: Trace, unroll: int = UNROLL) -> dict[int, Any]:
    """Pack the vector-axis read, unroll by `unroll`, compute producers (padding) at the
    root."""
    out: dict[int, Any] = {}
    for site in design.sampling_sites():
        inst = design.instructions[site]
        if _is_location(design, site):
            out[site] = -1
        elif _is_pack(design, site):
            out[site] = 1
        elif inst.kind == "sample_categorical":
            candidates = tuple(dict(inst.args).get("candidates", ()))
            if unroll in candidates:
                out[site] = candidates.index(unroll)
    return out


__all__ = ["prior_schedules", "ranked_priors", "prior_decisions", "partial_rows"]
