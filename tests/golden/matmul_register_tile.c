// tessel kernel matmul_register_tile
// inputs: A float32[5, 3], B float32[3, 12]
// outputs: C float32[5, 12]

#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <time.h>

#define TESSEL_ALLOC_FAILED 1

#ifndef TESSEL_THREADS  /* a library of many kernels sets its own: tessel.graph.export */
#define TESSEL_THREADS 1
#endif

typedef float tessel_f32x8 __attribute__((vector_size(32)));
typedef float tessel_f32x8_u __attribute__((vector_size(32), aligned(4), may_alias));
static inline tessel_f32x8 tessel_f32x8_load(const float* p) { return *(const tessel_f32x8_u*)p; }
static inline void tessel_f32x8_store(float* p, tessel_f32x8 v) { *(tessel_f32x8_u*)p = v; }
static inline tessel_f32x8 tessel_f32x8_splat(float x) { return (tessel_f32x8){x, x, x, x, x, x, x, x}; }

static int32_t matmul_register_tile(
        const float* restrict A,
        const float* restrict B,
        float* restrict C) {
    #pragma omp parallel for num_threads(TESSEL_THREADS) schedule(static)
    for (int32_t i_0 = 0; i_0 < 3; ++i_0) {
        if (i_0 * 2 + 1 < 5) {
            for (int32_t j_0 = 0; j_0 < 2; ++j_0) {
                if (j_0 * 8 + 7 < 12) {
                    // block C_tile
                    {
                        tessel_f32x8 C_local_0 = {0};
                        tessel_f32x8 C_local_8 = {0};
                        // block C_init
                        C_local_0 = tessel_f32x8_splat(0.0f);
                        // block C_init
                        C_local_8 = tessel_f32x8_splat(0.0f);
                        for (int32_t k = 0; k < 3; ++k) {
                            // block C_update
                            C_local_0 = (C_local_0 + (tessel_f32x8_splat(A[i_0 * 2 * 3 + k]) * tessel_f32x8_load(&B[k * 12 + j_0 * 8])));
                            // block C_update
                            C_local_8 = (C_local_8 + (tessel_f32x8_splat(A[(i_0 * 2 + 1) * 3 + k]) * tessel_f32x8_load(&B[k * 12 + j_0 * 8])));
                        }
                        // block C_write
                        tessel_f32x8_store(&C[i_0 * 2 * 12 + j_0 * 8], C_local_0);
                        // block C_write
                        tessel_f32x8_store(&C[(i_0 * 2 + 1) * 12 + j_0 * 8], C_local_8);
                    }
                } else {
                    // block C_tile
                    {
                        tessel_f32x8 C_local_0_1 = {0};
                        tessel_f32x8 C_local_8_1 = {0};
                        // block C_init
                        C_local_0_1 = tessel_f32x8_splat(0.0f);
                        // block C_init
                        C_local_8_1 = tessel_f32x8_splat(0.0f);
                        for (int32_t k = 0; k < 3; ++k) {
                            // block C_update
                            if (j_0 * 8 < 12 && j_0 * 8 + 7 < 12) {
                                C_local_0_1 = (C_local_0_1 + (tessel_f32x8_splat(A[i_0 * 2 * 3 + k]) * tessel_f32x8_load(&B[k * 12 + j_0 * 8])));
                            } else {
                                if (j_0 * 8 < 12) {
                                    C_local_0_1[0] = C_local_0_1[0] + A[i_0 * 2 * 3 + k] * B[k * 12 + j_0 * 8];
                                }
                                if (j_0 * 8 + 1 < 12) {
                                    C_local_0_1[1] = C_local_0_1[1] + A[i_0 * 2 * 3 + k] * B[k * 12 + j_0 * 8 + 1];
                                }
                                if (j_0 * 8 + 2 < 12) {
                                    C_local_0_1[2] = C_local_0_1[2] + A[i_0 * 2 * 3 + k] * B[k * 12 + j_0 * 8 + 2];
                                }
                                if (j_0 * 8 + 3 < 12) {
                                    C_local_0_1[3] = C_local_0_1[3] + A[i_0 * 2 * 3 + k] * B[k * 12 + j_0 * 8 + 3];
                                }
                                if (j_0 * 8 + 4 < 12) {
                                    C_local_0_1[4] = C_local_0_1[4] + A[i_0 * 2 * 3 + k] * B[k * 12 + j_0 * 8 + 4];
                                }
                                if (j_0 * 8 + 5 < 12) {
                                    C_local_0_1[5] = C_local_0_1[5] + A[i_0 * 2 * 3 + k] * B[k * 12 + j_0 * 8 + 5];
                                }
                                if (j_0 * 8 + 6 < 12) {
                                    C_local_0_1[6] = C_local_0_1[6] + A[i_0 * 2 * 3 + k] * B[k * 12 + j_0 * 8 + 6];
                                }
                                if (j_0 * 8 + 7 < 12) {
                                    C_local_0_1[7] = C_local_0_1[7] + A[i_0 * 2 * 3 + k] * B[k * 12 + j_0 * 8 + 7];
                                }
                            }
                            // block C_update
                            if (j_0 * 8 < 12 && j_0 * 8 + 7 < 12) {
                                C_local_8_1 = (C_local_8_1 + (tessel_f32x8_splat(A[(i_0 * 2 + 1) * 3 + k]) * tessel_f32x8_load(&B[k * 12 + j_0 * 8])));
                            } else {
                                if (j_0 * 8 < 12) {
                                    C_local_8_1[0] = C_local_8_1[0] + A[(i_0 * 2 + 1) * 3 + k] * B[k * 12 + j_0 * 8];
                                }
                                if (j_0 * 8 + 1 < 12) {
                                    C_local_8_1[1] = C_local_8_1[1] + A[(i_0 * 2 + 1) * 3 + k] * B[k * 12 + j_0 * 8 + 1];
                                }
                                if (j_0 * 8 + 2 < 12) {
                                    C_local_8_1[2] = C_local_8_1[2] + A[(i_0 * 2 + 1) * 3 + k] * B[k * 12 + j_0 * 8 + 2];
                                }
                                if (j_0 * 8 + 3 < 12) {
                                    C_local_8_1[3] = C_local_8_1[3] + A[(i_0 * 2 + 1) * 3 + k] * B[k * 12 + j_0 * 8 + 3];
                                }
                                if (j_0 * 8 + 4 < 12) {
                                    C_local_8_1[4] = C_local_8_1[4] + A[(i_0 * 2 + 1) * 3 + k] * B[k * 12 + j_0 * 8 + 4];
                                }
                                if (j_0 * 8 + 5 < 12) {
                                    C_local_8_1[5] = C_local_8_1[5] + A[(i_0 * 2 + 1) * 3 + k] * B[k * 12 + j_0 * 8 + 5];
                                }
                                if (j_0 * 8 + 6 < 12) {
                                    C_local_8_1[6] = C_local_8_1[6] + A[(i_0 * 2 + 1) * 3 + k] * B[k * 12 + j_0 * 8 + 6];
                                }
                                if (j_0 * 8 + 7 < 12) {
                                    C_local_8_1[7] = C_local_8_1[7] + A[(i_0 * 2 + 1) * 3 + k] * B[k * 12 + j_0 * 8 + 7];
                                }
                            }
                        }
                        // block C_write
                        if (j_0 * 8 < 12 && j_0 * 8 + 7 < 12) {
                            tessel_f32x8_store(&C[i_0 * 2 * 12 + j_0 * 8], C_local_0_1);
                        } else {
                            if (j_0 * 8 < 12) {
                                C[i_0 * 2 * 12 + j_0 * 8] = C_local_0_1[0];
                            }
                            if (j_0 * 8 + 1 < 12) {
                                C[i_0 * 2 * 12 + j_0 * 8 + 1] = C_local_0_1[1];
                            }
                            if (j_0 * 8 + 2 < 12) {
                                C[i_0 * 2 * 12 + j_0 * 8 + 2] = C_local_0_1[2];
                            }
                            if (j_0 * 8 + 3 < 12) {
                                C[i_0 * 2 * 12 + j_0 * 8 + 3] = C_local_0_1[3];
                            }
                            if (j_0 * 8 + 4 < 12) {
                                C[i_0 * 2 * 12 + j_0 * 8 + 4] = C_local_0_1[4];
                            }
                            if (j_0 * 8 + 5 < 12) {
                                C[i_0 * 2 * 12 + j_0 * 8 + 5] = C_local_0_1[5];
                            }
                            if (j_0 * 8 + 6 < 12) {
                                C[i_0 * 2 * 12 + j_0 * 8 + 6] = C_local_0_1[6];
                            }
                            if (j_0 * 8 + 7 < 12) {
                                C[i_0 * 2 * 12 + j_0 * 8 + 7] = C_local_0_1[7];
                            }
                        }
                        // block C_write
                        if (j_0 * 8 < 12 && j_0 * 8 + 7 < 12) {
                            tessel_f32x8_store(&C[(i_0 * 2 + 1) * 12 + j_0 * 8], C_local_8_1);
                        } else {
                            if (j_0 * 8 < 12) {
                                C[(i_0 * 2 + 1) * 12 + j_0 * 8] = C_local_8_1[0];
                            }
                            if (j_0 * 8 + 1 < 12) {
                                C[(i_0 * 2 + 1) * 12 + j_0 * 8 + 1] = C_local_8_1[1];
                            }
                            if (j_0 * 8 + 2 < 12) {
                                C[(i_0 * 2 + 1) * 12 + j_0 * 8 + 2] = C_local_8_1[2];
                            }
                            if (j_0 * 8 + 3 < 12) {
                                C[(i_0 * 2 + 1) * 12 + j_0 * 8 + 3] = C_local_8_1[3];
                            }
                            if (j_0 * 8 + 4 < 12) {
                                C[(i_0 * 2 + 1) * 12 + j_0 * 8 + 4] = C_local_8_1[4];
                            }
                            if (j_0 * 8 + 5 < 12) {
                                C[(i_0 * 2 + 1) * 12 + j_0 * 8 + 5] = C_local_8_1[5];
                            }
                            if (j_0 * 8 + 6 < 12) {
                                C[(i_0 * 2 + 1) * 12 + j_0 * 8 + 6] = C_local_8_1[6];
                            }
                            if (j_0 * 8 + 7 < 12) {
                                C[(i_0 * 2 + 1) * 12 + j_0 * 8 + 7] = C_local_8_1[7];
                            }
                        }
                    }
                }
            }
        } else {
            for (int32_t j_0 = 0; j_0 < 2; ++j_0) {
                // block C_tile
                {
                    tessel_f32x8 C_local_0_2 = {0};
                    tessel_f32x8 C_local_8_2 = {0};
                    // block C_init
                    C_local_0_2 = tessel_f32x8_splat(0.0f);
                    // block C_init
                    C_local_8_2 = tessel_f32x8_splat(0.0f);
                    for (int32_t k = 0; k < 3; ++k) {
                        // block C_update
                        if (i_0 * 2 < 5 && j_0 * 8 < 12 && j_0 * 8 + 7 < 12) {
                            C_local_0_2 = (C_local_0_2 + (tessel_f32x8_splat(A[i_0 * 2 * 3 + k]) * tessel_f32x8_load(&B[k * 12 + j_0 * 8])));
                        } else {
                            if (i_0 * 2 < 5 && j_0 * 8 < 12) {
                                C_local_0_2[0] = C_local_0_2[0] + A[i_0 * 2 * 3 + k] * B[k * 12 + j_0 * 8];
                            }
                            if (i_0 * 2 < 5 && j_0 * 8 + 1 < 12) {
                                C_local_0_2[1] = C_local_0_2[1] + A[i_0 * 2 * 3 + k] * B[k * 12 + j_0 * 8 + 1];
                            }
                            if (i_0 * 2 < 5 && j_0 * 8 + 2 < 12) {
                                C_local_0_2[2] = C_local_0_2[2] + A[i_0 * 2 * 3 + k] * B[k * 12 + j_0 * 8 + 2];
                            }
                            if (i_0 * 2 < 5 && j_0 * 8 + 3 < 12) {
                                C_local_0_2[3] = C_local_0_2[3] + A[i_0 * 2 * 3 + k] * B[k * 12 + j_0 * 8 + 3];
                            }
                            if (i_0 * 2 < 5 && j_0 * 8 + 4 < 12) {
                                C_local_0_2[4] = C_local_0_2[4] + A[i_0 * 2 * 3 + k] * B[k * 12 + j_0 * 8 + 4];
                            }
                            if (i_0 * 2 < 5 && j_0 * 8 + 5 < 12) {
                                C_local_0_2[5] = C_local_0_2[5] + A[i_0 * 2 * 3 + k] * B[k * 12 + j_0 * 8 + 5];
                            }
                            if (i_0 * 2 < 5 && j_0 * 8 + 6 < 12) {
                                C_local_0_2[6] = C_local_0_2[6] + A[i_0 * 2 * 3 + k] * B[k * 12 + j_0 * 8 + 6];
                            }
                            if (i_0 * 2 < 5 && j_0 * 8 + 7 < 12) {
                                C_local_0_2[7] = C_local_0_2[7] + A[i_0 * 2 * 3 + k] * B[k * 12 + j_0 * 8 + 7];
                            }
                        }
                        // block C_update
                        if (i_0 * 2 + 1 < 5 && j_0 * 8 < 12 && j_0 * 8 + 7 < 12) {
                            C_local_8_2 = (C_local_8_2 + (tessel_f32x8_splat(A[(i_0 * 2 + 1) * 3 + k]) * tessel_f32x8_load(&B[k * 12 + j_0 * 8])));
                        } else {
                            if (i_0 * 2 + 1 < 5 && j_0 * 8 < 12) {
                                C_local_8_2[0] = C_local_8_2[0] + A[(i_0 * 2 + 1) * 3 + k] * B[k * 12 + j_0 * 8];
                            }
                            if (i_0 * 2 + 1 < 5 && j_0 * 8 + 1 < 12) {
                                C_local_8_2[1] = C_local_8_2[1] + A[(i_0 * 2 + 1) * 3 + k] * B[k * 12 + j_0 * 8 + 1];
                            }
                            if (i_0 * 2 + 1 < 5 && j_0 * 8 + 2 < 12) {
                                C_local_8_2[2] = C_local_8_2[2] + A[(i_0 * 2 + 1) * 3 + k] * B[k * 12 + j_0 * 8 + 2];
                            }
                            if (i_0 * 2 + 1 < 5 && j_0 * 8 + 3 < 12) {
                                C_local_8_2[3] = C_local_8_2[3] + A[(i_0 * 2 + 1) * 3 + k] * B[k * 12 + j_0 * 8 + 3];
                            }
                            if (i_0 * 2 + 1 < 5 && j_0 * 8 + 4 < 12) {
                                C_local_8_2[4] = C_local_8_2[4] + A[(i_0 * 2 + 1) * 3 + k] * B[k * 12 + j_0 * 8 + 4];
                            }
                            if (i_0 * 2 + 1 < 5 && j_0 * 8 + 5 < 12) {
                                C_local_8_2[5] = C_local_8_2[5] + A[(i_0 * 2 + 1) * 3 + k] * B[k * 12 + j_0 * 8 + 5];
                            }
                            if (i_0 * 2 + 1 < 5 && j_0 * 8 + 6 < 12) {
                                C_local_8_2[6] = C_local_8_2[6] + A[(i_0 * 2 + 1) * 3 + k] * B[k * 12 + j_0 * 8 + 6];
                            }
                            if (i_0 * 2 + 1 < 5 && j_0 * 8 + 7 < 12) {
                                C_local_8_2[7] = C_local_8_2[7] + A[(i_0 * 2 + 1) * 3 + k] * B[k * 12 + j_0 * 8 + 7];
                            }
                        }
                    }
                    // block C_write
                    if (i_0 * 2 < 5 && j_0 * 8 < 12 && j_0 * 8 + 7 < 12) {
                        tessel_f32x8_store(&C[i_0 * 2 * 12 + j_0 * 8], C_local_0_2);
                    } else {
                        if (i_0 * 2 < 5 && j_0 * 8 < 12) {
                            C[i_0 * 2 * 12 + j_0 * 8] = C_local_0_2[0];
                        }
                        if (i_0 * 2 < 5 && j_0 * 8 + 1 < 12) {
                            C[i_0 * 2 * 12 + j_0 * 8 + 1] = C_local_0_2[1];
                        }
                        if (i_0 * 2 < 5 && j_0 * 8 + 2 < 12) {
                            C[i_0 * 2 * 12 + j_0 * 8 + 2] = C_local_0_2[2];
                        }
                        if (i_0 * 2 < 5 && j_0 * 8 + 3 < 12) {
                            C[i_0 * 2 * 12 + j_0 * 8 + 3] = C_local_0_2[3];
                        }
                        if (i_0 * 2 < 5 && j_0 * 8 + 4 < 12) {
                            C[i_0 * 2 * 12 + j_0 * 8 + 4] = C_local_0_2[4];
                        }
                        if (i_0 * 2 < 5 && j_0 * 8 + 5 < 12) {
                            C[i_0 * 2 * 12 + j_0 * 8 + 5] = C_local_0_2[5];
                        }
                        if (i_0 * 2 < 5 && j_0 * 8 + 6 < 12) {
                            C[i_0 * 2 * 12 + j_0 * 8 + 6] = C_local_0_2[6];
                        }
                        if (i_0 * 2 < 5 && j_0 * 8 + 7 < 12) {
                            C[i_0 * 2 * 12 + j_0 * 8 + 7] = C_local_0_2[7];
                        }
                    }
                    // block C_write
                    if (i_0 * 2 + 1 < 5 && j_0 * 8 < 12 && j_0 * 8 + 7 < 12) {
                        tessel_f32x8_store(&C[(i_0 * 2 + 1) * 12 + j_0 * 8], C_local_8_2);
                    } else {
                        if (i_0 * 2 + 1 < 5 && j_0 * 8 < 12) {
                            C[(i_0 * 2 + 1) * 12 + j_0 * 8] = C_local_8_2[0];
                        }
                        if (i_0 * 2 + 1 < 5 && j_0 * 8 + 1 < 12) {
                            C[(i_0 * 2 + 1) * 12 + j_0 * 8 + 1] = C_local_8_2[1];
                        }
                        if (i_0 * 2 + 1 < 5 && j_0 * 8 + 2 < 12) {
                            C[(i_0 * 2 + 1) * 12 + j_0 * 8 + 2] = C_local_8_2[2];
                        }
                        if (i_0 * 2 + 1 < 5 && j_0 * 8 + 3 < 12) {
                            C[(i_0 * 2 + 1) * 12 + j_0 * 8 + 3] = C_local_8_2[3];
                        }
                        if (i_0 * 2 + 1 < 5 && j_0 * 8 + 4 < 12) {
                            C[(i_0 * 2 + 1) * 12 + j_0 * 8 + 4] = C_local_8_2[4];
                        }
                        if (i_0 * 2 + 1 < 5 && j_0 * 8 + 5 < 12) {
                            C[(i_0 * 2 + 1) * 12 + j_0 * 8 + 5] = C_local_8_2[5];
                        }
                        if (i_0 * 2 + 1 < 5 && j_0 * 8 + 6 < 12) {
                            C[(i_0 * 2 + 1) * 12 + j_0 * 8 + 6] = C_local_8_2[6];
                        }
                        if (i_0 * 2 + 1 < 5 && j_0 * 8 + 7 < 12) {
                            C[(i_0 * 2 + 1) * 12 + j_0 * 8 + 7] = C_local_8_2[7];
                        }
                    }
                }
            }
        }
    }
    return 0;
}

