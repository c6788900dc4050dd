"""The ONNX node test cases that ship with the onnx package
(onnx.backend.test.case.node.collect_testcases): every case whose operators tessel translates
(onnx_import.CONVERTERS) and whose tensors have tessel's dtypes (float32, the integers, bool)
is compiled and run against its expected outputs. Inputs that decide shapes (Slice's starts,
Reshape's shape, a reduction's axes: SHAPE_INPUTS) are made initializers, as an export has
them: tessel compiles for static shapes. A case tessel does not pass is listed in FAILING with
the reason, and runs as an expected failure (strict: one that starts passing must leave the
list); the share that passes only grows (FLOOR)."""
import copy

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import helper, numpy_helper  # noqa: E402
from onnx.backend.test.case.node import collect_testcases  # noqa: E402

import tessel  # noqa: E402
from tessel.graph.frontend.onnx_fold import FOLD  # noqa: E402
from tessel.graph.frontend.onnx_import import CONVERTERS, from_onnx  # noqa: E402
from tessel.graph.opdefs.base import DTYPES  # noqa: E402

_REDUCTIONS = ("ReduceMean ReduceSum ReduceSumSquare ReduceMax ReduceMin ReduceProd ReduceL1 "
               "ReduceL2 ReduceLogSum ReduceLogSumExp").split()
SHAPE_INPUTS = {  # op type -> the inputs that decide shapes (constants in an export)
    "Slice": {1, 2, 3, 4}, "Split": {1}, "Reshape": {1}, "Expand": {1}, "Tile": {1},
    "Pad": {1, 2, 3}, "Squeeze": {1}, "Unsqueeze": {1}, "Resize": {1, 2, 3}, "Upsample": {1},
    "TopK": {1}, "Range": {0, 1, 2}, "OneHot": {1}, "ConstantOfShape": {0}, "CumSum": {1},
    "Trilu": {1}, "Dropout": {1, 2}, "LSTM": {4}, "GRU": {4}, "RNN": {4},
    **{op: {1} for op in _REDUCTIONS},
}
_EMPTY = "an empty tensor (tessel's shapes are positive)"
FAILING = {  # case -> why tessel does not pass it
    **dict.fromkeys([
        "test_slice_start_out_of_bounds", "test_split_zero_size_splits_opset13",
        "test_split_zero_size_splits_opset18", "test_reduce_sum_empty_set",
        "test_reduce_sum_empty_set_non_reduced_axis_zero", "test_reduce_sum_square_empty_set",
        "test_tril_zero", "test_triu_zero",
        "test_reduce_sum_square_empty_set_expanded",
    ], _EMPTY),
    **dict.fromkeys([
        "test_training_dropout", "test_training_dropout_default",
        "test_training_dropout_default_mask", "test_training_dropout_mask",
    ], "random dropout in training mode (tessel compiles inference)"),
    **dict.fromkeys([
        "test_reduce_l1_empty_set", "test_reduce_l1_empty_set_expanded",
        "test_reduce_l2_empty_set", "test_reduce_l2_empty_set_expanded",
        "test_reduce_log_sum_empty_set", "test_reduce_log_sum_empty_set_expanded",
        "test_reduce_log_sum_exp_empty_set", "test_reduce_log_sum_exp_empty_set_expanded",
        "test_reduce_max_empty_set", "test_reduce_max_empty_set_bool",
        "test_reduce_min_empty_set", "test_reduce_prod_empty_set",
    ], _EMPTY),
    **dict.fromkeys([
        "test_reshape_allowzero_reordered",
    ], "a dynamic dimension ('?') in the model's input"),
    **dict.fromkeys([
        "test_dequantizelinear_blocked", "test_quantizelinear_blocked_asymmetric",
        "test_quantizelinear_blocked_symmetric",
    ], "blocked quantization (opset 21's block_size): per-tensor and per-axis only"),
}


def _dtype(value_info) -> str:
    t = value_info.type
    if not t.HasField("tensor_type"):
        return "not a tensor"
    try:
        return helper.tensor_dtype_to_np_dtype(t.tensor_type.elem_type).name
    except (KeyError, TypeError, ValueError):
        return "unknown"


