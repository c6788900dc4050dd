"""Graph passes, fusion, task extraction, memory planning and the model executor, on graphs
built in code (odd shapes) and checked against the numpy interpreter."""
from __future__ import annotations

import re

import numpy as np
import pytest

import tessel
from tessel import te
from tessel.graph import Graph, GraphError
from tessel.graph.compiler import compile_model, model_tasks
from tessel.graph.compiler.compile import fallback_program, protocols, split_reduction
from tessel.graph.layout import apply_layout
from tessel.graph.runtime import CompiledModel, _lifetimes
from tessel.graph.fold import fold_batch_norm, fold_constants
from tessel.graph.passes import simplify
from tessel.graph.fuse import fuse
from tessel.graph.reference import run_graph

RNG = np.random.default_rng(0)


def _const(g: Graph, name: str, *shape: int, positive: bool = False) -> str:
    low = 0.5 if positive else -0.5
    return g.add_constant(name, RNG.uniform(low, low + 1.0, shape).astype(np.float32))


def _conv_bn(g: Graph, x: str, c_in: int, c_out: int, tag: str, stride: int = 1) -> str:
    w = _const(g, f"{tag}_w", c_out, c_in, 3, 3)
    y = g.add_node("conv", [x, w], name=f"{tag}_conv", strides=(stride, stride),
                   pads=(1, 1, 1, 1))
    bn = [_const(g, f"{tag}_{p}", c_out, positive=p == "var")
          for p in ("gamma", "beta", "mean", "var")]
    return g.add_node("batch_norm", [y, *bn], name=f"{tag}_bn", epsilon=1e-5)


def residual_net(hw: int = 9, c: int = 5, classes: int = 7) -> Graph:
    """conv-bn-relu, two residual blocks of the same shape, pool, flatten, dense, softmax."""
    g = Graph("residual")
    x = g.add_input("x", (1, 3, hw, hw))
    h = g.add_node("relu", [_conv_bn(g, x, 3, c, "stem")])
    for b in range(2):
        y = g.add_node("relu", [_conv_bn(g, h, c, c, f"b{b}a")])
        y = _conv_bn(g, y, c, c, f"b{b}b")
        h = g.add_node("relu", [g.add_node("add", [y, h])])
    p = g.add_node("global_avg_pool", [h])
    f = g.add_node("reshape", [p], shape=(1, c))
    d = g.add_node("dense", [f, _const(g, "fc_w", classes, c), _const(g, "fc_b", classes)])
    g.set_outputs([g.add_node("softmax", [g.add_node("mul", [d, g.add_constant("two", 2.0)])],
                              axis=-1)])
    return g


def _feeds(g: Graph) -> list[np.ndarray]:
    return [RNG.standard_normal(g.types[v].shape).astype(np.float32) for v in g.inputs]


def test_fold_batch_norm_removes_every_bn_after_a_conv_and_keeps_the_result():
    g = residual_net()
    folded = fold_batch_norm(g)
    assert g.op_counts()["batch_norm"] == 5 and "batch_norm" not in folded.op_counts()
    assert all(len(n.inputs) == 3 for n in folded.nodes if n.op == "conv")  # bias added
    feeds = _feeds(g)
    np.testing.assert_allclose(run_graph(folded, feeds)[0], run_graph(g, feeds)[0],
                               rtol=1e-5, atol=1e-6)


def test_fold_batch_norm_keeps_a_conv_whose_output_has_other_users():
    g = Graph("shared")
    x = g.add_input("x", (1, 2, 5, 5))
    w = _const(g, "w", 3, 2, 3, 3)
    y = g.add_node("conv", [x, w], pads=(1, 1, 1, 1))
    bn = g.add_node("batch_norm", [y, *(_const(g, p, 3, positive=True)
                                        for p in ("s", "b", "m", "v"))])
    g.set_outputs([g.add_node("add", [bn, y])])
    assert fold_batch_norm(g).op_counts()["batch_norm"] == 1


def test_fold_constants_evaluates_constant_subgraphs():
    g = Graph("consts")
    x = g.add_input("x", (3, 4))
    a = g.add_node("add", [_const(g, "a", 3, 4), _const(g, "b", 3, 4)])
    t = g.add_node("transpose", [g.add_node("exp", [a])], perm=(1, 0))
    g.set_outputs([g.add_node("matmul", [x, t])])
    folded = fold_constants(g)
    assert folded.op_counts() == {"matmul": 1}
    feeds = _feeds(g)
    np.testing.assert_allclose(run_graph(folded, feeds)[0], run_graph(g, feeds)[0], rtol=1e-6)


def test_fusion_puts_conv_bias_residual_and_relu_in_one_group():
    graph = simplify(residual_net())
    groups = fuse(graph)
    ops = [[n.op for n in grp.nodes] for grp in groups]
    assert ops[0] == ["conv", "relu"]
    assert ["conv", "add", "relu"] in ops  # the block's second conv takes the residual
    assert ["reshape"] in ops and groups[ops.index(["reshape"])].is_view
    assert ops[-1] == ["softmax"] and ["dense", "mul"] in ops
    # every group runs after the groups that produce its inputs
    made = set(graph.inputs)
    for grp in groups:
        assert all(v in made or v in graph.constants for v in grp.external_inputs())
        made.add(grp.output)


