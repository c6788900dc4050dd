"""The tensor intrinsic's parts: TensorIntrin, the dot-product description, IntrinError."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from tessel import ir, te
from tessel.errors import TesselError


class IntrinError(TesselError, ValueError):
    """An unknown intrinsic, or one a target cannot run."""


@dataclass(frozen=True)
class TensorIntrin:
    """One tensor intrinsic: `desc` (the computation); `c_body`, the statements of the C
    function `<acc> <c_name>(<acc> acc, <input> a, <input> b, ...)` (each input named by its
    description buffer's name in lower case, its type a vector of the buffer's whole size, the
    result's type `__typeof__(acc)`); the target `arch` and `features` it needs (the function
    is compiled with them, `c_target`: GCC's target attribute, so a kernel built without them
    still compiles); `includes`; and `exact`: what it guarantees about overflow."""

    name: str
    desc: ir.PrimFunc
    arch: str
    features: frozenset[str]
    c_body: str
    c_target: str
    includes: tuple[str, ...]
    exact: str

    @property
    def c_name(self) -> str:
        return f"tessel_intrin_{self.name}"

    @property
    def block(self) -> ir.Block:
        """The description's one computing block."""
        return ir.blocks(self.desc.body.block.body)[0]

    def missing(self, target) -> list[str]:
        """The features `target` lacks for this intrinsic (its arch first), [] when none."""
        if target.arch != self.arch:
            return [f"the {self.arch} architecture (the target is {target.arch})"]
        return sorted(f for f in self.features if not target.has(f))


def dot_desc(lanes: int, group: int, a_dtype: str, b_dtype: str, name: str) -> ir.PrimFunc:
    """C[j] += int32(A[k]) * int32(B[j, k]) for j < lanes, k < group: `lanes` dot products of
    one group of `group` a-elements with `lanes` groups of b-elements, summed into int32."""
    A = te.placeholder((group,), a_dtype, name="A")
    B = te.placeholder((lanes, group), b_dtype, name="B")
    k = te.reduce_axis(group, name="k")
    C = te.compute((lanes,), lambda j: te.sum(te.cast("int32", A[k]) * te.cast("int32", B[j, k]),
                                              axis=k), name="C")
    func = te.create_func([A, B, C], name=name)
    return _without_init(func)


def _without_init(func: ir.PrimFunc) -> ir.PrimFunc:
    """`func` with its computing block's init dropped: a description accumulates."""
    def drop(node):
        if isinstance(node, ir.Block) and node.init is not None:
            return dataclasses.replace(node, init=None)
        return None
    return func.with_body(ir.transform(func.body, drop))


__all__ = ["TensorIntrin", "IntrinError", "dot_desc"]
