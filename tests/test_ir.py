"""The loop-nest IR: expression building, node checks, traversal, printing."""
import math

import pytest

from tessel import ir
from tessel.ir import Buffer, IRError, Var


def test_python_operators_build_expressions():
    i, j = Var("i"), Var("j")
    e = i * 4 + j // 2 - (j % 3)
    assert isinstance(e, ir.BinOp) and e.op == "-"
    assert e.dtype == "int32"
    assert ir.expr_str(e) == "i * 4 + j // 2 - j % 3"
    assert (i < j).dtype == "bool"
    assert ir.expr_str(-i) == "0 - i"


def test_constants_fold_and_trivial_identities_vanish():
    i = Var("i")
    assert ir.as_int(ir.const(3) * 4 + 2) == 14
    assert (i + 0) is i and (i * 1) is i and (0 + i) is i
    assert ir.as_int(i * 0) == 0
    assert ir.as_int(ir.const(-7) // 2) == -4 and ir.as_int(ir.const(-7) % 2) == 1
    assert ir.logical_and(True, i < 3).op == "<"


def test_a_split_loop_with_a_constant_inner_part_folds_modulo_and_division():
    """y = yo * 4 + 2 (a loop split by 4, its inner copy unrolled): y % 4 is 2 and y // 4 is
    yo, with floor semantics for any sign of yo; nothing folds when 4 does not divide the
    stride."""
    yo = Var("yo")
    y = yo * 4 + 2
    assert ir.as_int(y % 4) == 2 and ir.expr_str(y // 4) == "yo"
    assert ir.as_int((yo * 8) % 4) == 0 and ir.expr_str((yo * 8 + 5) // 4) == "yo * 2 + 1"
    assert ir.as_int((4 * yo + 7) % 2) == 1
    down = yo * 4 + (-1)  # yo * 4 - 1: floor division gives yo - 1, the remainder 3
    assert ir.as_int(down % 4) == 3 and ir.expr_str(down // 4) == "yo + -1"
    for v in (-3, 0, 5):  # the folded forms agree with Python's floor semantics
        assert (v * 4 - 1) % 4 == 3 and (v * 4 - 1) // 4 == v - 1
    assert ir.expr_str((yo * 3 + 2) % 4) == "(yo * 3 + 2) % 4"
    assert ir.expr_str((yo * 4 + 2) % 3) == "(yo * 4 + 2) % 3"


def test_transform_keeps_a_shared_subexpression_shared():
    """A load that several terms share is rebuilt once: the result is still a DAG."""
    i = Var("i")
    A = Buffer("A", (64,))
    load = A[i]
    e = (load * 2.0 + load) * load
    out = ir.substitute(e, {i: i + 1})
    loads = ir.collect(out, ir.BufferLoad)
    assert len(loads) == 3 and len({id(x) for x in loads}) == 1
    assert ir.expr_str(loads[0]) == "A[i + 1]"


def test_float_expressions_and_intrinsics():
    A = Buffer("A", (4,))
    x = A[Var("i")]
    e = ir.call("exp", x * 2.0) + 1
    assert e.dtype == "float32"
    assert ir.expr_str(e) == "T.exp(A[i] * 2.0) + 1.0"
    assert ir.cast("float64", x).dtype == "float64"
    assert ir.cast("float32", ir.const(3)).value == 3.0
    assert math.isclose(ir.expr.eval_intrinsic("sigmoid", 0.0), 0.5)
    assert ir.expr_str(ir.const(float("-inf"))) == 'T.float32("-inf")'


def test_mixing_dtypes_is_an_error():
    A = Buffer("A", (4,))
    with pytest.raises(IRError, match="operand dtypes differ"):
        A[0] + Var("i")
    with pytest.raises(IRError, match="float constant"):
        Var("i") + 1.5
    with pytest.raises(IRError, match="unknown intrinsic"):
        ir.call("cosh", A[0])
    with pytest.raises(IRError, match="takes 2"):
        ir.call("pow", A[0])


def test_expressions_have_no_truth_value():
    with pytest.raises(IRError, match="no truth value"):
        bool(Var("i") < 3)


def test_buffer_checks():
    with pytest.raises(IRError, match="positive ints"):
        Buffer("A", (0, 3))
    with pytest.raises(IRError, match="unknown dtype"):
        Buffer("A", (3,), "float8")
    with pytest.raises(IRError, match="unknown scope"):
        Buffer("A", (3,), scope="texture")
    with pytest.raises(IRError, match="2 dims, indexed with 1"):
        Buffer("A", (3, 3))[0]
    assert Buffer("A", (2, 3, 4)).strides == (12, 4, 1)


def test_statement_checks():
    A = Buffer("A", (4,))
    i = Var("i")
    store = ir.BufferStore(A, ir.const(1.0), (i,))
    with pytest.raises(IRError, match="extent must be a positive int"):
        ir.For(i, 0, store)
    with pytest.raises(IRError, match="unknown kind"):
        ir.For(i, 4, store, kind="wavy")
    with pytest.raises(IRError, match="thread tag"):
        ir.For(i, 4, store, kind="thread_binding")
    with pytest.raises(IRError, match="float64 value"):
        ir.BufferStore(A, ir.const(1.0, "float64"), (i,))
    blk = ir.Block("b", (ir.IterVar(Var("v"), 4),), (), (), store)
    with pytest.raises(IRError, match="0 bindings for 1 iter vars"):
        ir.realize(blk, ())


def test_seq_flattens():
    A = Buffer("A", (4,))
    s1 = ir.BufferStore(A, ir.const(1.0), (ir.const(0),))
    s2 = ir.BufferStore(A, ir.const(2.0), (ir.const(1),))
    assert ir.seq(s1) is s1
    assert ir.seq(ir.seq(s1, s2), s1).seq == (s1, s2, s1)


def test_substitute_and_transform_share_unchanged_subtrees():
    i, j = Var("i"), Var("j")
    A = Buffer("A", (8, 8))
    e = A[i, j] + A[j, i]
    out = ir.substitute(e, {i: j * 2})
    assert ir.expr_str(out) == "A[j * 2, j] + A[j, j * 2]"
    assert ir.substitute(e, {Var("k"): i}) is e
    B = Buffer("B", (8, 8))
    assert ir.expr_str(ir.replace_buffers(e, {A: B})) == "B[i, j] + B[j, i]"
    assert ir.free_vars(e) == {i, j}


def test_printer_disambiguates_equal_names(matmul_func):
    text = matmul_func.script()
    assert "def matmul(A: T.Buffer((5, 7), \"float32\")" in text
    assert "vk = T.axis.reduce(7, k)" in text
    assert "with T.init():" in text
    assert "C[vi, vj] = C[vi, vj] + A[vi, vk] * B[vk, vj]" in text
    i1, i2 = Var("i"), Var("i")
    A = Buffer("A", (4, 4))
    body = ir.For(i1, 4, ir.For(i2, 4, ir.BufferStore(A, ir.const(0.0), (i1, i2))))
    assert "A[i, i_1] = 0.0" in ir.stmt_str(body)


def test_func_inputs_and_outputs(matmul_func):
    assert [b.name for b in matmul_func.inputs] == ["A", "B"]
    assert [b.name for b in matmul_func.outputs] == ["C"]
    assert [b.name for b in ir.blocks(matmul_func.body)] == ["root", "C"]
