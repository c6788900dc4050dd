/* Run a model exported by `tessel export` from C, with nothing of tessel but its header.
 *
 *     tessel export resnet18.onnx --db tessel.db -o resnet18.so
 *     tessel export --header > tessel_runtime.h
 *     cc -O2 -I. examples/deploy/run_model.c -o run_model -ldl
 *     ./run_model resnet18.so image.bin --out logits_ --repeat 20
 *
 * Each input is read from a raw file of its bytes (C order, the dtype tessel_input_info
 * names); output k is written to <prefix>k.bin. With --repeat N it times N more runs and
 * prints their median milliseconds. Exit status 0 on success, 1 with one line on stderr
 * otherwise.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tessel_runtime.h"

static int fail(const char* what, const char* detail) {
    fprintf(stderr, "run_model: %s%s%s\n", what, detail ? ": " : "", detail ? detail : "");
    return 1;
}

static int compare(const void* a, const void* b) {
    double x = *(const double*)a, y = *(const double*)b;
    return (x > y) - (x < y);
}

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

int main(int argc, char** argv) {
    if (argc < 2) {
        return fail("usage: run_model MODEL.so INPUT.bin... [--out PREFIX] [--repeat N] "
                    "[--threads N]", NULL);
    }
    const char* prefix = "output_";
    int repeat = 0, threads = 0, n_files = 0;
    const char* files[64];
    for (int a = 2; a < argc; ++a) {
        if (strcmp(argv[a], "--out") == 0 && a + 1 < argc) {
            prefix = argv[++a];
        } else if (strcmp(argv[a], "--repeat") == 0 && a + 1 < argc) {
            repeat = atoi(argv[++a]);
        } else if (strcmp(argv[a], "--threads") == 0 && a + 1 < argc) {
            threads = atoi(argv[++a]);
        } else if (n_files < 64) {
            files[n_files++] = argv[a];
        }
    }
    char error[512];
    tessel_model* model = NULL;
    if (tessel_open(argv[1], &model, error, sizeof error) != TESSEL_OK) {
        return fail(error, NULL);
    }
    if (threads > 0 && tessel_set_threads(model, threads) != TESSEL_OK) {
        return fail(tessel_error(model), NULL);
    }
    int n_in = tessel_input_count(model), n_out = tessel_output_count(model);
    if (n_files != n_in) {
        fprintf(stderr, "run_model: the model takes %d inputs, %d files given\n", n_in, n_files);
        tessel_close(model);
        return 1;
    }
    const void* inputs[64] = {0};
    void* outputs[64] = {0};
    int status = n_out > 64 ? fail("more than 64 outputs", NULL) : 0;
    for (int i = 0; i < n_in && status == 0; ++i) {
        tessel_tensor_info info;
        tessel_input_info(model, i, &info);
        void* data = malloc((size_t)info.nbytes);
        FILE* file = fopen(files[i], "rb");
        size_t got = file && data ? fread(data, 1, (size_t)info.nbytes, file) : 0;
        if (file) {
            fclose(file);
        }
        if (got != (size_t)info.nbytes) {
            fprintf(stderr, "run_model: %s: expected %lld bytes for input %s (%s)\n", files[i],
                    (long long)info.nbytes, info.name, info.dtype);
            status = 1;
        }
        inputs[i] = data;
    }
    for (int k = 0; k < n_out && status == 0; ++k) {
        tessel_tensor_info info;
        tessel_output_info(model, k, &info);
        outputs[k] = malloc((size_t)info.nbytes);
        printf("output %d: %s %s [", k, info.name, info.dtype);
        for (int d = 0; d < info.rank; ++d) {
            printf("%s%lld", d ? ", " : "", (long long)info.shape[d]);
        }
        printf("]\n");
    }
    if (status == 0 && tessel_run(model, inputs, outputs) != TESSEL_OK) {
        status = fail(tessel_error(model), NULL);
    }
    for (int k = 0; k < n_out && status == 0; ++k) {
        tessel_tensor_info info;
        tessel_output_info(model, k, &info);
        char name[4096];
        snprintf(name, sizeof name, "%s%d.bin", prefix, k);
        FILE* file = fopen(name, "wb");
        if (file == NULL || fwrite(outputs[k], 1, (size_t)info.nbytes, file) !=
                (size_t)info.nbytes) {
            status = fail("cannot write", name);
        }
        if (file) {
            fclose(file);
        }
    }
    if (status == 0 && repeat > 0) {
        double* times = (double*)malloc(sizeof(double) * (size_t)repeat);
        for (int r = 0; r < repeat && status == 0 && times; ++r) {
            double start = now();
            if (tessel_run(model, inputs, outputs) != TESSEL_OK) {
                status = fail(tessel_error(model), NULL);
            }
            times[r] = now() - start;
        }
        if (status == 0 && times) {
            qsort(times, (size_t)repeat, sizeof(double), compare);
            printf("median %.3f ms over %d runs, %d threads\n", 1e3 * times[repeat / 2], repeat,
                   tessel_get_threads(model));
        }
        free(times);
    }
    for (int i = 0; i < n_in; ++i) {
        free((void*)inputs[i]);
    }
    for (int k = 0; k < n_out && k < 64; ++k) {
        free(outputs[k]);
    }
    tessel_close(model);
    return status;
}