int32_t tessel_entry(void** args) {
    return matmul_register_tile((const float*)args[0], (const float*)args[1], (float*)args[2]);
}

/* the cache state a model leaves a kernel in (tessel_time_in_model) */
static void tessel_sweep(volatile char* p, int64_t n) {  /* every line written, by all threads */
    #pragma omp parallel for num_threads(1) schedule(static)
    for (int64_t i = 0; i < n; i += 64) p[i] += 1;
}

/* read and written by the threads: each its contiguous share of every one of `planes` equal
   parts (1: of the whole buffer; a blocked tensor's channel blocks: a band of rows of each) */
static void tessel_produce(void* p, int64_t n, int64_t planes) {
    volatile char* c = (volatile char*)p;
    int64_t plane = n / planes;
    #pragma omp parallel for num_threads(1) schedule(static)
    for (int32_t t = 0; t < 1; ++t) {
        int64_t lo = plane * t / 1, hi = plane * (t + 1) / 1;
        for (int64_t k = 0; k < planes; ++k) {
            for (int64_t i = lo - lo % 64; i < hi; i += 64) c[k * plane + i] = c[k * plane + i];
        }
    }
}

/* write back and drop the lines of [p, p + n) from every cache level: read next from memory */
static void tessel_evict(const void* p, int64_t n) {
    const char* c = (const char*)p;
#if defined(__x86_64__) || defined(__i386__)
    for (int64_t i = 0; i < n; i += 64) __builtin_ia32_clflush(c + i);
    __builtin_ia32_mfence();
#elif defined(__aarch64__)
    for (int64_t i = 0; i < n; i += 64) __asm__ volatile("dc civac, %0" : : "r"(c + i) : "memory");
    __asm__ volatile("dsb ish" : : : "memory");
#else
    (void)c; (void)n;  /* the sweep alone evicts here */
#endif
}

