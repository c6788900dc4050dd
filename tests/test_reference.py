"""tessel.ops.reference against torch.nn.functional, plus argument validation.

torch runs in float64 on the same float32 inputs, so the tolerances bound the reference's own
error (it accumulates in float64, so even large reductions pass at 1e-4); every reference result
must come back as float32.
"""

import numpy as np
import pytest

from tessel.ops import reference as ref

torch = pytest.importorskip("torch")
F = torch.nn.functional


def _rand(*shape, seed=0, scale=1.0):
    return (np.random.default_rng(seed).standard_normal(shape) * scale).astype(np.float32)


def _t(a):
    return torch.from_numpy(np.asarray(a, dtype=np.float64))


def _close(ours, theirs, rtol=1e-4, atol=1e-4):
    assert ours.dtype == np.float32
    expected = theirs.numpy()
    assert ours.shape == expected.shape
    np.testing.assert_allclose(ours, expected, rtol=rtol, atol=atol)


# ---- linear algebra ------------------------------------------------------------------------


@pytest.mark.parametrize("m,k,n", [(1, 1, 1), (7, 13, 5), (31, 257, 3), (128, 128, 128)])
def test_matmul(m, k, n):
    a, b = _rand(m, k), _rand(k, n, seed=1)
    _close(ref.matmul(a, b), _t(a) @ _t(b))


@pytest.mark.parametrize("bsz,m,k,n", [(1, 1, 1, 1), (3, 7, 13, 5), (4, 33, 17, 9)])
def test_batch_matmul(bsz, m, k, n):
    a, b = _rand(bsz, m, k), _rand(bsz, k, n, seed=1)
    _close(ref.batch_matmul(a, b), torch.bmm(_t(a), _t(b)))


@pytest.mark.parametrize("x_shape", [(5, 13), (2, 3, 13)])
@pytest.mark.parametrize("with_bias", [False, True])
def test_dense(x_shape, with_bias):
    x, w, b = _rand(*x_shape), _rand(7, 13, seed=1), _rand(7, seed=2)
    bias = b if with_bias else None
    _close(ref.dense(x, w, bias), F.linear(_t(x), _t(w), None if bias is None else _t(b)))


@pytest.mark.parametrize("q_shape,seq_k",
                         [((1, 5, 3, 7), 5), ((2, 11, 4, 8), 6), ((1, 128, 12, 64), 128)])
def test_transpose_batch_matmul(q_shape, seq_k):
    q = _rand(*q_shape)
    k = _rand(q_shape[0], seq_k, *q_shape[2:], seed=1)
    expected = _t(q).permute(0, 2, 1, 3) @ _t(k).permute(0, 2, 3, 1)
    _close(ref.transpose_batch_matmul(q, k), expected)


# ---- convolutions --------------------------------------------------------------------------

CONV1D = [  # x, w, stride, padding, dilation, groups
    ((1, 64, 256), (128, 64, 3), 2, 1, 1, 1),
    ((2, 6, 17), (9, 2, 4), 3, 2, 2, 3),
    ((1, 1, 1), (1, 1, 1), 1, 0, 1, 1),
    ((1, 5, 23), (7, 5, 5), 1, 0, 4, 1),
]
CONV2D = [
    ((1, 5, 13, 11), (7, 5, 3, 3), 2, 1, 2, 1),
    ((2, 6, 9, 10), (4, 3, 3, 2), 1, (1, 0), 1, 2),
    ((1, 3, 17, 19), (5, 3, 2, 5), (2, 3), (1, 2), (2, 1), 1),
    ((1, 7, 12, 12), (7, 1, 3, 3), 1, 1, 1, 7),
    ((1, 8, 5, 7), (3, 8, 1, 1), 1, 0, 1, 1),
    ((1, 64, 56, 56), (128, 16, 3, 3), 2, 1, 1, 4),
    ((1, 3, 224, 224), (64, 3, 7, 7), 2, 3, 1, 1),
]
CONV3D = [
    ((1, 3, 7, 9, 8), (4, 3, 3, 2, 3), (1, 2, 2), (1, 0, 1), (1, 1, 2), 1),
    ((2, 4, 5, 6, 7), (6, 2, 2, 3, 3), 2, 1, 1, 2),
    ((1, 3, 8, 23, 23), (8, 3, 7, 7, 7), 2, 3, 1, 1),
]


@pytest.mark.parametrize("x_shape,w_shape,stride,padding,dilation,groups", CONV1D)
def test_conv1d(x_shape, w_shape, stride, padding, dilation, groups):
    x, w = _rand(*x_shape), _rand(*w_shape, seed=1)
    expected = F.conv1d(_t(x), _t(w), None, stride, padding, dilation, groups)
    _close(ref.conv1d(x, w, stride, padding, dilation, groups), expected)


