"""Operators that move elements without computing: reshape (a view: the runtime aliases
it), transpose, slice and concat (index remapping). They keep their input's dtype."""
from __future__ import annotations

import math

import numpy as np

from tessel import ir, te
from tessel.graph.ir import TensorType, check
from tessel.graph.opdefs.base import (REQUIRED, Arg, Attrs, Example, axis_of, define,
                                      elementwise)

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


def _unravel(flat: ir.Expr, shape: tuple[int, ...]) -> Index:
    strides = [math.prod(shape[d + 1:]) for d in range(len(shape))]
    return tuple(flat // st if d == 0 else (flat // st) % n
                 for d, (n, st) in enumerate(zip(shape, strides)))


def _reshape_lower(args: list[Arg], a: Attrs, name: str, out: TensorType) -> te.Tensor:
    """out[i] = x at the same row-major position (a copy stage; the runtime aliases reshapes)."""
    x, = args
    shape = a["shape"]
    if shape == x.shape:
        return elementwise(shape, lambda i: x[i], name)

    def body(i: Index) -> ir.Expr:
        flat: ir.Expr | int = 0
        for v, n in zip(i, shape):
            flat = flat * n + v
        return x[_unravel(ir.convert(flat), x.shape)]

    return elementwise(shape, body, name)


define("reshape", "view", _reshape_infer, _reshape_lower,
       lambda args, a, out: np.reshape(args[0], a["shape"]), attrs=dict(shape=REQUIRED),
       layout="barrier", keeps_dtype=True, torch=lambda t, x, shape: x.reshape(shape),
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
       layout="barrier", keeps_dtype=True, torch=lambda t, x, perm: x.permute(perm),
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
       keeps_dtype=True, torch=_slice_torch,
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
       inputs=(1, -1), layout="concat", keeps_dtype=True,
       torch=lambda t, *xs, axis: t.cat(xs, axis),
       examples=[Example(((2, 3, 5), (2, 1, 5), (2, 4, 5)), dict(axis=1)),
                 Example(((3, 5), (2, 5)), dict(axis=0)),
                 Example(((3, 2), (3, 5)), dict(axis=-1))])
