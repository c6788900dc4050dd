"""PrimFunc JSON round trips."""
import pytest
from conftest import make_matmul

from tessel import ir, te


def _softmax_like():
    A = te.placeholder((3, 5), name="A")
    k = te.reduce_axis(5, "k")
    M = te.compute((3,), lambda i: te.max(A[i, k], axis=k), name="M")
    E = te.compute((3, 5), lambda i, j: te.exp(A[i, j] - M[i]), name="E")
    P = te.compute((3, 5), lambda i, j: te.if_then_else(j > 0, E[i, j], -E[i, j]), name="P")
    return te.create_func([A, P], attrs={"op": "demo", "args": {"n": 3}})


@pytest.mark.parametrize("make", [make_matmul, _softmax_like])
def test_round_trip_keeps_structure_names_and_attrs(make):
    f = make()
    g = ir.from_json(ir.to_json(f))
    assert ir.structural_equal(f, g)
    assert g.script() == f.script()
    assert g.attrs == f.attrs
    assert ir.to_json(g) == ir.to_json(f)


def test_loaded_variables_keep_identity():
    g = ir.from_json(ir.to_json(make_matmul()))
    (blk,) = [b for b in ir.blocks(g.body) if b.name == "C"]
    store_vars = ir.free_vars(blk.body)
    assert {iv.var for iv in blk.iter_vars} == store_vars


@pytest.mark.parametrize("text, match", [
    ("{", "not a serialized program"),
    ('{"format": "other"}', "expected format"),
])
def test_bad_input_is_rejected(text, match):
    with pytest.raises(ir.IRError, match=match):
        ir.from_json(text)


def test_unknown_node_kind_is_rejected():
    text = ir.to_json(make_matmul()).replace('"t":"BinOp"', '"t":"Frobnicate"')
    with pytest.raises(ir.IRError, match="unknown node kind 'Frobnicate'"):
        ir.from_json(text)