@pytest.mark.parametrize("x_shape,w_shape,stride,padding,dilation,groups", CONV2D)
def test_conv2d(x_shape, w_shape, stride, padding, dilation, groups):
    x, w = _rand(*x_shape), _rand(*w_shape, seed=1)
    expected = F.conv2d(_t(x), _t(w), None, stride, padding, dilation, groups)
    _close(ref.conv2d(x, w, stride, padding, dilation, groups), expected)


@pytest.mark.parametrize("x_shape,w_shape,stride,padding,dilation,groups", CONV3D)
def test_conv3d(x_shape, w_shape, stride, padding, dilation, groups):
    x, w = _rand(*x_shape), _rand(*w_shape, seed=1)
    expected = F.conv3d(_t(x), _t(w), None, stride, padding, dilation, groups)
    _close(ref.conv3d(x, w, stride, padding, dilation, groups), expected)


@pytest.mark.parametrize("x_shape,kernel,stride,padding,dilation", [
    ((1, 32, 112, 112), (3, 3), 1, 1, 1),
    ((2, 5, 11, 13), (3, 5), 2, (1, 2), (2, 1)),
])
def test_depthwise_conv2d(x_shape, kernel, stride, padding, dilation):
    x, w = _rand(*x_shape), _rand(x_shape[1], 1, *kernel, seed=1)
    expected = F.conv2d(_t(x), _t(w), None, stride, padding, dilation, groups=x_shape[1])
    _close(ref.depthwise_conv2d(x, w, stride, padding, dilation), expected)


CONV2D_TRANSPOSE = [  # x, w (IOHW), stride, padding, output_padding, dilation, groups
    ((1, 512, 4, 4), (512, 256, 4, 4), 2, 1, 0, 1, 1),
    ((2, 6, 5, 7), (6, 2, 3, 4), (2, 3), (1, 0), (1, 2), 1, 3),
    ((1, 4, 5, 5), (4, 3, 3, 3), 1, 0, 1, 2, 1),
    ((1, 3, 6, 5), (3, 5, 3, 3), 3, 0, 2, 1, 1),
    ((1, 3, 7, 4), (3, 2, 2, 5), (3, 1), (2, 1), 0, (1, 2), 1),
]


@pytest.mark.parametrize("x_shape,w_shape,stride,padding,output_padding,dilation,groups",
                         CONV2D_TRANSPOSE)
def test_conv2d_transpose(x_shape, w_shape, stride, padding, output_padding, dilation, groups):
    x, w = _rand(*x_shape), _rand(*w_shape, seed=1)
    expected = F.conv_transpose2d(_t(x), _t(w), None, stride, padding, output_padding, groups,
                                  dilation)
    ours = ref.conv2d_transpose(x, w, stride, padding, output_padding, dilation, groups)
    _close(ours, expected)


def test_conv2d_bn_relu():
    x, w = _rand(1, 3, 31, 29), _rand(8, 3, 7, 7, seed=1)
    gamma, beta, mean = _rand(8, seed=2), _rand(8, seed=3), _rand(8, seed=4)
    var = np.abs(_rand(8, seed=5)) + 0.1
    conv = F.conv2d(_t(x), _t(w), None, 2, 3)
    expected = F.relu(F.batch_norm(conv, _t(mean), _t(var), _t(gamma), _t(beta), False, 0.0, 1e-3))
    _close(ref.conv2d_bn_relu(x, w, gamma, beta, mean, var, 2, 3, eps=1e-3), expected)


# ---- normalization and softmax -------------------------------------------------------------


@pytest.mark.parametrize("shape", [(256, 256), (3, 7, 13), (1,)])
@pytest.mark.parametrize("affine", [False, True])
def test_layer_norm(shape, affine):
    x = _rand(*shape, scale=3.0) + 5.0
    gamma, beta = (_rand(shape[-1], seed=1), _rand(shape[-1], seed=2)) if affine else (None, None)
    expected = F.layer_norm(_t(x), shape[-1:], None if gamma is None else _t(gamma),
                            None if beta is None else _t(beta), 1e-5)
    _close(ref.layer_norm(x, gamma, beta), expected)


@pytest.mark.parametrize("shape,axis",
                         [((256, 256), -1), ((3, 7, 5), 0), ((3, 7, 5), 1), ((1, 1), -1)])
def test_softmax(shape, axis):
    x = _rand(*shape, scale=30.0)  # large logits: needs the max shift
    _close(ref.softmax(x, axis), F.softmax(_t(x), dim=axis))


