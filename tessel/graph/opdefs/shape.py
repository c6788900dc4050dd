"""Operators that move elements without computing: reshape (a view: the runtime aliases
it), transpose, slice, concat, pad and tile (index remapping). They keep their input's
dtype."""
from __future__ import annotations

import math

import numpy as np

from tessel import ir, te
from tessel.graph.ir import TensorType, check
from tessel.graph.opdefs.base import (REQUIRED, Arg, Attrs, Example, axis_of, define,
                                      elementwise, ravel, same, unravel)

Index = tuple[ir.Expr, ...]
X3 = (3, 5, 7)


# ---- reshape ----

def _reshape_infer(inputs, attrs, label):
    shape = tuple(int(n) for n in attrs["shape"])
    check(all(n >= 1 for n in shape), f"node {label} (reshape): shape {shape} must be "
                                       f"resolved to positive sizes by the importer")
    check(math.prod(shape) == inputs[0].size, f"node {label} (reshape): {inputs[0].shape} "
                                              f"has {inputs[0].size} elements, not {shape}")
    attrs["shape"] = shape
    return shape


def _reshape_lower(args: list[Arg], a: Attrs, name: str, out: TensorType) -> te.Tensor:
    """out[i] = x at the same row-major position (a copy stage; the runtime aliases reshapes)."""
    x, = args
    shape = a["shape"]
    if shape == x.shape:
        return elementwise(shape, lambda i: x[i], name)

    return elementwise(shape, lambda i: x[unravel(ravel(i, shape), x.shape)], name)


define("reshape", "view", _reshape_infer, _reshape_lower,
       lambda args, a, out: np.reshape(args[0], a["shape"]), attrs=dict(shape=REQUIRED),
       layout="barrier", dtype=same, torch=lambda t, x, shape: x.reshape(shape),
       examples=[Example((X3,), dict(shape=(5, 21))), Example(((2, 3, 5),), dict(shape=(30,))),
                 Example(((2, 15),), dict(shape=(2, 3, 5)))])


# ---- transpose ----

def _transpose_infer(inputs, attrs, label):
    x = inputs[0].shape
    perm = tuple(int(p) for p in attrs["perm"])
    check(sorted(perm) == list(range(len(x))),
          f"node {label} (transpose): perm {perm} is not a permutation of {len(x)} axes")
    attrs["perm"] = perm
    return tuple(x[p] for p in perm)


def _transpose_lower(args: list[Arg], a: Attrs, name: str, out: TensorType) -> te.Tensor:
    x, = args
    perm = a["perm"]
    return elementwise(out.shape, lambda i: x[tuple(i[perm.index(d)] for d in range(x.ndim))],
                       name)


define("transpose", "injective", _transpose_infer, _transpose_lower,
       lambda args, a, out: np.transpose(args[0], a["perm"]), attrs=dict(perm=REQUIRED),
       layout="barrier", dtype=same, torch=lambda t, x, perm: x.permute(perm),
       examples=[Example((X3,), dict(perm=(2, 0, 1))),
                 Example(((2, 3, 5, 7),), dict(perm=(0, 2, 3, 1)))])


# ---- slice ----

def slice_range(n: int, start: int | None, end: int | None, step: int | None) -> range:
    """The indices numpy's `x[start:end:step]` takes along an axis of `n` (the clamping of
    ONNX Slice and torch's slice too), as a range: its start, stop and step are the slice
    operator's attributes for that axis."""
    return range(n)[slice(start, end, step)]


def _slice_infer(inputs, attrs, label):
    x = inputs[0].shape
    starts, ends, steps = (tuple(int(v) for v in attrs[k]) for k in ("starts", "ends", "steps"))
    check(len(starts) == len(ends) == len(steps) == len(x),
          f"node {label} (slice): starts, ends and steps need one entry per axis of {x}")
    out = []
    for n, start, end, step in zip(x, starts, ends, steps):
        taken = range(start, end, step)
        check(step != 0 and len(taken) >= 1 and 0 <= taken[0] < n and 0 <= taken[-1] < n,
              f"node {label} (slice): range({start}, {end}, {step}) takes no element or "
              f"leaves an axis of {n} (shapes are static: empty slices are not supported)")
        out.append(len(taken))
    attrs.update(starts=starts, ends=ends, steps=steps)
    return tuple(out)


def _slice_lower(args: list[Arg], a: Attrs, name: str, out: TensorType) -> te.Tensor:
    x, = args
    return elementwise(out.shape, lambda i: x[tuple(s + v * st for v, s, st in zip(
        i, a["starts"], a["steps"]))], name)


def _slice_reference(args, a, out):
    x = args[0]
    for axis, (s, e, st) in enumerate(zip(a["starts"], a["ends"], a["steps"])):
        x = np.take(x, np.arange(s, e, st), axis=axis)
    return x