def test_an_lstm_cell_update_reading_three_gates_is_one_kernel():
    """c' = sigmoid(f) * c + sigmoid(i) * tanh(g), the gates slices of one product: the
    slices and activations feeding the update fuse with it (one kernel, not four), and
    h' = sigmoid(o) * tanh(c') is a second; both match the interpreter."""
    g = Graph("cell")
    x, c = g.add_input("x", (1, 5)), g.add_input("c", (1, 11))
    gates = g.add_node("dense", [x, _const(g, "w", 44, 5)])

    def gate(k: int, act: str) -> str:
        return g.add_node(act, [g.add_node("slice", [gates], starts=(0, 11 * k),
                                           ends=(1, 11 * k + 11), steps=(1, 1))])
    i, o, f, cand = gate(0, "sigmoid"), gate(1, "sigmoid"), gate(2, "sigmoid"), gate(3, "tanh")
    c2 = g.add_node("add", [g.add_node("mul", [f, c]), g.add_node("mul", [i, cand])])
    h2 = g.add_node("mul", [o, g.add_node("tanh", [c2])])
    g.set_outputs([h2, c2])
    groups = [grp for grp in fuse(g) if not grp.is_view]
    assert len(groups) == 3  # the product, c', h'
    assert sorted(n.op for n in groups[1].nodes) == sorted(
        ["slice", "sigmoid", "mul", "slice", "sigmoid", "slice", "tanh", "mul", "add"])
    feeds = _feeds(g)
    for got, want in zip(compile_model(g)(*feeds), run_graph(g, feeds)):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def attention(seq: int = 7, heads: int = 3, dim: int = 5) -> Graph:
    """One attention head block on activations q, k, v (1, seq, heads * dim): split heads,
    scores, softmax, weighted sum, merge heads, an output ReLU (odd sizes throughout)."""
    g = Graph("attention")
    q, k, v = (g.add_input(n, (1, seq, heads * dim)) for n in "qkv")

    def split(x, perm):
        return g.add_node("transpose", [g.add_node("reshape", [x], shape=(1, seq, heads, dim))],
                          perm=perm)
    scores = g.add_node("matmul", [split(q, (0, 2, 1, 3)), split(k, (0, 2, 3, 1))])
    scaled = g.add_node("div", [scores, g.add_constant("scale", float(np.sqrt(dim)))])
    probs = g.add_node("softmax", [scaled], axis=-1)
    mixed = g.add_node("matmul", [probs, split(v, (0, 2, 1, 3))])
    merged = g.add_node("reshape", [g.add_node("transpose", [mixed], perm=(0, 2, 1, 3))],
                        shape=(1, seq, heads * dim))
    g.set_outputs([g.add_node("relu", [merged])])
    return g


def test_attention_transposes_fold_into_their_matmuls():
    graph = attention()
    ops = [[n.op for n in grp.nodes] for grp in fuse(graph) if not grp.is_view]
    # the head splits are prologues of the two products, the head merge an epilogue of the
    # second: no transpose is a kernel of its own; the ReLU after the merge's reshape is
    assert ops == [["transpose", "transpose", "matmul", "div"], ["softmax"],
                   ["transpose", "matmul", "transpose"], ["relu"]]
    for fallback in ("prior", "unscheduled"):
        model = compile_model(graph, fallback=fallback)
        feeds = _feeds(graph)
        np.testing.assert_allclose(model(*feeds)[0], run_graph(graph, feeds)[0], rtol=1e-5,
                                   atol=1e-6)
    assert {s.how for s in model.statuses} == {"unscheduled"}


def test_a_transpose_with_other_readers_or_of_a_weight_stays_a_kernel():
    g = Graph("shared")
    x = g.add_input("x", (1, 4, 6))
    t = g.add_node("transpose", [x], perm=(0, 2, 1))
    prod = g.add_node("matmul", [x, t])  # t is also read below: it cannot fold away
    g.set_outputs([g.add_node("add", [g.add_node("relu", [t]), g.add_node("relu", [t])]), prod])
    ops = [[n.op for n in grp.nodes] for grp in fuse(g)]
    assert ["transpose"] in ops and ["matmul"] in ops
    # a dense layer's weight is a constant: its layout is packing's business, not fusion's
    d = Graph("dense")
    y = d.add_input("y", (2, 6))
    w = d.add_node("transpose", [d.add_input("w", (6, 5))], perm=(1, 0))
    d.set_outputs([d.add_node("dense", [y, w])])
    assert [[n.op for n in grp.nodes] for grp in fuse(d)] == [["transpose"], ["dense"]]


