"""The canonical operators of the graph IR: each is one `OpDef` in `tessel.graph.opdefs`
(shape inference, te lowering, numpy reference, fusion kind, layout rule, examples), grouped
by family. This module is the IR's view of them: `OPS` and `infer`.

| op | inputs | attributes |
|---|---|---|
| conv | x, w (O, C/groups, *k)[, b (O,)] | strides, pads, dilations, groups |
| conv_transpose | x, w (C, O/groups, *k)[, b] | strides, pads, output_padding, dilations, groups |
| dense | x (..., K), w (N, K)[, b (N,)] | (torch linear) |
| matmul | a (..., M, K), b (..., K, N) | (numpy matmul, batch dims broadcast; ranks >= 2) |
| add sub mul div pow maximum minimum | a, b | |
| unary math (relu, sigmoid, tanh, gelu, ...: opdefs/elementwise.py) | x | gelu: approximate ("none", "tanh"); clip: min, max (None: unbounded); leaky_relu: alpha |
| activations and rounding (elu, selu, softplus, mish, round, ...: opdefs/activation.py) | x | elu, celu: alpha; selu: alpha, gamma; softplus: beta, threshold (None: none); thresholded_relu: alpha; hard_sigmoid: alpha, beta |
| prelu | x, slope (broadcasts onto x) | |
| batch_norm | x, scale, bias, mean, var (each (C,)) | epsilon (channels on axis 1) |
| max_pool, avg_pool | x | kernel, strides, pads, ceil_mode (avg: count_include_pad) |
| global_avg_pool | x | (keeps the spatial axes as 1) |
| reduce_mean, reduce_sum, reduce_sum_square, reduce_max, reduce_min, reduce_prod, reduce_l1, reduce_l2, reduce_log_sum, reduce_log_sum_exp | x | axes, keepdims |
| cumsum | x | axis, exclusive, reverse (ONNX CumSum; integers wrap) |
| softmax, log_softmax | x | axis |
| layer_norm | x, scale[, bias] | axis (normalizes axes axis..end), epsilon |
| reshape | x | shape (static, no -1 or 0) |
| transpose | x | perm |
| slice | x | starts, ends, steps (one per axis: the range(start, end, step) of indices taken) |
| concat | x0, x1, ... | axis |
| equal less less_equal greater greater_equal | a, b (one dtype) -> bool | |
| logical_and logical_or logical_xor, logical_not | bool a, b; bool x | |
| where | cond (bool), a, b | (numpy broadcasting) |
| cast | x | to (a dtype of `opdefs.base.DTYPES`) |
| expand | x | shape (numpy's broadcast_to) |
| gather | data, indices (int32/int64) | axis (ONNX Gather; indices clamped, never out of bounds) |
| gather_elements | data, indices (same rank) | axis (ONNX GatherElements, torch.gather) |
| floor_div trunc_div, mod | a, b | mod: fmod (0: Python's remainder, 1: C's) |
| isnan, isinf | x -> bool | isinf: detect_positive, detect_negative |

Layouts are PyTorch's (NC[D]HW data, OI[D]HW conv weights); float32 unless said: add, sub, mul,
div, maximum, minimum, neg, abs and the layout operators also take the integer dtypes, and the
operators of opdefs/logic.py integers and bools (their dtype rules: `opdefs.base`). `pads` list
the padding before each spatial axis, then after each (ONNX order). Binary elementwise
operators broadcast as numpy does.
"""
from __future__ import annotations

from tessel.graph.opdefs import OPS, REQUIRED, OpDef, broadcast_shape
from tessel.graph.opdefs import infer_type as infer

__all__ = ["OPS", "OpDef", "REQUIRED", "infer", "broadcast_shape"]
