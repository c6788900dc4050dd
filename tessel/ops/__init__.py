"""The operator library: PrimFunc factories built on tessel.te, in PyTorch layouts.

    from tessel import ops
    func = ops.conv2d(1, 3, 224, 224, 64, 7, 7, stride=2, padding=3)
    func.attrs      # {"op": "conv2d", "args": {...}}; ops.conv2d(**func.attrs["args"]) rebuilds it
    ops.OPS["conv2d"].factory, ops.SUITE["GMM"], ops.flops(func)

Parameters are the inputs in order, then the output. Each factory is registered in `OPS`
(registry.py) with its numpy reference from `ops.reference` (torch.nn.functional semantics),
which checks generated kernels. Bad arguments raise `OpError` (a ValueError) naming the problem.
"""
from tessel.ops import reference
from tessel.ops.common import OpError
from tessel.ops.elementwise import add, bias_add, gelu, multiply, pad, relu, sigmoid, tanh
from tessel.ops.linalg import batch_matmul, dense, matmul, transpose_batch_matmul
from tessel.ops.nn import (avg_pool2d, conv1d, conv2d, conv2d_bn_relu, conv2d_transpose, conv3d,
                           depthwise_conv2d, global_avg_pool2d, max_pool2d)
from tessel.ops.norm import batch_norm, layer_norm, softmax
from tessel.ops.registry import (OPS, KernelOp, empty_outputs, flops, reference_inputs,
                                 run_reference)
from tessel.ops.suite import SUITE, SUITE_DESCRIPTIONS, SUITE_FACTORIES

__all__ = ["reference", "OpError", "OPS", "KernelOp", *OPS, "SUITE", "SUITE_FACTORIES",
           "SUITE_DESCRIPTIONS", "flops", "reference_inputs", "run_reference", "empty_outputs"]
