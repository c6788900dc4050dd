"""Einsum as the graph's operators, for both importers (ONNX Einsum, torch.einsum): reduce_sum,
transpose, reshape and one matmul (or dense layer) per pair of operands."""
from __future__ import annotations

import math

from tessel.graph.frontend.context import Const, GraphBuilder, Value


def _terms(ctx: GraphBuilder, equation: str, shapes: list[tuple[int, ...]]
           ) -> tuple[list[str], str]:
    """Each operand's letters and the result's, an ellipsis spelled out as letters of its own
    (right-aligned: an operand's missing leading ones are absent); an implicit result is the
    ellipsis, then the letters used once, in alphabetical order."""
    eq = equation.replace(" ", "")
    lhs, arrow, rhs = eq.partition("->")
    terms = lhs.split(",")
    ctx.check(len(terms) == len(shapes), f"equation {equation!r} names {len(terms)} operands, "
                                         f"there are {len(shapes)}")
    spare = [c for c in "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz" if c not in eq]
    widest = max((len(s) - len(t.replace("...", "")) for t, s in zip(terms, shapes)
                  if "..." in t), default=0)
    ellipsis = "".join(spare[:widest])
    out = []
    for t, s in zip(terms, shapes):
        n = len(s) - len(t.replace("...", ""))
        t = t.replace("...", ellipsis[widest - n:] if n else "")
        ctx.check(t.isalpha() or not t, f"equation {equation!r}: term {t!r} is not letters")
        ctx.check(len(t) == len(s), f"equation {equation!r}: term {t!r} for an operand of "
                                    f"shape {s}")
        ctx.check(len(set(t)) == len(t), f"equation {equation!r}: a letter repeated in one "
                                         f"operand (a diagonal) is not supported")
        out.append(t)
    if arrow:
        rhs = rhs.replace("...", ellipsis)
    else:
        counts = "".join(out)
        rhs = ellipsis + "".join(sorted(c for c in set(counts) if counts.count(c) == 1
                                        and c not in ellipsis))
    return out, rhs


def einsum(ctx: GraphBuilder, equation: str, ins: list) -> Value:
    """Einsum as the graph's operators: a letter that one operand has and nothing after it
    needs is summed first (reduce_sum); two operands meet in one matmul, its batch the letters
    both have and the result keeps, its reduction the letters both have and it does not (a
    dense layer where the right operand is a constant and there is no batch), reshaped and
    transposed to the result's order; more operands pair up left to right."""
    terms, result = _terms(ctx, equation, [ctx.shape(v) for v in ins])
    size: dict[str, int] = {}
    for t, v in zip(terms, ins):
        for c, n in zip(t, ctx.shape(v)):
            ctx.check(size.setdefault(c, n) == n, f"letter {c!r} has sizes {size[c]} and {n}")
    ctx.check(set(result) <= set(size), f"result {result!r} has a letter no operand has")

    def sum_unneeded(v: Value, t: str, needed: set[str]) -> tuple[Value, str]:
        axes = tuple(i for i, c in enumerate(t) if c not in needed)
        if not axes:
            return v, t
        kept = "".join(c for c in t if c in needed)
        v = ctx.emit("reduce_sum", [v], axes=axes, keepdims=False)
        return (v if kept else ctx.reshape(v, ())), kept

    def needed_after(k: int) -> set[str]:
        return set(result).union(*terms[k + 1:])

    acc, t = sum_unneeded(ins[0], terms[0], needed_after(0))
    for k in range(1, len(ins)):
        needed = needed_after(k)
        b, tb = sum_unneeded(ins[k], terms[k], needed | set(t))
        acc, t = sum_unneeded(acc, t, needed | set(tb))
        batch = [c for c in t if c in tb and c in needed]
        inner = [c for c in t if c in tb and c not in needed]
        left, right = [c for c in t if c not in tb], [c for c in tb if c not in t]
        dims = lambda cs: [size[c] for c in cs]  # noqa: E731
        a2 = ctx.reshape(ctx.transpose(acc, [t.index(c) for c in batch + left + inner]),
                         dims(batch) + [math.prod(dims(left)), math.prod(dims(inner))])
        b2 = ctx.reshape(ctx.transpose(b, [tb.index(c) for c in batch + inner + right]),
                         dims(batch) + [math.prod(dims(inner)), math.prod(dims(right))])
        if not batch and isinstance(b2, Const):
            y = ctx.emit("dense", [a2, ctx.transpose(b2, (1, 0))])
        else:
            y = ctx.emit("matmul", [a2, b2])
        acc, t = ctx.reshape(y, dims(batch + left + right)), "".join(batch + left + right)
    acc, t = sum_unneeded(acc, t, set(result))
    return ctx.transpose(acc, [t.index(c) for c in result])


__all__ = ["einsum"]
