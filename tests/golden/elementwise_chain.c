// tessel kernel chain
// inputs: X float32[5]
// outputs: Y float32[5]

#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <time.h>

#define TESSEL_ALLOC_FAILED 1

static int32_t chain(const float* restrict X, float* restrict Y) {
    for (int32_t i = 0; i < 5; ++i) {
        // block Y
        Y[i] = (floorf(expf(X[i]) / 2.0f) > X[(i + 4) % 5] * (-1.5f) ? floorf(expf(X[i]) / 2.0f) : X[(i + 4) % 5] * (-1.5f));
    }
    return 0;
}

int32_t tessel_entry(void** args) {
    return chain((const float*)args[0], (float*)args[1]);
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
