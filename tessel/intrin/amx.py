"""x86 AMX matrix multiply: a 32 x 32 int32 block of C, four tiles, accumulated over a
reduction of any multiple of 64 bytes in the tiles (tdpbusd for u8 x s8, tdpbssd for s8 x s8;
tdpbf16ps, `amx_bf16_32x32`, a float32 block of bfloat16 operands, in pairs: ki < 2).

    C[m, no, ni] += sum over kq, ki of A[m, kq * 4 + ki] * B[no, kq, ni, ki]
        m < 32 rows, no < 2 column tiles of ni < 16 int32 columns, kq < 16 * n_kq, ki < 4

A's rows (`lda` elements apart), C's rows (`ldc` apart) and B's two column tiles (`ldb`
elements apart) may lie anywhere: the program's tiling chooses them (free strides). B is packed
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

The *taps* form (`amx_u8s8_16x64_taps`, `amx_s8s8_16x64_taps`) is a convolution's: up to 16
rows (a partial extent, configured per call: a row of 14 or 7 output pixels) by 64 int32
columns in four tiles, one A tile of the rows, four B tiles, and two reduction loops of its own
with free strides in A and B (ry, rx: the window), so one call runs a pixel row's whole
window over all its input channels on data laid out NHWC:

    C[m, no, ni] += sum over ry, rx, kq, ki of A[ry, rx, m, kq * 4 + ki] * B[ry, rx, no, kq, ni, ki]

Measured with a C probe on the same Xeon, one thread, a 3 x 3 window: 3.7-4.6 TOP/s at 14
rows and 64-512 channels (1.9-2.3 at 7 rows), where one call per tap and 64 channels loads
and stores the accumulators each time. A matmul whose rows are not a multiple of 32 takes it
too (its window loops absent: n_ry = n_rx = 1).

Overflow: products and their sums are exact in int32; the int32 accumulator wraps.
"""
from __future__ import annotations

from tessel import te
from tessel.ir import DTYPE_BITS
from tessel.intrin.base import BF16_EXACT, TensorIntrin, _without_init

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

def _body(rows: str, c_tiles: tuple[str, ...], steps: str) -> str:
    """A call's C: the tiles configured (`rows`: a statement setting cfg.rows, or ""), the
    four accumulators at `c_tiles` zeroed or loaded, the reduction `steps`, the accumulators
    stored, the tiles released."""
    load = "\n".join(f"    _tile_loadd({t}, {at}, ldc_bytes);" for t, at in enumerate(c_tiles))
    store = "\n".join(f"_tile_stored({t}, {at}, ldc_bytes);" for t, at in enumerate(c_tiles))
    zero = "\n".join(f"    _tile_zero({t});" for t in range(len(c_tiles)))
    return f"""\
tessel_amx_permit();
struct {{ uint8_t palette, start; uint8_t reserved[14]; uint16_t colsb[16]; uint8_t rows[16]; }}
    cfg = {{1, 0, {{0}}, {{64, 64, 64, 64, 64, 64, 64, 64}}, {{16, 16, 16, 16, 16, 16, 16, 16}}}};
{rows}_tile_loadconfig(&cfg);
const int64_t ldc_bytes = ldc * 4;
if (zero) {{
{zero}
}} else {{
{load}
}}
{steps}
{store}
_tile_release();"""


def _group(dtype: str) -> int:
    """The elements of an operand in 4 bytes, the instructions' pair: 4 8-bit integers, 2
    bfloat16."""
    return 32 // DTYPE_BITS[dtype]


def _matmul_body(group: int) -> str:
    """The 32 x 32 form's call for operands of `group` elements a 4-byte pair (4 8-bit
    integers, 2 bfloat16): a tile row is 64 bytes, 16 * group elements, of the reduction;
    the strides lda and ldb count elements, the tile loads take bytes."""
    step, tile = 16 * group, 256 * group  # elements of one row of A's tile, of one B tile
    lda = "lda" if group == 4 else f"lda * {4 // group}"
    return _body("", ("c", "c + 16", "c + 16 * ldc", "c + 16 * ldc + 16"), f"""\
const ATYPE* a1 = a + 16 * lda;
for (int64_t t = 0; t < n_kq; ++t) {{
    _tile_loadd(4, a + {step} * t, {lda});
    _tile_loadd(5, a1 + {step} * t, {lda});
    _tile_loadd(6, b + {tile} * t, 64);
    _tile_loadd(7, b + ldb + {tile} * t, 64);
    DOT(0, 4, 6);
    DOT(1, 4, 7);
    DOT(2, 5, 6);
    DOT(3, 5, 7);
}}""")


def amx_desc(a_dtype: str, name: str, b_dtype: str = "int8", acc: str = "int32"):
    """C[m, no, ni] += acc(A[m, kq * G + ki]) * acc(B[no, kq, ni, ki]): a 32 x 32 block of
    `acc` over one 64-byte step of the reduction (kq < 16, ki < G: 4 for 8-bit operands into
    int32, 2 for bfloat16 into float32)."""
    group = _group(a_dtype)
    A = te.placeholder((32, 16 * group), a_dtype, name="A")
    B = te.placeholder((2, 16, 16, group), b_dtype, name="B")
    kq = te.reduce_axis(16, name="kq")
    ki = te.reduce_axis(group, name="ki")
    C = te.compute((32, 2, 16), lambda m, no, ni: te.sum(
        te.cast(acc, A[m, kq * group + ki]) * te.cast(acc, B[no, kq, ni, ki]),
        axis=[kq, ki]), name="C")
    return _without_init(te.create_func([A, B, C], name=name))


