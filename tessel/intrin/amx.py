"""x86 AMX integer matrix multiply: a 32 x 32 int32 block of C, four tiles, accumulated over a
reduction of any multiple of 64 bytes in the tiles (tdpbusd for u8 x s8, tdpbssd for s8 x s8).

    C[m, no, ni] += sum over kq, ki of A[m, kq * 4 + ki] * B[no, kq, ni, ki]
        m < 32 rows, no < 2 column tiles of ni < 16 int32 columns, kq < 16 * n_kq, ki < 4

A's rows (`lda` bytes apart), C's rows (`ldc` int32 apart) and B's two column tiles (`ldb`
bytes apart) may lie anywhere: the program's tiling chooses them (free strides). B is packed
as the instruction reads it, four consecutive k of a column together: B'[j // 16, k // 4,
j % 16, k % 4] is the layout the VNNI intrinsics' rule packs already.

The tiles are not C values, so this is a *memory* intrinsic (base.TensorIntrin.memory): one
call loads the four accumulator tiles (or zeroes them: `zero`), runs the whole reduction on
them (two A and two B tile loads and four tile multiplies per 64 bytes of k) and stores them.
Measured on a 2-core Xeon with AMX (2026-11-27): one 16 x 16 x 64 tdpbusd per 16 cycles,
6.6 TOP/s a core with the accumulators in tiles, 1.0 TOP/s when each instruction loads and
stores its accumulator, 4.7-5.0 TOP/s for this function at a reduction of 768-1024 (against
0.85 TOP/s a core for VNNI-512): the reduction belongs inside the call.

Each call configures the tiles (ldtilecfg: every tile 16 rows of 64 bytes) and releases them at
its end, so it shares a thread with any other AMX user (onnxruntime's and oneDNN's kernels
set their own configurations) and costs no tile state on a context switch; both cost well
under 1% of a call's reduction of 768. Linux hands out the tiles' state only to a process that
asks (arch_prctl ARCH_REQ_XCOMP_PERM): the first call asks once for the process.

Overflow: products and their sums are exact in int32; the int32 accumulator wraps.
"""
from __future__ import annotations

from tessel import te
from tessel.intrin.base import TensorIntrin, _without_init

_EXACT = "exact: products and sums fit int32, no saturation; the int32 accumulator wraps"

_PERMISSION = """\
long syscall(long number, ...);  /* unistd.h declares it only beyond POSIX */
static volatile int tessel_amx_permitted;
static inline void tessel_amx_permit(void) {
    if (!tessel_amx_permitted) {  /* x86-64 arch_prctl(ARCH_REQ_XCOMP_PERM, XTILEDATA) */
        syscall(158, 0x1023, 18);
        tessel_amx_permitted = 1;
    }
}"""

_BODY = """\
tessel_amx_permit();
struct { uint8_t palette, start; uint8_t reserved[14]; uint16_t colsb[16]; uint8_t rows[16]; }
    cfg = {1, 0, {0}, {64, 64, 64, 64, 64, 64, 64, 64}, {16, 16, 16, 16, 16, 16, 16, 16}};
_tile_loadconfig(&cfg);
const int64_t ldc_bytes = ldc * 4;
int32_t* c1 = c + 16 * ldc;
if (zero) {
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
} else {
    _tile_loadd(0, c, ldc_bytes);
    _tile_loadd(1, c + 16, ldc_bytes);
    _tile_loadd(2, c1, ldc_bytes);
    _tile_loadd(3, c1 + 16, ldc_bytes);
}
const ATYPE* a1 = a + 16 * lda;
for (int64_t t = 0; t < n_kq; ++t) {
    _tile_loadd(4, a + 64 * t, lda);
    _tile_loadd(5, a1 + 64 * t, lda);
    _tile_loadd(6, b + 1024 * t, 64);
    _tile_loadd(7, b + ldb + 1024 * t, 64);
    DOT(0, 4, 6);
    DOT(1, 4, 7);
    DOT(2, 5, 6);
    DOT(3, 5, 7);
}
_tile_stored(0, c, ldc_bytes);
_tile_stored(1, c + 16, ldc_bytes);
_tile_stored(2, c1, ldc_bytes);
_tile_stored(3, c1 + 16, ldc_bytes);
_tile_release();"""


def amx_desc(a_dtype: str, name: str):
    """C[m, no, ni] += int32(A[m, kq * 4 + ki]) * int32(B[no, kq, ni, ki]): a 32 x 32 block
    of int32 over one 64-byte step of the reduction (kq < 16, ki < 4)."""
    A = te.placeholder((32, 64), a_dtype, name="A")
    B = te.placeholder((2, 16, 16, 4), "int8", name="B")
    kq = te.reduce_axis(16, name="kq")
    ki = te.reduce_axis(4, name="ki")
    C = te.compute((32, 2, 16), lambda m, no, ni: te.sum(
        te.cast("int32", A[m, kq * 4 + ki]) * te.cast("int32", B[no, kq, ni, ki]),
        axis=[kq, ki]), name="C")
    return _without_init(te.create_func([A, B, C], name=name))


def _amx(name: str, a_dtype: str, dot: str) -> TensorIntrin:
    atype = "uint8_t" if a_dtype == "uint8" else "int8_t"
    body = _BODY.replace("ATYPE", atype).replace("DOT", dot)
    return TensorIntrin(name, amx_desc(a_dtype, name), "x86_64",
                        frozenset({"amx_tile", "amx_int8"}), body, "amx-tile,amx-int8",
                        ("immintrin.h",), _EXACT,
                        memory=True, free_strides=(("A", 0), ("B", 0), ("C", 0)),
                        free_extents=("kq",), prelude=_PERMISSION)


INTRINSICS = (
    _amx("amx_u8s8_32x32", "uint8", "_tile_dpbusd"),
    _amx("amx_s8s8_32x32", "int8", "_tile_dpbssd"),
)

__all__ = ["INTRINSICS", "amx_desc"]