def test_identical_blocks_share_one_weighted_task():
    graph = simplify(residual_net())
    kernels, tasks = model_tasks(graph, tessel.Target("host"))
    assert len(kernels) == 8  # stem, 2 x (conv-relu, conv-add-relu), pool, dense, softmax
    weights = sorted(int(t.weight) for t in tasks)
    assert weights == [1, 1, 1, 1, 2, 2] and len({t.key for t in tasks}) == len(tasks)
    # the scalar constant 2.0 is an immediate, not a parameter of the dense kernel
    dense = next(k for k in kernels if k.func.name == "fused_dense_mul")
    assert len(dense.func.params) == 4  # data, weight, bias, out


def test_memory_plan_reuses_blocks_and_never_aliases_a_kernel_output_with_its_inputs():
    graph = simplify(residual_net(hw=11, c=3))
    model = compile_model(graph)
    arrays = model._arrays
    intermediates = [k.params[-1] for k in model.kernels]
    bases = {arrays[v].__array_interface__["data"][0] for v in intermediates}
    assert len(bases) < len(intermediates)  # blocks are shared
    for k in model.kernels:
        out = arrays[k.params[-1]]
        # (a weight kept only packed has no array of its own any more)
        assert not any(np.shares_memory(out, arrays[v]) for v in k.params[:-1] if v in arrays)
    root, end = _lifetimes(graph, fuse(graph))
    assert end[root[graph.outputs[0]]] == float("inf")


@pytest.mark.parametrize("hw,c,fallback", [(9, 5, "prior"), (7, 3, "unscheduled")])
def test_compiled_model_matches_the_numpy_interpreter(hw, c, fallback):
    graph = residual_net(hw, c)
    model = compile_model(graph, fallback=fallback)
    for seed in range(2):  # a second call reuses the planned buffers
        feeds = [np.random.default_rng(seed).standard_normal((1, 3, hw, hw)).astype("float32")]
        (out,) = model(*feeds)
        np.testing.assert_allclose(out, run_graph(graph, feeds)[0], rtol=1e-4, atol=1e-5)
        assert out.shape == (1, 7) and np.allclose(out.sum(), 1.0, atol=1e-5)
    # the pool and the softmax tile nothing: their prior runs each row's stages together
    hows = {s.how for s in model.statuses}
    assert hows == {fallback}
    convs = [s for s in model.statuses if "conv" in s.task.label]
    assert all(s.how == fallback for s in convs) and "0 tuned" in model.report()
    alone, inside = model.profile(repeat=1), model.profile(repeat=3, in_sequence=True)
    names = [f.name for f in model.kernel_funcs]
    assert [n for n, _ in alone] == [n for n, _ in inside] == names
    assert all(t > 0 for _, t in alone + inside)


def test_compiled_model_checks_its_inputs():
    model = compile_model(residual_net())
    good = np.zeros((1, 3, 9, 9), np.float32)
    with pytest.raises(GraphError, match="shape"):
        model(np.zeros((1, 3, 8, 9), np.float32))
    with pytest.raises(GraphError, match="dtype"):
        model(good.astype(np.float64))
    with pytest.raises(GraphError, match="takes inputs"):
        model(good, good)
    with pytest.raises(GraphError, match="takes inputs"):
        model(y=good)
    assert model(x=good)[0].shape == (1, 7)


def test_compile_model_rejects_what_it_cannot_compile(tmp_path):
    with pytest.raises(GraphError, match="cannot compile a list"):
        compile_model([1, 2])
    with pytest.raises(GraphError, match="does not exist"):
        compile_model(residual_net(), database=tmp_path / "missing.db")
    with pytest.raises(GraphError, match="fallback must be one of"):
        compile_model(residual_net(), fallback="fast")