_TAPS_BODY = _body(
    "for (int t = 0; t < 5; ++t) cfg.rows[t] = (uint8_t)e_m;  /* C's tiles and A: the rows */\n",
    ("c", "c + 16", "c + 32", "c + 48"), """\
for (int64_t ty = 0; ty < n_ry; ++ty) {
    for (int64_t tx = 0; tx < n_rx; ++tx) {
        const ATYPE* at = a + ty * lda + tx * lda1;
        const int8_t* bt = b + ty * ldb + tx * ldb1;
        for (int64_t t = 0; t < n_kq; ++t) {
            _tile_loadd(4, at + 64 * t, lda2);
            _tile_loadd(5, bt + 1024 * t, 64);
            DOT(0, 4, 5);
            _tile_loadd(6, bt + ldb2 + 1024 * t, 64);
            DOT(1, 4, 6);
            _tile_loadd(7, bt + 2 * ldb2 + 1024 * t, 64);
            DOT(2, 4, 7);
            _tile_loadd(5, bt + 3 * ldb2 + 1024 * t, 64);
            DOT(3, 4, 5);
        }
    }
}""")


def amx_taps_desc(a_dtype: str, name: str):
    """C[m, no, ni] += int32(A[ry, rx, m, kq * 4 + ki]) * int32(B[ry, rx, no, kq, ni, ki]):
    up to 16 rows by 64 int32 columns over one tap (ry, rx: a convolution's window, each a
    loop of the call with its own strides in A and B) and one 64-byte step of the
    reduction."""
    A = te.placeholder((1, 1, 16, 64), a_dtype, name="A")
    B = te.placeholder((1, 1, 4, 16, 16, 4), "int8", name="B")
    ry = te.reduce_axis(1, name="ry")
    rx = te.reduce_axis(1, name="rx")
    kq = te.reduce_axis(16, name="kq")
    ki = te.reduce_axis(4, name="ki")
    C = te.compute((16, 4, 16), lambda m, no, ni: te.sum(
        te.cast("int32", A[ry, rx, m, kq * 4 + ki]) * te.cast("int32", B[ry, rx, no, kq, ni, ki]),
        axis=[ry, rx, kq, ki]), name="C")
    return _without_init(te.create_func([A, B, C], name=name))


def _amx_taps(name: str, a_dtype: str, dot: str) -> TensorIntrin:
    atype = "uint8_t" if a_dtype == "uint8" else "int8_t"
    body = _TAPS_BODY.replace("ATYPE", atype).replace("DOT", dot)
    return TensorIntrin(name, amx_taps_desc(a_dtype, name), "x86_64",
                        frozenset({"amx_tile", "amx_int8"}), body, "amx-tile,amx-int8",
                        ("immintrin.h",), _EXACT, memory=True,
                        free_strides=(("A", 0), ("A", 1), ("A", 2), ("B", 0), ("B", 1),
                                      ("B", 2), ("C", 0)),
                        free_extents=("ry", "rx", "kq"), partial_extents=("m",),
                        prelude=_PERMISSION)


def _amx(name: str, a_dtype: str, dot: str) -> TensorIntrin:
    if a_dtype == "bfloat16":
        desc = amx_desc(a_dtype, name, "bfloat16", "float32")
        features, target, exact = {"amx_tile", "amx_bf16"}, "amx-tile,amx-bf16", BF16_EXACT
    else:
        desc = amx_desc(a_dtype, name)
        features, target, exact = {"amx_tile", "amx_int8"}, "amx-tile,amx-int8", _EXACT
    atype = {"uint8": "uint8_t", "int8": "int8_t", "bfloat16": "uint16_t"}[a_dtype]
    body = _matmul_body(_group(a_dtype)).replace("ATYPE", atype).replace("DOT", dot)
    return TensorIntrin(name, desc, "x86_64", frozenset(features), body, target,
                        ("immintrin.h",), exact,
                        memory=True, free_strides=(("A", 0), ("B", 0), ("C", 0)),
                        free_extents=("kq",), prelude=_PERMISSION)


INTRINSICS = (
    _amx("amx_u8s8_32x32", "uint8", "_tile_dpbusd"),
    _amx("amx_s8s8_32x32", "int8", "_tile_dpbssd"),
    _amx("amx_bf16_32x32", "bfloat16", "_tile_dpbf16ps"),
    _amx_taps("amx_u8s8_16x64_taps", "uint8", "_tile_dpbusd"),
    _amx_taps("amx_s8s8_16x64_taps", "int8", "_tile_dpbssd"),
)

__all__ = ["INTRINSICS", "amx_desc", "amx_taps_desc"]
