"""Tensor-expression lowering of graph nodes: the stages of one operator on te tensors (each
operator's `lower` in `tessel.graph.opdefs`; this module checks and dispatches).

    x = te.placeholder((1, 3, 9, 7), name="x"); w = te.placeholder((5, 3, 3, 3), name="w")
    y = lower(conv_node, [x, w], "conv0")          # stages conv0_pad (if padded), conv0
    z = lower(div_node, [y, 8.0], "div0")           # a float arg is an immediate: y / 8.0
    func = te.create_func([x, w, z])               # one fused PrimFunc

The stages are those of `tessel.ops` (built with its te builders `nn.conv_stages`,
`nn.conv_transpose_stages` and `nn.pool_stages`, the stage structure of `ops.norm`, dense as
`ops.linalg.dense`), so the search space's designs
apply to them and a lone conv node lowers to the very workload of `ops.conv2d`. The op's last
stage is named `name`, earlier ones `{name}_<role>` (`_pad`, `_conv`, `_dense`, `_sum`, ...).
Binary operators broadcast as numpy does; a Python float (float32) or a literal `ir.const`
(its dtype: an int64 1, a bool True) stands for a tensor of shape ().
"""
from __future__ import annotations

from typing import Any

from tessel import ir, te
from tessel.graph.ir import Node, TensorType, check
from tessel.graph.opdefs import OPS, infer_type

Arg = te.Tensor | float | ir.Expr


def _type_of(arg: Any, i: int, node: Node, name: str) -> TensorType:
    """A tensor's type; a float or a literal stands for shape () and only elementwise
    operators that take scalars take one."""
    if isinstance(arg, te.Tensor):
        return TensorType(arg.shape, arg.dtype)
    literal = isinstance(arg, (ir.IntImm, ir.FloatImm))
    check(literal or (isinstance(arg, (int, float)) and not isinstance(arg, bool)),
          f"lowering {name} ({node.op}): input {i} must be a te.Tensor, a float or a literal, "
          f"got {arg!r}")
    check(OPS[node.op].scalars, f"lowering {name} ({node.op}): input {i} must be a tensor, "
                                f"got {arg!r} (only elementwise operators take scalars)")
    return TensorType((), arg.dtype if literal else "float32")


def lower(node: Node, args: list[Arg], name: str) -> te.Tensor:
    """The stages computing `node` from `args` (te tensors, or floats for scalar constants),
    the last one named `name`. Attributes are checked and defaulted as by `Graph.add_node`."""
    check(node.op in OPS, f"lowering {name}: unsupported operator {node.op!r}; "
                          f"known: {sorted(OPS)}")
    attrs = dict(node.attrs)
    types = [_type_of(a, i, node, name) for i, a in enumerate(args)]
    out_type = infer_type(node.op, types, attrs, node.name or name)
    args = [a if isinstance(a, (te.Tensor, ir.Expr)) else float(a) for a in args]
    out = OPS[node.op].lower(args, attrs, name, out_type)
    check(out.shape == out_type.shape, f"lowering {name} ({node.op}): built shape {out.shape}, "
                                       f"shape inference says {out_type.shape}")
    return out


__all__ = ["lower"]
