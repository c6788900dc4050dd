"""Built-in AutoTVM-style templates for CPUs (see base.py for how a template is written).

    TEMPLATES["matmul"]        matmul / dense: C[i, j] = sum_k A[i, k] * B[k, j]
    TEMPLATES["batch_matmul"]  batched matmul, including TBG's transpose + batch matmul
    TEMPLATES["conv2d"]        direct NCHW conv2d with a packed local output tile
    TEMPLATES["depthwise_conv2d"]  the same for depthwise conv2d
"""
from tessel.space.templates.base import Template, TemplateContext, TemplateSpace
from tessel.space.templates.conv import conv2d_nchw, depthwise_conv2d_nchw
from tessel.space.templates.gemm import batch_matmul, matmul

TEMPLATES: dict[str, Template] = {
    "matmul": matmul,
    "dense": matmul,
    "batch_matmul": batch_matmul,
    "conv2d": conv2d_nchw,
    "depthwise_conv2d": depthwise_conv2d_nchw,
}

__all__ = ["TEMPLATES", "Template", "TemplateContext", "TemplateSpace", "matmul",
           "batch_matmul", "conv2d_nchw", "depthwise_conv2d_nchw"]