def _slice_torch(t, x, starts, ends, steps):
    for axis, (s, e, st) in enumerate(zip(starts, ends, steps)):
        x = x.index_select(axis, t.arange(s, e, st))
    return x


define("slice", "injective", _slice_infer, _slice_lower, _slice_reference,
       attrs=dict(starts=REQUIRED, ends=REQUIRED, steps=REQUIRED), layout="barrier",
       dtype=same, torch=_slice_torch,
       examples=[Example((X3,), dict(starts=(1, 0, 2), ends=(3, 5, 7), steps=(1, 2, 3))),
                 Example(((4, 6),), dict(starts=(3, 5), ends=(-1, 0), steps=(-1, -2))),
                 Example(((2, 9),), dict(starts=(0, 8), ends=(2, 9), steps=(1, 1)))])


# ---- concat ----

def _concat_infer(inputs, attrs, label):
    first = inputs[0].shape
    axis = attrs["axis"] = axis_of(label, "concat", attrs["axis"], len(first))
    for t in inputs[1:]:
        ok = len(t.shape) == len(first) and all(
            a == b for i, (a, b) in enumerate(zip(t.shape, first)) if i != axis)
        check(ok, f"node {label} (concat): shapes {first} and {t.shape} differ off axis {axis}")
    return (*first[:axis], sum(t.shape[axis] for t in inputs), *first[axis + 1:])


def _concat_lower(xs: list[Arg], a: Attrs, name: str, out: TensorType) -> te.Tensor:
    """A select chain over the inputs along `axis` (only the chosen input is read)."""
    axis = a["axis"]
    offsets = [sum(t.shape[axis] for t in xs[:m]) for m in range(len(xs))]

    def load(t: te.Tensor, off: int, i: Index) -> ir.Expr:
        return t[tuple(v - off if d == axis else v for d, v in enumerate(i))]

    def body(i: Index) -> ir.Expr:
        value = load(xs[-1], offsets[-1], i)
        for t, off in reversed(list(zip(xs[:-1], offsets[:-1]))):
            value = te.if_then_else(i[axis] < off + t.shape[axis], load(t, off, i), value)
        return value

    return elementwise(out.shape, body, name)


define("concat", "injective", _concat_infer, _concat_lower,
       lambda args, a, out: np.concatenate(args, axis=a["axis"]), attrs=dict(axis=REQUIRED),
       inputs=(1, -1), layout="concat", dtype=same,
       torch=lambda t, *xs, axis: t.cat(xs, axis),
       examples=[Example(((2, 3, 5), (2, 1, 5), (2, 4, 5)), dict(axis=1)),
                 Example(((3, 5), (2, 5)), dict(axis=0)),
                 Example(((3, 2), (3, 5)), dict(axis=-1))])


# ---- pad ----

PAD_MODES = ("constant", "reflect", "edge", "wrap")


def _pad_infer(inputs, attrs, label):
    x = inputs[0].shape
    pads = tuple(int(p) for p in attrs["pads"])
    check(len(pads) == 2 * len(x), f"node {label} (pad): pads needs {2 * len(x)} values (the "
                                   f"begins, then the ends of each axis of {x}), got {pads}")
    check(attrs["mode"] in PAD_MODES, f"node {label} (pad): mode {attrs['mode']!r} is not one "
                                      f"of {PAD_MODES}")
    check(len(inputs) == 1 or inputs[1].shape in ((), (1,)),
          f"node {label} (pad): the padding value must be one number, got {inputs[-1].shape}")
    attrs.update(pads=pads, value=float(attrs["value"]))
    out = []
    for n, (b, e) in zip(x, zip(pads, pads[len(x):])):
        kept = n + min(b, 0) + min(e, 0)  # what the negative pads (crops) leave
        check(kept >= 1, f"node {label} (pad): pads {pads} crop an axis of {n} away")
        check(attrs["mode"] != "reflect" or max(b, e) < kept,
              f"node {label} (pad): reflect pads {pads} must be smaller than the axis ({kept})")
        out.append(kept + max(b, 0) + max(e, 0))
    return tuple(out)


