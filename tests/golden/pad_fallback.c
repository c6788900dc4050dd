// tessel kernel pad
// inputs: A float32[6]
// outputs: P float32[8]

#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <time.h>

#define TESSEL_ALLOC_FAILED 1

static int32_t pad(const float* restrict A, float* restrict P) {
    // loop i: a select branch may load A out of bounds; left to omp simd
    #pragma omp simd
    for (int32_t i = 0; i < 8; ++i) {
        // block P
        P[i] = (i >= 1 && i <= 6 ? A[i - 1] : 0.0f);
    }
    return 0;
}

int32_t tessel_entry(void** args) {
    return pad((const float*)args[0], (float*)args[1]);
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
