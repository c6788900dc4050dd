// tessel kernel matmul_register_tile
// inputs: A float32[5, 3], B float32[3, 12]
// outputs: C float32[5, 12]

#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <time.h>

#define TESSEL_ALLOC_FAILED 1

typedef float tessel_f32x8 __attribute__((vector_size(32)));
typedef float tessel_f32x8_u __attribute__((vector_size(32), aligned(4), may_alias));
static inline tessel_f32x8 tessel_f32x8_load(const float* p) { return *(const tessel_f32x8_u*)p; }
static inline void tessel_f32x8_store(float* p, tessel_f32x8 v) { *(tessel_f32x8_u*)p = v; }
static inline tessel_f32x8 tessel_f32x8_splat(float x) { return (tessel_f32x8){x, x, x, x, x, x, x, x}; }

static int32_t matmul_register_tile(
        const float* restrict A,
        const float* restrict B,
        float* restrict C) {
    #pragma omp parallel for num_threads(1) schedule(static)
    for (int32_t i_0 = 0; i_0 < 3; ++i_0) {
        for (int32_t j_0 = 0; j_0 < 2; ++j_0) {
            // block C_tile
            const int32_t vi0 = i_0;
            const int32_t vj0 = j_0;
            tessel_f32x8 C_local_0 = {0};
            tessel_f32x8 C_local_8 = {0};
            {
                const int32_t i_3 = 0;
                {
                    const int32_t j_3 = 0;
                    // block C_init
                    const int32_t vi3 = i_3;
                    const int32_t vj3 = j_3;
                    C_local_0 = tessel_f32x8_splat(0.0f);
                }
            }
            {
                const int32_t i_3 = 1;
                {
                    const int32_t j_3 = 0;
                    // block C_init
                    const int32_t vi3 = i_3;
                    const int32_t vj3 = j_3;
                    C_local_8 = tessel_f32x8_splat(0.0f);
                }
            }
            for (int32_t k = 0; k < 3; ++k) {
                {
                    const int32_t i_3_1 = 0;
                    {
                        const int32_t j_3_1 = 0;
                        // block C_update
                        if (vi0 * 2 + i_3_1 < 5 && vj0 * 8 + j_3_1 < 12 && vj0 * 8 + (j_3_1 + 7) < 12) {
                            const int32_t vi3_1 = i_3_1;
                            const int32_t vj3_1 = j_3_1;
                            const int32_t vk = k;
                            C_local_0 = (C_local_0 + (tessel_f32x8_splat(A[(vi0 * 2 + vi3_1) * 3 + vk]) * tessel_f32x8_load(&B[vk * 12 + vj0 * 8 + vj3_1])));
                        } else {
                            {
                                // block C_update
                                const int32_t vi3_1 = i_3_1;
                                const int32_t vj3_1 = j_3_1;
                                const int32_t vk = k;
                                if (vi0 * 2 + i_3_1 < 5 && vj0 * 8 + j_3_1 < 12) {
                                    C_local_0[0] = C_local_0[0] + A[(vi0 * 2 + vi3_1) * 3 + vk] * B[vk * 12 + vj0 * 8 + vj3_1];
                                }
                            }
                            {
                                // block C_update
                                const int32_t vi3_1 = i_3_1;
                                const int32_t vj3_1 = j_3_1 + 1;
                                const int32_t vk = k;
                                if (vi0 * 2 + i_3_1 < 5 && vj0 * 8 + (j_3_1 + 1) < 12) {
                                    C_local_0[1] = C_local_0[1] + A[(vi0 * 2 + vi3_1) * 3 + vk] * B[vk * 12 + vj0 * 8 + vj3_1];
                                }
                            }
                            {
                                // block C_update
                                const int32_t vi3_1 = i_3_1;
                                const int32_t vj3_1 = j_3_1 + 2;
                                const int32_t vk = k;
                                if (vi0 * 2 + i_3_1 < 5 && vj0 * 8 + (j_3_1 + 2) < 12) {
                                    C_local_0[2] = C_local_0[2] + A[(vi0 * 2 + vi3_1) * 3 + vk] * B[vk * 12 + vj0 * 8 + vj3_1];
                                }
                            }
                            {
                                // block C_update
                                const int32_t vi3_1 = i_3_1;
                                const int32_t vj3_1 = j_3_1 + 3;
                                const int32_t vk = k;
                                if (vi0 * 2 + i_3_1 < 5 && vj0 * 8 + (j_3_1 + 3) < 12) {
                                    C_local_0[3] = C_local_0[3] + A[(vi0 * 2 + vi3_1) * 3 + vk] * B[vk * 12 + vj0 * 8 + vj3_1];
                                }
                            }
                            {
                                // block C_update
                                const int32_t vi3_1 = i_3_1;
                                const int32_t vj3_1 = j_3_1 + 4;
                                const int32_t vk = k;
                                if (vi0 * 2 + i_3_1 < 5 && vj0 * 8 + (j_3_1 + 4) < 12) {
                                    C_local_0[4] = C_local_0[4] + A[(vi0 * 2 + vi3_1) * 3 + vk] * B[vk * 12 + vj0 * 8 + vj3_1];
                                }
                            }
                            {
                                // block C_update
                                const int32_t vi3_1 = i_3_1;
                                const int32_t vj3_1 = j_3_1 + 5;
                                const int32_t vk = k;
                                if (vi0 * 2 + i_3_1 < 5 && vj0 * 8 + (j_3_1 + 5) < 12) {
                                    C_local_0[5] = C_local_0[5] + A[(vi0 * 2 + vi3_1) * 3 + vk] * B[vk * 12 + vj0 * 8 + vj3_1];
                                }
                            }
                            {
                                // block C_update
                                const int32_t vi3_1 = i_3_1;
                                const int32_t vj3_1 = j_3_1 + 6;
                                const int32_t vk = k;
                                if (vi0 * 2 + i_3_1 < 5 && vj0 * 8 + (j_3_1 + 6) < 12) {
                                    C_local_0[6] = C_local_0[6] + A[(vi0 * 2 + vi3_1) * 3 + vk] * B[vk * 12 + vj0 * 8 + vj3_1];
                                }
                            }
                            {
                                // block C_update
                                const int32_t vi3_1 = i_3_1;
                                const int32_t vj3_1 = j_3_1 + 7;
                                const int32_t vk = k;
                                if (vi0 * 2 + i_3_1 < 5 && vj0 * 8 + (j_3_1 + 7) < 12) {
                                    C_local_0[7] = C_local_0[7] + A[(vi0 * 2 + vi3_1) * 3 + vk] * B[vk * 12 + vj0 * 8 + vj3_1];
                                }
                            }
                        }
                    }
                }
                {
                    const int32_t i_3_1 = 1;
                    {
                        const int32_t j_3_1 = 0;
                        // block C_update
                        if (vi0 * 2 + i_3_1 < 5 && vj0 * 8 + j_3_1 < 12 && vj0 * 8 + (j_3_1 + 7) < 12) {
                            const int32_t vi3_1 = i_3_1;
                            const int32_t vj3_1 = j_3_1;
                            const int32_t vk = k;
                            C_local_8 = (C_local_8 + (tessel_f32x8_splat(A[(vi0 * 2 + vi3_1) * 3 + vk]) * tessel_f32x8_load(&B[vk * 12 + vj0 * 8 + vj3_1])));
                        } else {
                            {
                                // block C_update
                                const int32_t vi3_1 = i_3_1;
                                const int32_t vj3_1 = j_3_1;
                                const int32_t vk = k;
                                if (vi0 * 2 + i_3_1 < 5 && vj0 * 8 + j_3_1 < 12) {
                                    C_local_8[0] = C_local_8[0] + A[(vi0 * 2 + vi3_1) * 3 + vk] * B[vk * 12 + vj0 * 8 + vj3_1];
                                }
                            }
                            {
                                // block C_update
                                const int32_t vi3_1 = i_3_1;
                                const int32_t vj3_1 = j_3_1 + 1;
                                const int32_t vk = k;
                                if (vi0 * 2 + i_3_1 < 5 && vj0 * 8 + (j_3_1 + 1) < 12) {
                                    C_local_8[1] = C_local_8[1] + A[(vi0 * 2 + vi3_1) * 3 + vk] * B[vk * 12 + vj0 * 8 + vj3_1];
                                }
                            }
                            {
                                // block C_update
                                const int32_t vi3_1 = i_3_1;
                                const int32_t vj3_1 = j_3_1 + 2;
                                const int32_t vk = k;
                                if (vi0 * 2 + i_3_1 < 5 && vj0 * 8 + (j_3_1 + 2) < 12) {
                                    C_local_8[2] = C_local_8[2] + A[(vi0 * 2 + vi3_1) * 3 + vk] * B[vk * 12 + vj0 * 8 + vj3_1];
                                }
                            }
                            {
                                // block C_update
                                const int32_t vi3_1 = i_3_1;
                                const int32_t vj3_1 = j_3_1 + 3;
                                const int32_t vk = k;
                                if (vi0 * 2 + i_3_1 < 5 && vj0 * 8 + (j_3_1 + 3) < 12) {
                                    C_local_8[3] = C_local_8[3] + A[(vi0 * 2 + vi3_1) * 3 + vk] * B[vk * 12 + vj0 * 8 + vj3_1];
                                }
                            }
                            {
                                // block C_update
                                const int32_t vi3_1 = i_3_1;
                                const int32_t vj3_1 = j_3_1 + 4;
                                const int32_t vk = k;
                                if (vi0 * 2 + i_3_1 < 5 && vj0 * 8 + (j_3_1 + 4) < 12) {
                                    C_local_8[4] = C_local_8[4] + A[(vi0 * 2 + vi3_1) * 3 + vk] * B[vk * 12 + vj0 * 8 + vj3_1];
                                }
                            }
                            {
                                // block C_update
                                const int32_t vi3_1 = i_3_1;
                                const int32_t vj3_1 = j_3_1 + 5;
                                const int32_t vk = k;
                                if (vi0 * 2 + i_3_1 < 5 && vj0 * 8 + (j_3_1 + 5) < 12) {
                                    C_local_8[5] = C_local_8[5] + A[(vi0 * 2 + vi3_1) * 3 + vk] * B[vk * 12 + vj0 * 8 + vj3_1];
                                }
                            }
                            {
                                // block C_update
                                const int32_t vi3_1 = i_3_1;
                                const int32_t vj3_1 = j_3_1 + 6;
                                const int32_t vk = k;
                                if (vi0 * 2 + i_3_1 < 5 && vj0 * 8 + (j_3_1 + 6) < 12) {
                                    C_local_8[6] = C_local_8[6] + A[(vi0 * 2 + vi3_1) * 3 + vk] * B[vk * 12 + vj0 * 8 + vj3_1];
                                }
                            }
                            {
                                // block C_update
                                const int32_t vi3_1 = i_3_1;
                                const int32_t vj3_1 = j_3_1 + 7;
                                const int32_t vk = k;
                                if (vi0 * 2 + i_3_1 < 5 && vj0 * 8 + (j_3_1 + 7) < 12) {
                                    C_local_8[7] = C_local_8[7] + A[(vi0 * 2 + vi3_1) * 3 + vk] * B[vk * 12 + vj0 * 8 + vj3_1];
                                }
                            }
                        }
                    }
                }
            }
            {
                const int32_t i_3_2 = 0;
                {
                    const int32_t j_3_2 = 0;
                    // block C_write
                    if (vi0 * 2 + i_3_2 < 5 && vj0 * 8 + j_3_2 < 12 && vj0 * 8 + (j_3_2 + 7) < 12) {
                        const int32_t vi3_2 = i_3_2;
                        const int32_t vj3_2 = j_3_2;
                        tessel_f32x8_store(&C[(vi0 * 2 + vi3_2) * 12 + vj0 * 8 + vj3_2], C_local_0);
                    } else {
                        {
                            // block C_write
                            const int32_t vi3_2 = i_3_2;
                            const int32_t vj3_2 = j_3_2;
                            if (vi0 * 2 + i_3_2 < 5 && vj0 * 8 + j_3_2 < 12) {
                                C[(vi0 * 2 + vi3_2) * 12 + vj0 * 8 + vj3_2] = C_local_0[0];
                            }
                        }
                        {
                            // block C_write
                            const int32_t vi3_2 = i_3_2;
                            const int32_t vj3_2 = j_3_2 + 1;
                            if (vi0 * 2 + i_3_2 < 5 && vj0 * 8 + (j_3_2 + 1) < 12) {
                                C[(vi0 * 2 + vi3_2) * 12 + vj0 * 8 + vj3_2] = C_local_0[1];
                            }
                        }
                        {
                            // block C_write
                            const int32_t vi3_2 = i_3_2;
                            const int32_t vj3_2 = j_3_2 + 2;
                            if (vi0 * 2 + i_3_2 < 5 && vj0 * 8 + (j_3_2 + 2) < 12) {
                                C[(vi0 * 2 + vi3_2) * 12 + vj0 * 8 + vj3_2] = C_local_0[2];
                            }
                        }
                        {
                            // block C_write
                            const int32_t vi3_2 = i_3_2;
                            const int32_t vj3_2 = j_3_2 + 3;
                            if (vi0 * 2 + i_3_2 < 5 && vj0 * 8 + (j_3_2 + 3) < 12) {
                                C[(vi0 * 2 + vi3_2) * 12 + vj0 * 8 + vj3_2] = C_local_0[3];
                            }
                        }
                        {
                            // block C_write
                            const int32_t vi3_2 = i_3_2;
                            const int32_t vj3_2 = j_3_2 + 4;
                            if (vi0 * 2 + i_3_2 < 5 && vj0 * 8 + (j_3_2 + 4) < 12) {
                                C[(vi0 * 2 + vi3_2) * 12 + vj0 * 8 + vj3_2] = C_local_0[4];
                            }
                        }
                        {
                            // block C_write
                            const int32_t vi3_2 = i_3_2;
                            const int32_t vj3_2 = j_3_2 + 5;
                            if (vi0 * 2 + i_3_2 < 5 && vj0 * 8 + (j_3_2 + 5) < 12) {
                                C[(vi0 * 2 + vi3_2) * 12 + vj0 * 8 + vj3_2] = C_local_0[5];
                            }
                        }
                        {
                            // block C_write
                            const int32_t vi3_2 = i_3_2;
                            const int32_t vj3_2 = j_3_2 + 6;
                            if (vi0 * 2 + i_3_2 < 5 && vj0 * 8 + (j_3_2 + 6) < 12) {
                                C[(vi0 * 2 + vi3_2) * 12 + vj0 * 8 + vj3_2] = C_local_0[6];
                            }
                        }
                        {
                            // block C_write
                            const int32_t vi3_2 = i_3_2;
                            const int32_t vj3_2 = j_3_2 + 7;
                            if (vi0 * 2 + i_3_2 < 5 && vj0 * 8 + (j_3_2 + 7) < 12) {
                                C[(vi0 * 2 + vi3_2) * 12 + vj0 * 8 + vj3_2] = C_local_0[7];
                            }
                        }
                    }
                }
            }
            {
                const int32_t i_3_2 = 1;
                {
                    const int32_t j_3_2 = 0;
                    // block C_write
                    if (vi0 * 2 + i_3_2 < 5 && vj0 * 8 + j_3_2 < 12 && vj0 * 8 + (j_3_2 + 7) < 12) {
                        const int32_t vi3_2 = i_3_2;
                        const int32_t vj3_2 = j_3_2;
                        tessel_f32x8_store(&C[(vi0 * 2 + vi3_2) * 12 + vj0 * 8 + vj3_2], C_local_8);
                    } else {
                        {
                            // block C_write
                            const int32_t vi3_2 = i_3_2;
                            const int32_t vj3_2 = j_3_2;
                            if (vi0 * 2 + i_3_2 < 5 && vj0 * 8 + j_3_2 < 12) {
                                C[(vi0 * 2 + vi3_2) * 12 + vj0 * 8 + vj3_2] = C_local_8[0];
                            }
                        }
                        {
                            // block C_write
                            const int32_t vi3_2 = i_3_2;
                            const int32_t vj3_2 = j_3_2 + 1;
                            if (vi0 * 2 + i_3_2 < 5 && vj0 * 8 + (j_3_2 + 1) < 12) {
                                C[(vi0 * 2 + vi3_2) * 12 + vj0 * 8 + vj3_2] = C_local_8[1];
                            }
                        }
                        {
                            // block C_write
                            const int32_t vi3_2 = i_3_2;
                            const int32_t vj3_2 = j_3_2 + 2;
                            if (vi0 * 2 + i_3_2 < 5 && vj0 * 8 + (j_3_2 + 2) < 12) {
                                C[(vi0 * 2 + vi3_2) * 12 + vj0 * 8 + vj3_2] = C_local_8[2];
                            }
                        }
                        {
                            // block C_write
                            const int32_t vi3_2 = i_3_2;
                            const int32_t vj3_2 = j_3_2 + 3;
                            if (vi0 * 2 + i_3_2 < 5 && vj0 * 8 + (j_3_2 + 3) < 12) {
                                C[(vi0 * 2 + vi3_2) * 12 + vj0 * 8 + vj3_2] = C_local_8[3];
                            }
                        }
                        {
                            // block C_write
                            const int32_t vi3_2 = i_3_2;
                            const int32_t vj3_2 = j_3_2 + 4;
                            if (vi0 * 2 + i_3_2 < 5 && vj0 * 8 + (j_3_2 + 4) < 12) {
                                C[(vi0 * 2 + vi3_2) * 12 + vj0 * 8 + vj3_2] = C_local_8[4];
                            }
                        }
                        {
                            // block C_write
                            const int32_t vi3_2 = i_3_2;
                            const int32_t vj3_2 = j_3_2 + 5;
                            if (vi0 * 2 + i_3_2 < 5 && vj0 * 8 + (j_3_2 + 5) < 12) {
                                C[(vi0 * 2 + vi3_2) * 12 + vj0 * 8 + vj3_2] = C_local_8[5];
                            }
                        }
                        {
                            // block C_write
                            const int32_t vi3_2 = i_3_2;
                            const int32_t vj3_2 = j_3_2 + 6;
                            if (vi0 * 2 + i_3_2 < 5 && vj0 * 8 + (j_3_2 + 6) < 12) {
                                C[(vi0 * 2 + vi3_2) * 12 + vj0 * 8 + vj3_2] = C_local_8[6];
                            }
                        }
                        {
                            // block C_write
                            const int32_t vi3_2 = i_3_2;
                            const int32_t vj3_2 = j_3_2 + 7;
                            if (vi0 * 2 + i_3_2 < 5 && vj0 * 8 + (j_3_2 + 7) < 12) {
                                C[(vi0 * 2 + vi3_2) * 12 + vj0 * 8 + vj3_2] = C_local_8[7];
                            }
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

int32_t tessel_time(void** args, int32_t number, int32_t repeat, double* out_secs) {
    int32_t status = tessel_entry(args);  // warm-up
    for (int32_t r = 0; status == 0 && r < repeat; ++r) {
        struct timespec start, stop;
        clock_gettime(CLOCK_MONOTONIC, &start);
        for (int32_t n = 0; status == 0 && n < number; ++n) {
            status = tessel_entry(args);
        }
        clock_gettime(CLOCK_MONOTONIC, &stop);
        const double secs = (double)(stop.tv_sec - start.tv_sec)
                            + 1e-9 * (double)(stop.tv_nsec - start.tv_nsec);
        out_secs[r] = secs / number;
    }
    return status;
}