def in_scope(case) -> bool:
    """Whether tessel translates every operator of the case and has every dtype it uses."""
    graph = case.model.graph
    return ({n.op_type for n in graph.node} <= set(CONVERTERS)
            and all(_dtype(v) in DTYPES for v in [*graph.input, *graph.output]))


CASES = [c for c in collect_testcases() if in_scope(c)]


def frozen(model, inputs):
    """`model` with the inputs that decide shapes made initializers; the feeds by name."""
    model, feeds = copy.deepcopy(model), {}
    shape_inputs = {name for node in model.graph.node
                    for k, name in enumerate(node.input) if k in SHAPE_INPUTS.get(node.op_type, ())}
    for info, array in zip(list(model.graph.input), inputs):
        if info.name in shape_inputs:
            model.graph.initializer.append(numpy_helper.from_array(np.asarray(array), info.name))
            model.graph.input.remove(info)
        else:
            feeds[info.name] = np.asarray(array)
    return model, feeds


def run_case(case) -> None:
    """Compile the case's model and compare every data set with its expected outputs."""
    for inputs, outputs in case.data_sets:
        model, feeds = frozen(case.model, inputs)
        compiled = tessel.compile_model(model, fallback="unscheduled")
        got = compiled(**feeds)
        assert len(got) == len(outputs)
        for g, want in zip(got, outputs):
            want = np.asarray(want)
            assert g.dtype == want.dtype and g.shape == want.shape
            if want.dtype.kind == "f":
                np.testing.assert_allclose(g, want, rtol=case.rtol, atol=case.atol)  # its own
            else:
                np.testing.assert_array_equal(g, want)


def folds(case) -> bool:
    """A case of one operator the importer evaluates on constants (FOLD), of tessel's dtypes
    and without empty tensors."""
    graph = case.model.graph
    return (len(graph.node) == 1 and graph.node[0].op_type in FOLD
            and all(_dtype(v) in DTYPES for v in [*graph.input, *graph.output])
            and all(np.asarray(a).size for inputs, _ in case.data_sets for a in inputs))


FOLD_CASES = [c for c in collect_testcases() if folds(c)]
FOLD_FAILING = {name: FAILING[name] for name in ("test_dequantizelinear_blocked",)}


@pytest.mark.parametrize("case", [
    pytest.param(c, marks=pytest.mark.xfail(reason=FOLD_FAILING[c.name], strict=True))
    if c.name in FOLD_FAILING else c for c in FOLD_CASES], ids=[c.name for c in FOLD_CASES])
def test_fold_case(case):
    """The importer's constant folding (the shape arithmetic, masks and index tables exports
    compute in the graph) on the case with every input made a constant."""
    for inputs, outputs in case.data_sets:
        model = copy.deepcopy(case.model)
        for info, array in zip(list(model.graph.input), inputs):
            model.graph.initializer.append(numpy_helper.from_array(np.asarray(array), info.name))
            model.graph.input.remove(info)
        graph = from_onnx(model)
        assert len(graph.outputs) == len(outputs)
        for name, want in zip(graph.outputs, outputs):
            got, want = graph.constants[name], np.asarray(want)
            assert got.dtype == want.dtype and got.shape == want.shape
            if want.dtype.kind == "f":
                np.testing.assert_allclose(got, want, rtol=case.rtol, atol=case.atol)
            else:
                np.testing.assert_array_equal(got, want)


def test_the_cases_cover_the_translated_operators():
    ran = {n.op_type for c in CASES for n in c.model.graph.node}
    assert {"Gather", "Where", "Equal", "Cast", "Slice", "Conv", "MatMul", "Softmax"} <= ran
    assert set(FAILING) <= {c.name for c in collect_testcases()}
    passing = [c for c in CASES if c.name not in FAILING]
    # issue 40 asks for 95%; and a ratchet on the count: 645 of 669 on 2026-11-27, 682 of 711
    # on 2026-11-28 with CumSum, Trilu and Einsum (two Trilu cases of empty tensors fail)
    assert len(passing) >= max(682, 0.95 * len(CASES)), (len(passing), len(CASES))


@pytest.mark.parametrize("case", [
    pytest.param(c, marks=pytest.mark.xfail(reason=FAILING[c.name], strict=True))
    if c.name in FAILING else c for c in CASES], ids=[c.name for c in CASES])
def test_node_case(case):
    run_case(case)