@pytest.mark.parametrize("shape", [(2, 5, 7, 3), (3, 4)])
def test_batch_norm(shape):
    c = shape[1]
    x, gamma, beta, mean = _rand(*shape), _rand(c, seed=1), _rand(c, seed=2), _rand(c, seed=3)
    var = np.abs(_rand(c, seed=4)) + 0.1
    expected = F.batch_norm(_t(x), _t(mean), _t(var), _t(gamma), _t(beta), False, 0.0, 1e-5)
    _close(ref.batch_norm(x, gamma, beta, mean, var), expected)


# ---- pooling -------------------------------------------------------------------------------

POOLS = [  # x, kernel, stride, padding
    ((1, 3, 13, 11), 3, 2, 1),
    ((2, 4, 9, 10), (2, 3), None, (1, 1)),
    ((1, 2, 7, 8), (3, 2), (1, 2), (1, 1)),
    ((1, 1, 5, 5), 5, 1, 2),
    ((1, 64, 112, 112), 3, 2, 1),
]


@pytest.mark.parametrize("x_shape,kernel,stride,padding", POOLS)
def test_max_pool2d(x_shape, kernel, stride, padding):
    x = _rand(*x_shape) - 10.0  # all negative: zero padding would win, -inf must not
    _close(ref.max_pool2d(x, kernel, stride, padding), F.max_pool2d(_t(x), kernel, stride, padding),
           rtol=0, atol=0)


@pytest.mark.parametrize("x_shape,kernel,stride,padding", POOLS)
@pytest.mark.parametrize("count_include_pad", [True, False])
def test_avg_pool2d(x_shape, kernel, stride, padding, count_include_pad):
    x = _rand(*x_shape)
    expected = F.avg_pool2d(_t(x), kernel, stride, padding, count_include_pad=count_include_pad)
    _close(ref.avg_pool2d(x, kernel, stride, padding, count_include_pad), expected)


@pytest.mark.parametrize("shape", [(2, 5, 7, 3), (1, 512, 7, 7), (1, 1, 1, 1)])
def test_global_avg_pool2d(shape):
    x = _rand(*shape)
    _close(ref.global_avg_pool2d(x), F.adaptive_avg_pool2d(_t(x), 1))


# ---- elementwise ---------------------------------------------------------------------------

EXTREMES = np.array([-100.0, -20.0, -1e-8, 0.0, 1e-8, 20.0, 100.0], dtype=np.float32)


