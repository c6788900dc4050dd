"""x86 dot-product intrinsics: VNNI (vpdpbusd for u8 x s8, vpdpwssd on operands widened to 16
bits for s8 x s8) at 512 and 256 bits, the exact AVX2 / AVX-512BW path for CPUs without VNNI
(operands widened to 16 bits, vpmaddwd), and AVX-512 BF16's vdpbf16ps (pairs of bfloat16
into float32).

Each computes C[j] += A[k] * B[j, k] in int32 (float32 for bfloat16) for `lanes` outputs j and
a group of k: one A group (4 or 2 elements) broadcast to every lane, B's groups packed lane
after lane.

Overflow: every product and every group's sum is exact in int32 (|255 * -128| * 4 < 2^31).
vpmaddubsw, the AVX2 idiom that sums two u8 x s8 products in a *saturating* int16, is not
used: 255 * -128 * 2 does not fit. The int32 accumulator itself wraps on overflow, as numpy's
int32 sums do. vdpbf16ps rounds as float32 arithmetic does, but treats subnormal inputs
and results as zero whatever MXCSR says.
"""
from __future__ import annotations

from tessel.intrin.base import BF16_EXACT, TensorIntrin, dot_desc

_EXACT = ("exact: products and group sums fit int32, no int16 saturation; the int32 "
          "accumulator wraps on overflow")
_A4 = "int32_t a4;\n__builtin_memcpy(&a4, &a, 4);\n"


def _vnni(lanes: int, name: str, features: set[str], target: str, fn: str) -> TensorIntrin:
    bits = lanes * 32
    body = (f"{_A4}return (__typeof__(acc)){fn}((__m{bits}i)acc, _mm{bits}_set1_epi32(a4), "
            f"(__m{bits}i)b);")
    return TensorIntrin(name, dot_desc(lanes, 4, "uint8", "int8", name), "x86_64",
                        frozenset(features), body, target, ("immintrin.h",), _EXACT)


def _pair(a: str) -> str:
    """The two A elements widened to int16, packed in one int32 (A[0] in the low half)."""
    widen = "(uint16_t)(int16_t)" if a == "int8" else "(uint16_t)"
    return (f"uint32_t a2 = (uint32_t){widen}a[0] | ((uint32_t){widen}a[1] << 16);\n")


def _madd(lanes: int, a: str, name: str) -> TensorIntrin:
    """16-bit multiply-add: B's 2 x lanes bytes sign-extended to int16, A's pair broadcast."""
    if lanes == 16:
        body = (f"{_pair(a)}__m512i b16 = _mm512_cvtepi8_epi16((__m256i)b);\n"
                "return acc + (__typeof__(acc))_mm512_madd_epi16(_mm512_set1_epi32((int)a2), b16);")
        features, target = {"avx512f", "avx512bw"}, "avx512f,avx512bw"
    else:
        body = (f"{_pair(a)}__m256i b16 = _mm256_cvtepi8_epi16((__m128i)b);\n"
                "return acc + (__typeof__(acc))_mm256_madd_epi16(_mm256_set1_epi32((int)a2), b16);")
        features, target = {"avx2"}, "avx2"
    return TensorIntrin(name, dot_desc(lanes, 2, a, "int8", name), "x86_64",
                        frozenset(features), body, target, ("immintrin.h",), _EXACT)


def _dpwssd(lanes: int, name: str, features: set[str], target: str, fn: str) -> TensorIntrin:
    """s8 x s8 on VNNI: both sign-extended to int16, vpdpwssd multiplies the pairs and adds
    them into the accumulator in one instruction (the AVX-512BW path's vpmaddwd + vpaddd);
    vpdpbusd takes an unsigned operand, so a signed one goes this way."""
    bits, half = lanes * 32, lanes * 16
    body = (f"{_pair('int8')}__m{bits}i b16 = _mm{bits}_cvtepi8_epi16((__m{half}i)b);\n"
            f"return (__typeof__(acc)){fn}((__m{bits}i)acc, _mm{bits}_set1_epi32((int)a2), "
            "b16);")
    return TensorIntrin(name, dot_desc(lanes, 2, "int8", "int8", name), "x86_64",
                        frozenset(features), body, target, ("immintrin.h",), _EXACT)


def _dpbf16(lanes: int, name: str, features: set[str], target: str) -> TensorIntrin:
    """bfloat16 pairs (AVX-512 BF16's vdpbf16ps): each float32 lane adds the two products of
    its pair of B with A's pair, broadcast."""
    bits = lanes * 32
    body = (f"{_A4}return (__typeof__(acc))_mm{bits}_dpbf16_ps((__m{bits})acc, "
            f"(__m{bits}bh)_mm{bits}_set1_epi32(a4), (__m{bits}bh)b);")
    return TensorIntrin(name, dot_desc(lanes, 2, "bfloat16", "bfloat16", name, "float32"),
                        "x86_64", frozenset(features), body, target, ("immintrin.h",),
                        BF16_EXACT)


INTRINSICS = (
    _vnni(16, "dot_u8s8_16x4_vnni", {"avx512f", "avx512_vnni"}, "avx512f,avx512vnni",
          "_mm512_dpbusd_epi32"),
    _vnni(8, "dot_u8s8_8x4_vnni", {"avx512vl", "avx512_vnni"}, "avx512f,avx512vl,avx512vnni",
          "_mm256_dpbusd_epi32"),
    _vnni(8, "dot_u8s8_8x4_avxvnni", {"avx_vnni"}, "avx2,avxvnni", "_mm256_dpbusd_avx_epi32"),
    _dpwssd(16, "dot_s8s8_16x2_vnni", {"avx512f", "avx512bw", "avx512_vnni"},
            "avx512f,avx512bw,avx512vnni", "_mm512_dpwssd_epi32"),
    _dpwssd(8, "dot_s8s8_8x2_avxvnni", {"avx_vnni"}, "avx2,avxvnni", "_mm256_dpwssd_avx_epi32"),
    _madd(16, "uint8", "dot_u8s8_16x2_avx512"),
    _madd(16, "int8", "dot_s8s8_16x2_avx512"),
    _madd(8, "uint8", "dot_u8s8_8x2_avx2"),
    _madd(8, "int8", "dot_s8s8_8x2_avx2"),
    _dpbf16(16, "dot_bf16_16x2_avx512", {"avx512f", "avx512_bf16"}, "avx512f,avx512bf16"),
    _dpbf16(8, "dot_bf16_8x2_avx512", {"avx512vl", "avx512_bf16"},
            "avx512f,avx512vl,avx512bf16"),
)

__all__ = ["INTRINSICS"]