def test_tuned_records_are_used_by_the_executor(tmp_path):
    g = Graph("mlp")
    x = g.add_input("x", (3, 13))
    h = g.add_node("relu", [g.add_node("dense", [x, _const(g, "w", 11, 13), _const(g, "b", 11)])])
    g.set_outputs([h])
    db = tmp_path / "m.db"
    results = tessel.tune_model(g, trials=4, database=db, strategy="random",
                                cost_model="random", batch_size=4, progress=False)
    assert len(results) == 1 and results[0].best_trace is not None
    model = compile_model(g, database=db)
    assert model.statuses[0].tuned and "1 tuned" in model.report()
    feeds = _feeds(g)
    np.testing.assert_allclose(model(*feeds)[0], run_graph(g, feeds)[0], rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("spelling", ["div", "mul"])
def test_spelled_out_gelu_becomes_one_node_and_fuses_into_its_dense(spelling):
    g = Graph("ffn")
    x = g.add_input("x", (3, 5))
    h = g.add_node("dense", [x, _const(g, "w", 7, 5), _const(g, "b", 7)])
    c = g.add_constant("c", np.float32(np.sqrt(2.0) if spelling == "div" else np.sqrt(0.5)))
    e = g.add_node("erf", [g.add_node(spelling, [h, c])])
    a = g.add_node("add", [g.add_constant("one", np.float32(1.0)), e])
    y = g.add_node("mul", [g.add_node("mul", [h, a]), g.add_constant("half", np.float32(0.5))])
    g.set_outputs([y])
    simple = simplify(g)
    assert simple.op_counts() == {"dense": 1, "gelu": 1}
    assert [grp.name for grp in fuse(simple)] == ["fused_dense_gelu"]
    feeds = _feeds(g)
    np.testing.assert_allclose(compile_model(g)(*feeds)[0], run_graph(g, feeds)[0],
                               rtol=1e-5, atol=1e-6)


def _two_denses() -> Graph:
    """x @ w1.T (constant weight) then @ y.T with y a model input: only w1 may be prepacked."""
    g = Graph("two_denses")
    x, y = g.add_input("x", (5, 24)), g.add_input("y", (19, 16))
    h = g.add_node("relu", [g.add_node("dense", [x, _const(g, "w1", 16, 24)])])
    g.set_outputs([g.add_node("dense", [h, y])])
    return g


def test_constant_weights_are_packed_once_at_compile_time():
    """The expert prior packs the dense's weight in panels; with prepack the executor runs
    that stage once, on the constant, and the kernel reads the packed copy; a weight that is
    a model input is still packed on every call. Same results either way, over two calls."""
    from tessel.prepack import split_prepacks
    g = _two_denses()
    packed, unpacked = compile_model(g), compile_model(g, prepack=False)
    assert packed.prepacked == 1 and unpacked.prepacked == 0
    assert "1 constant weights packed at compile time" in packed.report()
    for seed in range(2):
        rng = np.random.default_rng(seed)
        feeds = [rng.standard_normal(g.types[v].shape).astype(np.float32) for v in g.inputs]
        want = run_graph(g, feeds)[0]
        np.testing.assert_allclose(packed(*feeds)[0], want, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(unpacked(*feeds)[0], want, rtol=1e-5, atol=1e-5)
    first = packed.kernels[0].func
    host = tessel.Target("host")
    func, how = fallback_program(first, tessel.space.make_space("auto", host),
                          tessel.space.default_postprocs(host, pack_panels=False))
    assert how == "prior"
    main, packs = split_prepacks(func, {1})
    assert len(packs) == 1 and packs[0].source == 1 and main.params[-1] is packs[0].packed
    assert len(main.params) == len(func.params) + 1
    dropped, _ = split_prepacks(func, {1}, drop_unread=True)  # the executor's: w1 read packed
    assert func.params[1] not in dropped.params and len(dropped.params) == len(func.params)
    assert split_prepacks(func, {0}) == (func, [])  # the data is not constant: nothing moves


# ---- measuring what runs: a model's weights packed outside the timed calls ---------------------
def test_model_kernels_name_their_constant_parameters_and_that_is_their_identity():
    """A kernel of a model says which of its parameters are the model's weights; that is part
    of the workload's key (its records were measured with those packed once), so the same
    kernel shape with a weight that is a model input is another workload, and the attribute
    survives the database's JSON."""
    from tessel.ir import from_json, structural_hash, to_json
    g = _two_denses()
    first, second = (k.func for k in model_tasks(g, tessel.Target("host"))[0])
    assert first.constant_params == (1,) and second.constant_params == ()
    plain = tessel.ir.PrimFunc(first.name, first.params, first.body, {})
    assert structural_hash(plain) != structural_hash(first)
    assert structural_hash(from_json(to_json(first))) == structural_hash(first)
    assert structural_hash(from_json(to_json(second))) == structural_hash(second)


@pytest.mark.parametrize("reduce", ["max", "min", "sum"])
def test_a_reduction_to_one_value_runs_in_parallel_vectors_untuned(reduce):
    """A dynamic quantization's min and max of a whole activation: rfactor into cores x
    lanes partial results (parallel, vectorized), then combined; equal to numpy."""
    host = tessel.Target("host")
    parts = host.cores * host.vector_bits // 32
    X = te.placeholder((3, 5, 3 * parts), "float32", name="X")
    r1, r2, r3 = (te.reduce_axis(n, name=f"r{k}") for k, n in enumerate(X.shape))
    Y = te.compute((1,), lambda i: getattr(te, reduce)(X[r1, r2, r3], axis=[r1, r2, r3]),
                   name="Y")
    func = te.create_func([X, Y], name=f"reduce_{reduce}")
    got, how = fallback_program(func, tessel.space.make_space("auto", host),
                                tessel.space.postprocs_for(func, host), host)
    assert how == "prior"
    kinds = {loop.kind for loop in tessel.ir.collect(got.body, tessel.ir.For)}
    assert {"parallel", "vectorized"} <= kinds
    x = np.random.default_rng(4).standard_normal(X.shape).astype(np.float32)
    y = np.zeros(1, np.float32)
    tessel.build(got, host)(x, y)
    np.testing.assert_allclose(y[0], getattr(np, reduce)(x), rtol=1e-5)
    Z = te.placeholder((37,), "float32", name="Z")
    r = te.reduce_axis(37, name="r")
    odd = te.create_func([Z, te.compute((1,), lambda i: te.max(Z[r], axis=r), name="Y")],
                         name="odd")
    assert split_reduction(odd, host) is None  # 37 does not split into cores x lanes


def _dense_prior(g: Graph):
    """The first kernel of `g` (a dense with a constant weight) on its expert prior, with its
    pack stage at the root, and that kernel's workload."""
    host = tessel.Target("host")
    workload = model_tasks(g, host)[0][0].func
    func, how = fallback_program(workload, tessel.space.make_space("auto", host),
                          tessel.space.postprocs_for(workload, host))
    assert how == "prior"
    return workload, func


def test_the_tuner_measures_a_model_kernel_with_its_weight_packed_once():
    """The build of a kernel whose workload has a constant weight packs it in tessel_time once,
    before the timed calls, and in tessel_entry before the kernel: the runner checks the
    result against the unscheduled workload and times the kernel alone."""
    from tessel.measure import LocalBuilder, LocalRunner, MeasureCandidate
    workload, func = _dense_prior(_two_denses())
    candidate = MeasureCandidate(workload, func)
    host = tessel.Target("host")
    with LocalBuilder(host) as builder, LocalRunner(host, repeat=2) as runner:
        (build,) = builder.build([candidate])
        (result,) = runner.run([candidate], [build])
    assert result.ok, result.error_msg
    source = build.artifact.source
    warm = source[source.index("int32_t tessel_time("):source.index("int32_t tessel_time_in_")]
    in_model = source[source.index("int32_t tessel_time_in_model("):]
    for timing in (warm, in_model):
        loop = timing[timing.index("for (int32_t r = 0"):]
        assert timing.count("tessel_prepack(") == 1 and "tessel_prepack(" not in loop
        assert "tessel_main(" in loop
    # in the model's cache state: the packed weight out of the caches, the activation in
    assert "tessel_evict(packed[0]" in in_model and "tessel_produce(args[0]" in in_model
    entry = source[source.index("int32_t tessel_entry("):source.index("int32_t tessel_time(")]
    assert re.search(r"tessel_prepack\(.*\n(.*\n)*.*tessel_main\(", entry)
    plain = MeasureCandidate(tessel.ir.PrimFunc(workload.name, workload.params, workload.body),
                             tessel.ir.PrimFunc(func.name, func.params, func.body))
    with LocalBuilder(host) as builder:
        (build,) = builder.build([plain])
    assert "tessel_prepack" not in build.artifact.source  # no constants: packed every call


@pytest.mark.parametrize("older", [1, 2])
def test_records_measured_by_older_protocols_are_still_used(tmp_path, older):
    """A database tuned when the dense's workload was measured warm (its key without MEASURE)
    or, before that, without constant parameters as well still gives the executor its tuned
    kernel."""

    from tessel.ir import CONSTANT_PARAMS, MEASURE
    g = _two_denses()
    workload = model_tasks(g, tessel.Target("host"))[0][0].func
    seen = list(protocols(workload))
    assert [sorted(set(w.attrs) & {MEASURE, CONSTANT_PARAMS}) for w in seen] == [
        [CONSTANT_PARAMS, MEASURE], [CONSTANT_PARAMS], []]
    assert workload.measure == "in_model" and seen[1].measure == "warm"
    assert len({tessel.ir.structural_hash(w) for w in seen}) == 3
    db = tessel.Database(tmp_path / "old.db")
    tessel.tune(seen[older], trials=4, database=db, strategy="random",
                cost_model="random", progress=False)
    model = compile_model(g, database=db)
    assert model.statuses[0].tuned
    feeds = _feeds(g)
    np.testing.assert_allclose(model(*feeds)[0], run_graph(g, feeds)[0], rtol=1e-4, atol=1e-5)
    db.close()


def test_a_weight_read_only_packed_is_stored_only_packed():
    """Once the executor has packed w1 for the kernel that reads it in panels, the model no
    longer holds w1 as it came (the kernel's params do not take it); a kernel that reads its
    weight as it is (unscheduled, or prepack off) keeps it. Results are the same."""
    g = _two_denses()
    packed = compile_model(g)
    kept = [compile_model(g, prepack=False), compile_model(g, fallback="unscheduled")]
    assert "w1" not in packed.graph.constants and "w1" not in packed._arrays
    assert "w1" in g.constants  # the caller's graph is left as it was
    for model in kept:
        assert "w1" in model.graph.constants and "w1" in model._arrays
    feeds = _feeds(g)
    want = run_graph(g, feeds)[0]
    for model in [packed, *kept]:
        np.testing.assert_allclose(model(*feeds)[0], want, rtol=1e-5, atol=1e-5)


def test_a_copy_falls_back_to_the_spaces_parallel_design():
    """A concat has no expert prior (no register tile): without records it runs the auto
    space's first design, parallel and vectorized, not the serial unscheduled copy."""
    g = Graph("concat")
    a, b = g.add_input("a", (1, 3, 91, 16)), g.add_input("b", (1, 2, 91, 16))  # > SERIAL_WORK
    g.set_outputs([g.add_node("concat", [g.add_node("relu", [a]), b], axis=1)])
    model = compile_model(g)
    assert [s.how for s in model.statuses] == ["prior"]
    kernel = model.kernels[0]
    source = fallback_program(kernel.func, tessel.space.make_space("auto", tessel.Target("host")),
                       tessel.space.default_postprocs(tessel.Target("host")))[0].script()
    assert "T.parallel" in source and "T.vectorized" in source
    feeds = _feeds(g)
    np.testing.assert_allclose(model(*feeds)[0], run_graph(g, feeds)[0])


def fire(c_in: int = 6, squeeze: int = 3, e1: int = 5, e3: int = 16, hw: int = 9,
         out: int = 4) -> Graph:
    """SqueezeNet's fire module: a 1x1 squeeze, 1x1 and 3x3 expands side by side, their
    concatenation along channels, and a 1x1 conv after it."""
    g = Graph("fire")
    x = g.add_input("x", (1, c_in, hw, hw))
    s = g.add_node("relu", [g.add_node("conv", [x, _const(g, "sq", squeeze, c_in, 1, 1)])])
    a = g.add_node("relu", [g.add_node("conv", [s, _const(g, "e1", e1, squeeze, 1, 1)])])
    b = g.add_node("relu", [g.add_node("conv", [s, _const(g, "e3", e3, squeeze, 3, 3)],
                                       pads=(1, 1, 1, 1))])
    cat = g.add_node("concat", [a, b], axis=1)
    g.set_outputs([g.add_node("conv", [cat, _const(g, "out", out, e1 + e3, 1, 1)])])
    return g


@pytest.mark.parametrize("layout,e1,e3,in_place", [("plain", 5, 16, True),
                                                   ("blocked", 16, 32, True),
                                                   ("blocked", 5, 16, None)])
def test_a_concat_of_kernel_results_is_written_in_place(layout, e1, e3, in_place):
    """The expands write their channels straight into the concat's output: no concat kernel
    runs, the two results are slices of one block, and the outputs are the interpreter's
    (ragged channel counts too: 5 + 16, whatever the layout pass makes of them)."""
    graph = fire(e1=e1, e3=e3, out=32)
    model = compile_model(graph, layout=layout)
    if in_place:
        names = [k.func.name for k in model.kernels]
        assert not any("concat" in n for n in names), names
        cat = next(n for n in model.graph.nodes if n.op == "concat")
        whole = model._arrays[cat.output]
        for v in cat.inputs:
            assert np.shares_memory(model._arrays[v], whole)
    for seed in range(2):
        feeds = [np.random.default_rng(seed).standard_normal((1, 6, 9, 9)).astype("float32")]
        np.testing.assert_allclose(model(*feeds)[0], run_graph(graph, feeds)[0], rtol=1e-4,
                                   atol=1e-5)


def test_a_concat_whose_input_is_read_elsewhere_still_runs():
    g = Graph("shared")
    x = g.add_input("x", (1, 4, 6))
    a = g.add_node("relu", [x])
    cat = g.add_node("concat", [a, g.add_node("exp", [x])], axis=1)
    g.set_outputs([cat, g.add_node("neg", [a])])  # a is read twice: the concat copies it
    groups = fuse(g)
    assert not any(grp.in_place for grp in groups)
    model = compile_model(g)
    feeds = _feeds(g)
    for got, want in zip(model(*feeds), run_graph(g, feeds)):
        np.testing.assert_allclose(got, want, rtol=1e-6)


def test_select_in_sequence_stores_a_choice_among_the_best_that_compile_model_runs(tmp_path):
    from tessel.graph.compiler.select import select_in_sequence
    graph = fire(e1=16, e3=16, out=16)
    db = tmp_path / "f.db"
    tessel.tune_model(graph, trials=24, database=db, strategy="random", cost_model="random",
                      batch_size=6, progress=False, select=0)
    with pytest.raises(GraphError, match="candidates must be an int >= 1"):
        select_in_sequence(graph, database=db, candidates=0)
    with pytest.raises(GraphError, match="does not exist"):
        select_in_sequence(graph, database=tmp_path / "none.db")
    chosen = select_in_sequence(graph, database=db, candidates=3, rounds=3, margin=0.0)
    target = tessel.Target("host")
    store = tessel.Database(db)
    _, tasks = model_tasks(graph, target)
    tuned = [t for t in tasks if store.top_k(t.workload, target)]
    assert len(tuned) >= 3 and set(chosen.ranks) == {t.label for t in tuned}
    for task in tuned:
        pick = store.selection(task.workload, target)
        top = [r.trace_json for r in store.top_k(task.workload, target, k=3)]
        assert pick is not None and pick.trace_json in top
        assert top.index(pick.trace_json) == chosen.ranks[task.label] or len(top) < 3
    assert 0 < chosen.after <= chosen.before and "tasks changed" in chosen.line()
    model = compile_model(graph, database=db)
    assert sum(s.tuned for s in model.statuses) == len(tuned)
    feeds = _feeds(graph)
    np.testing.assert_allclose(model(*feeds)[0], run_graph(graph, feeds)[0], rtol=1e-4,
                               atol=1e-5)
    # choosing again measures the records themselves, not the choice made before
    again = select_in_sequence(graph, database=db, candidates=2, rounds=2, margin=0.0)
    for task in tuned:
        top = [r.trace_json for r in store.top_k(task.workload, target, k=2)]
        assert store.selection(task.workload, target).trace_json == \
            top[min(again.ranks[task.label], len(top) - 1)]


def test_a_selection_with_a_deadline_times_what_fits_before_it(tmp_path, monkeypatch):
    """select_graph under tune_model's time budget: with the deadline passed before a second
    rank compiles it chooses nothing and stores nothing; with time for one more rank it
    compiles two variants and stops its rounds at MIN_ROUNDS once the clock passes."""
    from tessel.graph.compiler import select
    graph = fire(e1=16, e3=16, out=16)
    db = tmp_path / "f.db"
    tessel.tune_model(graph, trials=24, database=db, strategy="random", cost_model="random",
                      batch_size=6, progress=False, select=0)
    target = tessel.Target("host")
    store = tessel.Database(db)
    blocked = apply_layout(graph, "winograd", target)
    none = select.select_graph(blocked, target, store, candidates=4, rounds=30,
                               deadline=select.clock() - 1.0)
    assert none.ranks == {} and none.changed == 0 and "skipped: no time left" in none.line()
    _, tasks = model_tasks(graph, target)
    picks = [store.selection(t.workload, target) for t in tasks]
    assert not any(p is not None and p.run == "in-sequence" for p in picks)

    now = [0.0]
    built, timed = [], []
    variant, time_kernels = select._variant, CompiledModel.time_kernels

    def counting_variant(*args):
        now[0] += 10.0  # each compile takes 10 s of the clock
        built.append(args[4])
        return variant(*args)

    def counting_timer(self, out=None):
        now[0] += 1.0  # and each model's kernels in a round 1 s
        timed.append(self)
        return time_kernels(self, out)

    monkeypatch.setattr(select, "clock", lambda: now[0])
    monkeypatch.setattr(select, "_variant", counting_variant)
    monkeypatch.setattr(CompiledModel, "time_kernels", counting_timer)
    chosen = select.select_graph(blocked, target, store, candidates=4, rounds=30, margin=0.0,
                                 deadline=25.0)  # rank 0 ends at 10 s, rank 1 at 20 s
    assert built == [0, 1] and len(timed) == 2 * select.MIN_ROUNDS
    tuned = [t for t in tasks if store.top_k(t.workload, target)]
    assert set(chosen.ranks) == {t.label for t in tuned}
    assert set(chosen.ranks.values()) <= {0, 1}
    assert all(store.selection(t.workload, target).run == "in-sequence" for t in tuned)


def test_tune_model_by_the_clock_keeps_a_share_for_the_selection(tmp_path, monkeypatch):
    """tune_model(time_budget=T): the tasks get what is left of T less SELECT_SHARE of it,
    the selection a deadline T after the call began."""
    from tessel.graph.compiler import tune
    seen = {}

    def fake_tune(tasks, trials, database=None, time_budget=None, **options):
        seen["tuning"] = time_budget
        return []

    def fake_select(graph, target, db, *, candidates, layout, deadline):
        seen["deadline"] = deadline
        return select_module.Selection({}, {}, 0.0, 0.0)

    from tessel.graph.compiler import select as select_module
    ticks = iter([100.0, 102.0])  # the call's start; the tasks made 2 s later
    monkeypatch.setattr(tune, "clock", lambda: next(ticks))
    monkeypatch.setattr(tune, "tune_tasks", fake_tune)
    monkeypatch.setattr(tune, "select_graph", fake_select)
    monkeypatch.setattr(tune.Database, "open", staticmethod(lambda *a, **k: None))
    tessel.tune_model(fire(e1=16, e3=16, out=16), database=tmp_path / "t.db",
                      time_budget=600.0)
    assert seen == {"tuning": pytest.approx(600.0 - 2.0 - tune.SELECT_SHARE * 600.0),
                    "deadline": 700.0}


def test_every_array_a_kernel_reads_or_writes_starts_on_a_cache_line():
    """Intermediates, inputs, weights as they came and packed weights: a 64-byte vector load
    from numpy's 16-byte-aligned memory would straddle two cache lines. The measuring worker
    hands kernels such arrays too."""
    from tessel.codegen.module import aligned, aligned_empty
    from tessel.measure.worker import Worker
    for g in (residual_net(), _two_denses()):
        model = compile_model(g)
        arrays = [a for call in model.calls for a in call.arrays]
        assert len(arrays) > 4 and all(a.ctypes.data % 64 == 0 for a in arrays)
        feeds = _feeds(g)
        np.testing.assert_allclose(model(*feeds)[0], run_graph(g, feeds)[0], rtol=1e-4,
                                   atol=1e-4)
    a = aligned_empty((3, 5), "float32")
    assert a.shape == (3, 5) and a.dtype == np.float32 and a.ctypes.data % 64 == 0
    assert aligned(a) is a
    b = np.arange(7, dtype=np.float32)[1:]  # 4 bytes past an aligned start
    c = aligned(b)
    assert c.ctypes.data % 64 == 0 and c is not b and np.array_equal(c, b)
    params = [("x", [3, 5], "float32", False), ("out", [4], "float32", True)]
    args, outputs = Worker().arguments(params, seed=0)
    assert all(ptr % 64 == 0 for ptr in args) and outputs[0].shape == (4,)


def test_products_over_badly_tiled_extents_run_padded_and_cropped():
    """A dense over 19 rows (a prime: a register tile one row high) and an attention-like
    batched matmul 19 x 23 compute over 24 rows and 32 columns, the extra ones reading the
    last, and crop inside the kernel (nn.product); on their expert priors and unscheduled
    they match the interpreter. On the priors the crop (with the bias and GELU) reads each
    register tile's local buffer under the tile's loop: no padded output is stored."""
    g = Graph("padded")
    x = g.add_input("x", (1, 19, 12))
    h = g.add_node("dense", [x, _const(g, "w", 23, 12), _const(g, "b", 23)], name="fc")
    h = g.add_node("gelu", [h], name="act")
    k = g.add_node("transpose", [h], name="kt", perm=(0, 2, 1))
    s = g.add_node("matmul", [h, k], name="scores")
    g.set_outputs([g.add_node("softmax", [s], name="probs", axis=-1)])
    feeds = [np.random.default_rng(1).standard_normal((1, 19, 12)).astype("float32")]
    want = run_graph(g, feeds)[0]
    for fallback in ("prior", "unscheduled"):
        model = compile_model(g, fallback=fallback)
        np.testing.assert_allclose(model(*feeds)[0], want, rtol=1e-4, atol=1e-6)
        padded = [b.name for f in model.kernel_funcs for b in tessel.ir.blocks(f.body)
                  if b.name.endswith("_padded")]
        assert len(padded) == 2, padded
        if fallback == "prior":
            for call in model.calls:
                arrays = re.findall(r"float (\w+)\[\d+\]", call.module.source)
                assert not [a for a in arrays if a.endswith("_padded")], arrays


def test_softmax_over_a_causal_mask_matches_and_floors_its_exponent():
    """Masked scores (finfo.min, -1e4, a row masked whole) give the interpreter's softmax;
    the exponent is floored where the C library's vector exp would take its slow path, and a
    masked score's probability is exactly 0, not a subnormal number (slow on Intel cores)."""
    from tessel.ops.norm import EXP_FLOOR
    g = Graph("causal")
    x = g.add_input("x", (2, 19, 19))
    g.set_outputs([g.add_node("softmax", [x]), g.add_node("log_softmax", [x])])
    scores = RNG.standard_normal((2, 19, 19)).astype(np.float32) * 4
    scores[0][np.triu(np.ones((19, 19), bool), 1)] = np.finfo(np.float32).min
    scores[1][np.triu(np.ones((19, 19), bool), 1)] = -1e4
    scores[1, 3] = np.finfo(np.float32).min  # every score of a row masked
    model = compile_model(g)
    got = model(scores)
    for got_one, want in zip(got, run_graph(g, [scores])):
        np.testing.assert_allclose(got_one, want, rtol=1e-5, atol=1e-6)
    masked = np.triu(np.ones((19, 19), bool), 1)
    masked[3] = False  # the row masked whole: every score equal, each 1/19
    assert (got[0][0][masked] == 0).all() and (got[0][1][masked] == 0).all()
    tiny = np.finfo(np.float32).tiny
    assert not ((got[0] > 0) & (got[0] < tiny)).any()
    assert np.exp(np.float32(EXP_FLOOR)) / 3e7 >= tiny
    for call in model.calls:  # softmax's exp stage, log_softmax's sum
        assert f"{EXP_FLOOR:.0e}f" in call.module.source


@pytest.mark.parametrize("shape", [(1, 4, 50, 11), (1, 12, 40, 37)])
@pytest.mark.parametrize("op", ["softmax", "layer_norm"])
def test_a_row_wise_operator_of_rank_four_runs_its_rows_in_parallel(op, shape):
    """The row prior computes a softmax's (a layer norm's) stages inside the loop over rows,
    the one above the last axis, so all rows are one parallel loop: inside the outermost
    loop (extent 1) the whole (1, 4, 50, 11) ran on one thread; inside the 12 heads, a
    head's intermediates went through memory (12 x 512 x 512: 3.35 ms against 1.13)."""
    g = Graph(op)
    x = g.add_input("x", shape)
    extra = [_const(g, "w", shape[-1]), _const(g, "b", shape[-1])] if op == "layer_norm" else []
    g.set_outputs([g.add_node(op, [x, *extra])])
    model = compile_model(g)
    assert [s.how for s in model.statuses] == ["prior"]
    rows = shape[1] * shape[2]
    assert re.search(r"#pragma omp parallel for[^\n]*\n\s*for \(int32_t \w+ = 0; \w+ < %d;"
                     % rows, model.calls[0].module.source)
    feeds = _feeds(g)
    np.testing.assert_allclose(model(*feeds)[0], run_graph(g, feeds)[0], rtol=1e-5, atol=1e-6)
