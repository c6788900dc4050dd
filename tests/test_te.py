"""Tensor expressions and their lowering to the naive loop nest."""
import pytest

from tessel import ir, te
from tessel.te import TEError


def test_lowering_makes_one_block_per_compute_with_regions(matmul_func):
    (blk,) = [b for b in ir.blocks(matmul_func.body) if b.name != "root"]
    assert [iv.kind for iv in blk.iter_vars] == ["spatial", "spatial", "reduce"]
    assert [iv.extent for iv in blk.iter_vars] == [5, 6, 7]
    assert ir.stmt_str(blk.init) == "C[vi, vj] = 0.0"
    reads = {r.buffer.name: r for r in blk.reads}
    assert set(reads) == {"A", "B"} and [w.buffer.name for w in blk.writes] == ["C"]
    loops = ir.collect(matmul_func.body, ir.For)
    assert [(l.loop_var.name, l.extent, l.kind) for l in loops] == [
        ("i", 5, "serial"), ("j", 6, "serial"), ("k", 7, "serial")]


def test_intermediate_tensors_are_allocated_in_root():
    A = te.placeholder((8,), name="A")
    B = te.compute((8,), lambda i: te.exp(A[i]), name="B")
    C = te.compute((8,), lambda i: B[i] * 2.0, name="C")
    f = te.create_func([A, C])
    assert [b.name for b in f.root.alloc_buffers] == ["B"]
    assert [b.name for b in ir.blocks(f.body)] == ["root", "B", "C"]


def test_reduce_axis_with_offset_range_and_where():
    A = te.placeholder((10,), name="A")
    k = te.reduce_axis((2, 6), name="k")
    B = te.compute((1,), lambda i: te.max(A[k + i], axis=k, where=k % 2 == 0), name="B")
    f = te.create_func([A, B])
    text = f.script()
    assert "vk = T.axis.reduce(4, k)" in text
    assert "B[vi] = T.max(B[vi], T.if_then_else(" in text
    assert 'T.float32("-inf")' in text


def test_region_of_neighbouring_reads_is_their_hull():
    A = te.placeholder((10,), name="A")
    B = te.compute((8,), lambda i: A[i] + A[i + 2], name="B")
    (blk,) = [b for b in ir.blocks(te.create_func([A, B]).body) if b.name == "B"]
    (r,) = blk.reads
    assert ir.expr_str(r.region[0].min) == "vi" and ir.as_int(r.region[0].extent) == 3


def test_integer_reduction_identities():
    assert te.identity_of("max", "int8").value == -128
    assert te.identity_of("min", "uint8").value == 255
    assert te.identity_of("sum", "int32").value == 0


def test_elementwise_min_max_and_intrinsics():
    A = te.placeholder((4,), name="A")
    B = te.compute((4,), lambda i: te.max(te.min(A[i], 1.0), te.sigmoid(A[i])), name="B")
    assert "T.max(T.min(A[vi], 1.0), T.sigmoid(A[vi]))" in te.create_func([A, B]).script()


def test_varargs_compute_names_axes():
    A = te.placeholder((2, 3, 4), name="A")
    B = te.compute(A.shape, lambda *idx: A[idx] + 1.0, name="B")
    assert "vi2 = T.axis.spatial(4, i2)" in te.create_func([A, B]).script()


@pytest.mark.parametrize("make, match", [
    (lambda: te.placeholder((3, 0)), "positive integers"),
    (lambda: te.placeholder((3,), dtype="float7"), "unknown dtype"),
    (lambda: te.reduce_axis((4, 4)), "empty"),
    (lambda: te.compute((3,), lambda i, j: 1.0), "needs a function of 1 indices"),
])
def test_bad_tensor_expressions(make, match):
    with pytest.raises((TEError, ir.IRError), match=match):
        make()


def test_reduction_must_be_whole_body():
    A = te.placeholder((4,), name="A")
    k = te.reduce_axis(4, "k")
    with pytest.raises(TEError, match="whole body"):
        te.compute((1,), lambda i: te.sum(A[k], axis=k) * 2.0)
    with pytest.raises(TEError, match="not a reduce_axis"):
        te.compute((4,), lambda i: te.sum(A[i], axis=i))


