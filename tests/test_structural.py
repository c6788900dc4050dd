"""Structural equality and hashing ignore names, see everything else."""
from conftest import make_matmul

from tessel import ir, te


def test_renamed_copies_hash_equal():
    a = make_matmul()
    b = make_matmul(names=("X", "Y", "Z", "r"))
    assert a.structural_hash() == b.structural_hash()
    assert ir.structural_equal(a, b)
    assert a.script() != b.script()


def test_different_shapes_or_dtypes_differ():
    base = make_matmul(5, 6, 7).structural_hash()
    assert make_matmul(5, 6, 8).structural_hash() != base
    assert make_matmul(6, 5, 7).structural_hash() != base
    A = te.placeholder((5, 7), "float64", name="A")
    B = te.placeholder((7, 6), "float64", name="B")
    k = te.reduce_axis(7, "k")
    C = te.compute((5, 6), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    assert te.create_func([A, B, C]).structural_hash() != base


def test_hash_sees_computation_and_variable_binding():
    def elementwise(fn):
        A = te.placeholder((4, 4), name="A")
        return te.create_func([A, te.compute((4, 4), fn(A), name="B")])
    plain = elementwise(lambda A: lambda i, j: A[i, j] * 2.0)
    transposed = elementwise(lambda A: lambda i, j: A[j, i] * 2.0)
    added = elementwise(lambda A: lambda i, j: A[i, j] + 2.0)
    hashes = {f.structural_hash() for f in (plain, transposed, added)}
    assert len(hashes) == 3
    assert plain.structural_hash() == elementwise(lambda A: lambda i, j: A[i, j] * 2.0).structural_hash()


def test_hash_is_stable_text():
    h = make_matmul().structural_hash()
    assert len(h) == 64 and int(h, 16) >= 0
    assert h == make_matmul().structural_hash()


def test_loop_kind_changes_the_hash():
    f = make_matmul()
    outer = f.root.body
    par = ir.For(outer.loop_var, outer.extent, outer.body, kind="parallel")
    g = f.with_body(ir.realize(ir.Block("root", (), (), (), par)))
    assert not ir.structural_equal(f, g)
