// tessel kernel matmul
// inputs: A float32[3, 4], B float32[4, 2]
// outputs: C float32[3, 2]

#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <time.h>

#define TESSEL_ALLOC_FAILED 1

#ifndef TESSEL_THREADS  /* a library of many kernels sets its own: tessel.graph.export */
#define TESSEL_THREADS 1
#endif

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
            tessel_produce(args[0], 48, 1);
            tessel_produce(args[1], 32, 1);
            tessel_evict(args[2], 24);
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