@pytest.mark.parametrize("name,torch_fn", [
    ("relu", F.relu), ("sigmoid", torch.sigmoid), ("tanh", torch.tanh), ("gelu", F.gelu),
])
def test_unary(name, torch_fn):
    x = np.concatenate([_rand(3, 7, 11, scale=4.0).ravel(), EXTREMES]).reshape(14, 17)
    _close(getattr(ref, name)(x), torch_fn(_t(x)), rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("a_shape,b_shape", [((3, 5), (3, 5)), ((3, 1, 5), (4, 5)), ((2, 3), ())])
@pytest.mark.parametrize("name,torch_fn", [("add", torch.add), ("multiply", torch.mul)])
def test_binary(a_shape, b_shape, name, torch_fn):
    a, b = _rand(*a_shape), _rand(*b_shape, seed=1)
    _close(getattr(ref, name)(a, b), torch_fn(_t(a), _t(b)), rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("shape,axis",
                         [((2, 5, 7, 3), 1), ((2, 5, 7, 3), -1), ((4, 3), 0), ((6,), 0)])
def test_bias_add(shape, axis):
    x, b = _rand(*shape), _rand(shape[axis], seed=1)
    view = [1] * len(shape)
    view[axis] = -1
    _close(ref.bias_add(x, b, axis), _t(x) + _t(b).reshape(view), rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("before,after,value", [
    ((1, 0, 2), (0, 3, 1), 1.5),
    ((0, 0, 0), (0, 0, 0), 0.0),
    ((2, 1, 0), None, -np.inf),
    (1, 2, 0.0),
])
def test_pad(before, after, value):
    x = _rand(2, 3, 4)
    b = (before,) * 3 if isinstance(before, int) else before
    a = b if after is None else ((after,) * 3 if isinstance(after, int) else after)
    torch_pad = [p for i in reversed(range(3)) for p in (b[i], a[i])]
    _close(ref.pad(x, before, after, value), F.pad(_t(x), torch_pad, value=value), rtol=0, atol=0)


# ---- results are new arrays of the input dtype ---------------------------------------------


@pytest.mark.parametrize("fn", [
    ref.relu, ref.tanh, ref.softmax, ref.global_avg_pool2d, lambda x: ref.pad(x, 0),
    lambda x: ref.max_pool2d(x, 1), lambda x: ref.bias_add(x, np.zeros(3)),
    lambda x: ref.add(x, 0.0), lambda x: ref.conv2d(x, np.ones((3, 3, 1, 1))),
])
def test_result_is_new_array(fn):
    x = _rand(1, 3, 4, 4)
    out = fn(x)
    assert not np.shares_memory(out, x)


def test_float64_in_float64_out():
    x, w = np.random.default_rng(0).standard_normal((1, 2, 5, 5)), np.ones((3, 2, 3, 3))
    assert ref.conv2d(x, w).dtype == np.float64
    assert ref.gelu(x).dtype == np.float64


# ---- bad arguments -------------------------------------------------------------------------

X4, W4 = np.zeros((1, 4, 8, 8), np.float32), np.zeros((2, 4, 3, 3), np.float32)
V2 = np.zeros(2, np.float32)
BAD = [  # call, pattern that the message must contain
    (lambda: ref.conv2d(X4, np.zeros((2, 3, 3, 3))), "channel mismatch"),
    (lambda: ref.conv2d(np.zeros((1, 6, 8, 8)), np.zeros((4, 2, 3, 3)), groups=4), "groups=4"),
    (lambda: ref.conv2d(X4, np.zeros((3, 2, 3, 3)), groups=2), "output channels"),
    (lambda: ref.conv2d(X4, W4, groups=0), "groups"),
    (lambda: ref.conv2d(X4, W4, stride=0), "stride"),
    (lambda: ref.conv2d(X4, W4, stride=(1, 2, 3)), "stride"),
    (lambda: ref.conv2d(X4, W4, stride=1.5), "stride"),
    (lambda: ref.conv2d(X4, W4, padding=-1), "padding"),
    (lambda: ref.conv2d(X4, W4, dilation=0), "dilation"),
    (lambda: ref.conv2d(X4, np.zeros((2, 4, 9, 9))), "output size"),
    (lambda: ref.conv2d(X4, W4, dilation=4), "output size"),
    (lambda: ref.conv2d(X4[0], W4), "x must be 4-D"),
    (lambda: ref.conv1d(np.zeros((1, 4, 8)), W4), "w must be 3-D"),
    (lambda: ref.conv3d(np.zeros((1, 4, 2, 8, 8)), np.zeros((2, 4, 3, 3, 3))), "output size"),
    (lambda: ref.depthwise_conv2d(X4, np.zeros((4, 2, 3, 3))), "depthwise w"),
    (lambda: ref.conv2d_transpose(X4, np.zeros((3, 2, 3, 3))), "channel mismatch"),
    (lambda: ref.conv2d_transpose(X4, W4, stride=2, output_padding=2), "output_padding"),
    (lambda: ref.conv2d_transpose(X4, np.zeros((4, 2, 3, 3)), groups=3), "groups=3"),
    (lambda: ref.conv2d_transpose(np.zeros((1, 4, 1, 1)), np.zeros((4, 2, 1, 1)), padding=1),
     "output size"),
    (lambda: ref.conv2d_bn_relu(X4, W4, V2, V2, V2, np.zeros(3), 1, 1), "var"),
    (lambda: ref.matmul(np.zeros((2, 3)), np.zeros((4, 5))), "reduction mismatch"),
    (lambda: ref.matmul(np.zeros((2, 3, 4)), np.zeros((4, 5))), "a must be 2-D"),
    (lambda: ref.batch_matmul(np.zeros((2, 3, 4)), np.zeros((3, 4, 5))), "batch mismatch"),
    (lambda: ref.dense(np.zeros((2, 3)), np.zeros((4, 5))), "reduction mismatch"),
    (lambda: ref.dense(np.zeros((2, 3)), np.zeros((4, 3)), np.zeros(3)), "bias"),
    (lambda: ref.transpose_batch_matmul(np.zeros((1, 5, 3, 7)), np.zeros((1, 5, 2, 7))), "heads"),
    (lambda: ref.max_pool2d(X4, 3, padding=2), "at most half"),
    (lambda: ref.max_pool2d(X4, 0), "kernel"),
    (lambda: ref.avg_pool2d(X4, 9), "output size"),
    (lambda: ref.avg_pool2d(X4, 2, stride=0), "stride"),
    (lambda: ref.global_avg_pool2d(X4[0]), "x must be 4-D"),
    (lambda: ref.softmax(X4, axis=4), "axis"),
    (lambda: ref.layer_norm(X4, gamma=np.ones(4)), "gamma"),
    (lambda: ref.batch_norm(X4, V2, V2, V2, V2), "gamma"),
    (lambda: ref.bias_add(X4, np.zeros(8), axis=1), "b must have shape"),
    (lambda: ref.bias_add(X4, np.zeros(8), axis=-5), "axis"),
    (lambda: ref.pad(X4, (1, 1)), "pad_before"),
    (lambda: ref.pad(X4, 1, -1), "pad_after"),
]


@pytest.mark.parametrize("call,pattern", BAD)
def test_bad_arguments_raise(call, pattern):
    with pytest.raises(ValueError, match=pattern):
        call()
