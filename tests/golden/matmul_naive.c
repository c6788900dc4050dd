// tessel kernel matmul
// inputs: A float32[3, 4], B float32[4, 2]
// outputs: C float32[3, 2]

#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <time.h>

#define TESSEL_ALLOC_FAILED 1

static int32_t matmul(const float* restrict A, const float* restrict B, float* restrict C) {
    for (int32_t i = 0; i < 3; ++i) {
        for (int32_t j = 0; j < 2; ++j) {
            for (int32_t k = 0; k < 4; ++k) {
                // block C
                if (k == 0) {
                    C[i * 2 + j] = 0.0f;
                }
                C[i * 2 + j] = C[i * 2 + j] + A[i * 4 + k] * B[k * 2 + j];
            }
        }
    }
    return 0;
}

int32_t tessel_entry(void** args) {
    return matmul((const float*)args[0], (const float*)args[1], (float*)args[2]);
}

/* write back and drop the cache lines of [p, p + n) from every level of this core's caches
   (and the other cores'): the next read comes from memory */
static void tessel_evict(const void* p, int64_t n) {
    const char* c = (const char*)p;
#if defined(__x86_64__) || defined(__i386__)
    for (int64_t i = 0; i < n; i += 64) __builtin_ia32_clflush(c + i);
    __builtin_ia32_mfence();
#elif defined(__aarch64__)
    for (int64_t i = 0; i < n; i += 64) __asm__ volatile("dc civac, %0" : : "r"(c + i) : "memory");
    __asm__ volatile("dsb ish" : : : "memory");
#else
    (void)c; (void)n;  /* no portable eviction: tessel_time_cold times warm calls here */
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

int32_t tessel_time_cold(void** args, int32_t number, int32_t repeat, double* out_secs) {
    int32_t status = tessel_entry(args);  // warm-up
    for (int32_t r = 0; status == 0 && r < repeat; ++r) {
        struct timespec start, stop;
        double secs = 0.0;
        for (int32_t n = 0; status == 0 && n < number; ++n) {
            tessel_evict(args[0], 48);
            tessel_evict(args[1], 32);
            tessel_evict(args[2], 24);
            clock_gettime(CLOCK_MONOTONIC, &start);
            status = tessel_entry(args);
            clock_gettime(CLOCK_MONOTONIC, &stop);
            secs += (double)(stop.tv_sec - start.tv_sec)
                    + 1e-9 * (double)(stop.tv_nsec - start.tv_nsec);
        }
        out_secs[r] = secs / number;
    }
    return status;
}