def _pad_source(y: ir.Expr, n: int, b: int, e: int, mode: str) -> ir.Expr:
    """The index along an axis of `n` that output index y of a pad by (b, e) reads (for
    "constant", only where it falls inside)."""
    if b == 0 and e == 0:
        return y
    crop, kept = max(-b, 0), n + min(b, 0) + min(e, 0)
    t = y - max(b, 0)  # the position in the cropped axis
    if mode == "edge":
        t = te.min(te.max(t, 0), kept - 1)
    elif mode == "reflect":
        folded = te.max(t, 0 - t)
        t = te.min(te.max((kept - 1) - te.max(kept - 1 - folded, folded - (kept - 1)), 0),
                   kept - 1)  # (the clamp only shows the analyzer what folding keeps)
    elif mode == "wrap":
        t = (t + kept * -(-max(b, 0) // kept)) % kept
    return t + crop


def _pad_lower(args: list[Arg], a: Attrs, name: str, out: TensorType) -> te.Tensor:
    """An index remapping; "constant" reads x only inside it, else the value."""
    x, *value = args
    rank, pads, mode = x.ndim, a["pads"], a["mode"]
    fill = value[0][(0,) * value[0].ndim] if value else ir.const(a["value"], x.dtype)

    def body(i: Index) -> ir.Expr:
        src = tuple(_pad_source(y, n, b, e, mode)
                    for y, n, b, e in zip(i, x.shape, pads, pads[rank:]))
        if mode != "constant":
            return x[src]
        conds = [c for y, b, e, n in zip(i, pads, pads[rank:], out.shape)
                 for c in ([y >= b] if b > 0 else []) + ([y < n - e] if e > 0 else [])]
        return te.if_then_else(te.all(*conds), x[src], fill) if conds else x[src]

    return elementwise(out.shape, body, name)


def _pad_reference(args: list[np.ndarray], a: Attrs, out: TensorType) -> np.ndarray:
    x, rank, pads = args[0], args[0].ndim, a["pads"]
    x = x[tuple(slice(max(-b, 0), n - max(-e, 0)) for n, b, e in zip(x.shape, pads, pads[rank:]))]
    widths = [(max(b, 0), max(e, 0)) for b, e in zip(pads, pads[rank:])]
    if a["mode"] != "constant":
        return np.pad(x, widths, mode=a["mode"])
    value = args[1].reshape(()) if len(args) > 1 else a["value"]
    return np.pad(x, widths, constant_values=value)


def _pad_torch(t, x, *computed, pads, mode, value):
    rank = x.dim()
    torch_pads = [p for d in reversed(range(rank)) for p in (pads[d], pads[d + rank])]
    mode = {"edge": "replicate", "wrap": "circular"}.get(mode, mode)
    if mode != "constant":  # (torch pads only the trailing axes of a batch)
        while torch_pads[-2:] == [0, 0]:
            torch_pads = torch_pads[:-2]
        return t.nn.functional.pad(x, torch_pads, mode=mode)
    fill = float(computed[0].reshape(())) if computed else value
    return t.nn.functional.pad(x, torch_pads, value=fill)


define("pad", "injective", _pad_infer, _pad_lower, _pad_reference,
       attrs=dict(pads=REQUIRED, mode="constant", value=0.0), inputs=(1, 2), layout="barrier",
       dtype=same, torch=_pad_torch,
       examples=[Example(((2, 3, 5, 4),), dict(pads=(0, 1, 2, 1, 1, 0, 3, -1), value=1.5)),
                 Example((X3,), dict(pads=(-1, 2, -2, 1, -1, 0))),
                 Example(((2, 3, 5, 4), ()), dict(pads=(0, 0, 1, 2, 0, 0, 3, 1))),
                 Example(((1, 2, 5, 4),), dict(pads=(0, 0, 4, 3, 0, 0, 1, 2), mode="reflect")),
                 Example(((2, 3, 5),), dict(pads=(0, 0, 3, 0, 0, 7), mode="edge")),
                 Example(((1, 2, 5, 4),), dict(pads=(0, 0, 4, 1, 0, 0, 2, 3), mode="wrap"))])


# ---- tile ----

def _tile_infer(inputs, attrs, label):
    x = inputs[0].shape
    repeats = tuple(int(r) for r in attrs["repeats"])
    check(len(repeats) == len(x) and min(repeats) >= 1,
          f"node {label} (tile): repeats {repeats} needs one count >= 1 per axis of {x}")
    attrs["repeats"] = repeats
    return tuple(n * r for n, r in zip(x, repeats))


def _tile_lower(args: list[Arg], a: Attrs, name: str, out: TensorType) -> te.Tensor:
    x, = args
    return elementwise(out.shape, lambda i: x[tuple(v if r == 1 else v % n for v, n, r in zip(
        i, x.shape, a["repeats"]))], name)


define("tile", "injective", _tile_infer, _tile_lower,
       lambda args, a, out: np.tile(args[0], a["repeats"]), attrs=dict(repeats=REQUIRED),
       layout="barrier", dtype=same, torch=lambda t, x, repeats: x.repeat(*repeats),
       examples=[Example((X3,), dict(repeats=(2, 1, 3))), Example(((1, 4),), dict(repeats=(3, 2)))])
