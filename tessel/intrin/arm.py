"""AArch64 integer dot-product intrinsics: sdot (s8 x s8, the dotprod extension) and usdot
(u8 x s8, i8mm), four int32 lanes of four products each; each function is compiled for the
architecture level that has its instruction (arm_neon.h asks for it). A's group of four bytes is
broadcast to every lane; the instruction sums each lane's four products exactly into int32
(the accumulator wraps on overflow, as numpy's int32 sums do)."""
from __future__ import annotations

from tessel.intrin.base import TensorIntrin, dot_desc

_EXACT = "exact: products and group sums fit int32; the int32 accumulator wraps on overflow"


def _dot(name: str, a: str, fn: str, feature: str, arch: str) -> TensorIntrin:
    body = ("int32_t a4;\n__builtin_memcpy(&a4, &a, 4);\n"
            f"return (__typeof__(acc)){fn}((int32x4_t)acc, {{ARGS}});")
    args = ("(int8x16_t)b, vreinterpretq_s8_s32(vdupq_n_s32(a4))" if a == "int8" else
            "vreinterpretq_u8_s32(vdupq_n_s32(a4)), (int8x16_t)b")
    return TensorIntrin(name, dot_desc(4, 4, a, "int8", name), "aarch64", frozenset({feature}),
                        body.replace("{ARGS}", args), f"arch={arch}", ("arm_neon.h",), _EXACT)


INTRINSICS = (
    _dot("dot_s8s8_4x4_sdot", "int8", "vdotq_s32", "asimddp", "armv8.2-a+dotprod"),
    _dot("dot_u8s8_4x4_usdot", "uint8", "vusdotq_s32", "i8mm", "armv8.6-a+i8mm"),
)

__all__ = ["INTRINSICS"]
