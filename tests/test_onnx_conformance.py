"""The ONNX node test cases that ship with the onnx package
(onnx.backend.test.case.node.collect_testcases), for the operators listed here, compiled and
run by tessel against the expected outputs. Inputs that decide shapes (int64 starts, ends,
split sizes) are made initializers, as an export has them: tessel compiles for static shapes.
Cases left out say why in SKIPPED."""
import copy

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import numpy_helper  # noqa: E402
from onnx.backend.test.case.node import collect_testcases  # noqa: E402

import tessel  # noqa: E402

OPERATORS = {"Slice", "Split", "ReduceMean", "ReduceSum", "ReduceSumSquare"}
SKIPPED = {  # case -> why tessel does not run it
    "test_slice_start_out_of_bounds": "an empty output (tessel's shapes are positive)",
    "test_split_zero_size_splits_opset13": "empty outputs (tessel's shapes are positive)",
    "test_split_zero_size_splits_opset18": "empty outputs (tessel's shapes are positive)",
    **{f"test_reduce_sum{kind}_empty_set{more}": "an empty input (tessel's shapes are positive)"
       for kind in ("", "_square") for more in ("", "_non_reduced_axis_zero", "_expanded")},
}
CASES = [c for c in collect_testcases()
         if {n.op_type for n in c.model.graph.node} <= OPERATORS and c.name not in SKIPPED]


def frozen(model, inputs):
    """`model` with its integer inputs made initializers; the remaining feeds by name."""
    model, feeds = copy.deepcopy(model), {}
    for info, array in zip(list(model.graph.input), inputs):
        if np.asarray(array).dtype.kind in "iub":
            model.graph.initializer.append(numpy_helper.from_array(np.asarray(array), info.name))
            model.graph.input.remove(info)
        else:
            feeds[info.name] = array
    return model, feeds


def test_every_operator_has_cases():
    assert {n.op_type for c in CASES for n in c.model.graph.node} == OPERATORS
    assert len(CASES) >= 45


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_node_case(case):
    for inputs, outputs in case.data_sets:
        model, feeds = frozen(case.model, inputs)
        compiled = tessel.compile_model(model, fallback="unscheduled")
        got = compiled(**feeds)
        assert len(got) == len(outputs)
        for g, want in zip(got, outputs):
            np.testing.assert_allclose(g, want, rtol=case.rtol, atol=case.atol)  # (its own)
