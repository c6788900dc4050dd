"""The tensor intrinsic's parts: TensorIntrin, the dot-product description, IntrinError."""
from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass

from tessel import ir, te
from tessel.errors import TesselError


BF16_EXACT = ("float32: each product of two bfloat16 exact, the sums rounded to nearest even "
              "in the order the instruction fixes; subnormal inputs and results are 0")


class IntrinError(TesselError, ValueError):
    """An unknown intrinsic, or one a target cannot run."""


@dataclass(frozen=True)
class TensorIntrin:
    """One tensor intrinsic: `desc` (the computation); `c_body`, the statements of the C
    function `<acc> <c_name>(<acc> acc, <input> a, <input> b, ...)` (each input named by its
    description buffer's name in lower case, its type a vector of the buffer's whole size, the
    result's type `__typeof__(acc)`); the target `arch` and `features` it needs (the function
    is compiled with them, `c_target`: GCC's target attribute, so a kernel built without them
    still compiles); `includes`; and `exact`: what it guarantees about overflow.

    A *memory* intrinsic (`memory=True`: AMX's tiles, which are no C values) is a statement
    instead: `void <c_name>(<type>* c, const <type>* a, ..., int64_t ld<x>..., int64_t n_<v>...)`
    takes each description buffer's first element (pointers, in parameter order), then the
    element stride of each dimension named in `free_strides` ((buffer name, dimension): a row
    stride the program chooses, e.g. a matrix's leading dimension; `ld` + the buffer's name in
    lower case, + the dimension when it is not 0), then for each iteration variable named in
    `free_extents` the number of times its description extent fits the program's loop (`n_` +
    the variable's name: a reduction the instruction sequence loops over), then for each
    iteration variable named in `partial_extents` the program's extent of its loop, from 1 up
    to the description's (`e_` + the name: the rows of a tile the call configures), then
    `int zero`: nonzero when the accumulator starts at zero (the block's init; C's contents
    unread). A free extent of description extent 1 (a convolution's taps, which a matmul does
    not have) and a partial extent may have no loop in the program: its count or extent is
    then 1 and the strides of the dimensions it indexes 0."""

    name: str
    desc: ir.PrimFunc
    arch: str
    features: frozenset[str]
    c_body: str
    c_target: str
    includes: tuple[str, ...]
    exact: str
    memory: bool = False
    free_strides: tuple[tuple[str, int], ...] = ()
    free_extents: tuple[str, ...] = ()
    partial_extents: tuple[str, ...] = ()
    prelude: str = ""  # C before the function (file-level helpers a memory intrinsic calls)

    @property
    def c_name(self) -> str:
        return f"tessel_intrin_{self.name}"

    @property
    def block(self) -> ir.Block:
        """The description's one computing block."""
        return ir.blocks(self.desc.body.block.body)[0]

    @functools.cached_property
    def free_vars(self) -> dict[ir.Var, str]:
        """The description block's iteration variables bound to a loop named in
        `free_extents`, with that name."""
        return self._named(self.free_extents)

    @functools.cached_property
    def partial_vars(self) -> dict[ir.Var, str]:
        """As free_vars, for `partial_extents`."""
        return self._named(self.partial_extents)

    @functools.cached_property
    def optional_vars(self) -> frozenset[ir.Var]:
        """The iteration variables that may have no loop in the program: the partial ones
        and the free ones of extent 1."""
        ones = {iv.var for iv in self.block.iter_vars if iv.extent == 1}
        return frozenset(self.partial_vars) | (frozenset(self.free_vars) & ones)

    def _named(self, names: tuple[str, ...]) -> dict[ir.Var, str]:
        realize = next(r for r in ir.collect_stmts(self.desc.body, ir.BlockRealize)
                       if r.block.name == self.block.name)
        return {iv.var: value.name for iv, value in zip(realize.block.iter_vars,
                                                         realize.iter_values)
                if isinstance(value, ir.Var) and value.name in names}

    def missing(self, target) -> list[str]:
        """The features `target` lacks for this intrinsic (its arch first), [] when none."""
        if target.arch != self.arch:
            return [f"the {self.arch} architecture (the target is {target.arch})"]
        return sorted(f for f in self.features if not target.has(f))

    def stride_names(self) -> list[str]:
        """The C names of the free strides, in `free_strides` order."""
        return [f"ld{b.lower()}" + (str(d) if d else "") for b, d in self.free_strides]

    def c_signature(self, c_types: dict[str, str]) -> str:
        """A memory intrinsic's C parameter list (`c_types` maps dtypes to C types)."""
        acc = self.block.body.buffer
        ptrs = [f"{'' if p is acc else 'const '}{c_types[p.dtype]}* {p.name.lower()}"
                for p in self.desc.params]
        ints = [f"int64_t {n}" for n in self.stride_names()] + \
            [f"int64_t n_{v}" for v in self.free_extents] + \
            [f"int64_t e_{v}" for v in self.partial_extents] + ["int zero"]
        return ", ".join(ptrs + ints)


def dot_desc(lanes: int, group: int, a_dtype: str, b_dtype: str, name: str,
             acc: str = "int32") -> ir.PrimFunc:
    """C[j] += acc(A[k]) * acc(B[j, k]) for j < lanes, k < group: `lanes` dot products of one
    group of `group` a-elements with `lanes` groups of b-elements, summed into `acc` (int32
    for 8-bit operands, float32 for bfloat16)."""
    A = te.placeholder((group,), a_dtype, name="A")
    B = te.placeholder((lanes, group), b_dtype, name="B")
    k = te.reduce_axis(group, name="k")
    C = te.compute((lanes,), lambda j: te.sum(te.cast(acc, A[k]) * te.cast(acc, B[j, k]),
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


__all__ = ["TensorIntrin", "IntrinError", "dot_desc", "BF16_EXACT"]