def test_create_func_checks_arguments():
    A = te.placeholder((4,), name="A")
    B = te.compute((4,), lambda i: A[i] * 2.0, name="B")
    with pytest.raises(TEError, match="placeholder A is used but not listed"):
        te.create_func([B])
    with pytest.raises(TEError, match="listed twice"):
        te.create_func([A, B, B])
    with pytest.raises(TEError, match="must be tensors"):
        te.create_func([A, "B"])
    with pytest.raises(TEError, match="no computed tensor"):
        te.create_func([A])


def test_reads_outside_a_tensor_and_divisions_by_zero_are_refused():
    """At te.compute, before any C exists: a kernel would crash or read garbage. Guards are
    taken into account: an if_then_else's condition (either branch), a reduction's where=."""
    A = te.placeholder((8,), name="A")
    with pytest.raises(te.TEError, match=r"compute B: A\[i \+ 1\] reads A outside its dimension "
                                         r"0 of 8 \(index i \+ 1 ranges over \[1, 8\]\)"):
        te.compute((8,), lambda i: A[i + 1], name="B")
    k = te.reduce_axis(8, name="k")
    with pytest.raises(te.TEError, match=r"ranges over \[0, 14\]"):
        te.compute((8,), lambda i: te.sum(A[i + k], axis=k), name="S")
    with pytest.raises(te.TEError, match=r"ranges over \[-1, 6\]"):
        te.compute((8,), lambda i: te.if_then_else(i >= 0, A[i - 1], 0.0), name="P")
    counts = te.placeholder((8,), "int32", name="N")
    with pytest.raises(te.TEError, match=r"N\[i\] // \(i - 3\) divides by zero \(i - 3 is 0 "
                                         r"at i = 3\)"):
        te.compute((8,), lambda i: counts[i] // (i - 3), name="D")
    with pytest.raises(te.TEError, match=r"divides by zero \(its divisor is 0\)"):
        te.compute((8,), lambda i: counts[i] // (i * 0), name="Z")
    # guarded or in bounds: accepted
    te.compute((8,), lambda i: te.if_then_else(i < 7, A[i + 1], 0.0), name="G1")
    te.compute((8,), lambda i: te.if_then_else(i >= 7, 0.0, A[i + 1]), name="G2")
    te.compute((8,), lambda i: te.sum(A[i + k], axis=k, where=i + k < 8), name="W")
    te.compute((8,), lambda i: A[i % 3 + 5] + A[i // 2], name="M")
    te.compute((8,), lambda i: counts[i] // (i + 1), name="Q")
    te.compute((8,), lambda i: counts[i] // (2 * i - 3), name="Odd")  # spans 0, never is
    te.compute((8,), lambda i: counts[i] // te.if_then_else(i < 3, i - 3, i - 2), name="Sel")


def test_a_kernel_that_crashes_says_where(tmp_path):
    """A hand-written program storing far outside its buffer (nothing checks tessel.ir): the
    process dies, but with faulthandler's report naming the Python line, not silently."""
    import subprocess
    import sys
    import textwrap
    script = tmp_path / "crash.py"
    script.write_text(textwrap.dedent("""\
        import numpy as np
        import tessel
        from tessel import ir
        from tessel.ir import Buffer, BufferStore, For, Var, const, realize
        A = Buffer("A", (4,))
        i = Var("i")
        body = For(i, 4, BufferStore(A, const(1.0), (i * 100000000,)))
        root = ir.Block("root", (), (), (), body)
        mod = tessel.build(ir.PrimFunc("crash", (A,), realize(root)))
        mod(np.zeros(4, np.float32))   # the line the report names
        """))
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          timeout=120, cwd=tmp_path)
    assert proc.returncode != 0
    assert "Fatal Python error: Segmentation fault" in proc.stderr
    assert 'crash.py", line 10' in proc.stderr