int32_t tessel_time(void** args, int32_t number, int32_t repeat, double* out_secs) {
    int32_t status = tessel_entry(args);  // warm-up
    for (int32_t r = 0; status == 0 && r < repeat; ++r) {
        struct timespec start, stop;
        double secs = 0.0;
        clock_gettime(CLOCK_MONOTONIC, &start);
        for (int32_t n = 0; status == 0 && n < number; ++n) {
            status = tessel_entry(args);
        }
        clock_gettime(CLOCK_MONOTONIC, &stop);
        secs += (double)(stop.tv_sec - start.tv_sec)
                + 1e-9 * (double)(stop.tv_nsec - start.tv_nsec);
        out_secs[r] = secs / number;
    }
    return status;
}

int32_t tessel_time_in_model(void** args, int32_t number, int32_t repeat, double* out_secs,
                             int64_t sweep_bytes) {
    int32_t status = tessel_entry(args);  // warm-up
    volatile char* sweep = (volatile char*)calloc((size_t)sweep_bytes + 64, 1);
    if (sweep == NULL && status == 0) {
        status = TESSEL_ALLOC_FAILED;
    }
    for (int32_t r = 0; status == 0 && r < repeat; ++r) {
        struct timespec start, stop;
        double secs = 0.0;
        for (int32_t n = 0; status == 0 && n < number; ++n) {
            tessel_sweep(sweep, sweep_bytes);
            tessel_produce(args[0], 60, 1);
            tessel_produce(args[1], 144, 1);
            tessel_evict(args[2], 240);
            clock_gettime(CLOCK_MONOTONIC, &start);
            status = tessel_entry(args);
            clock_gettime(CLOCK_MONOTONIC, &stop);
            secs += (double)(stop.tv_sec - start.tv_sec)
                    + 1e-9 * (double)(stop.tv_nsec - start.tv_nsec);
        }
        out_secs[r] = secs / number;
    }
    free((void*)sweep);
    return status;
}
