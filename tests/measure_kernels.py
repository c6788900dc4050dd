"""Hand-written kernels for the measurement tests: B = 2 * A + 1 on 37 floats, done right, done
wrong, or crashing, hanging, failing to compile. Each exports tessel_entry and tessel_time like
generated code, so the builder and runners treat them as any candidate."""
from tessel import te
from tessel.measure import MeasureCandidate
from tessel.measure.builder import build_source, param_specs

N = 37

_TEMPLATE = """\
#define _POSIX_C_SOURCE 200809L
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

static int32_t affine(const float* restrict A, float* restrict B) {
%s
    return 0;
}

int32_t tessel_entry(void** args) { return affine((const float*)args[0], (float*)args[1]); }

int32_t tessel_time(void** args, int32_t number, int32_t repeat, double* out_secs) {
    int32_t status = tessel_entry(args);
    for (int32_t r = 0; status == 0 && r < repeat; ++r) {
        struct timespec start, stop;
        clock_gettime(CLOCK_MONOTONIC, &start);
        for (int32_t n = 0; status == 0 && n < number; ++n) status = tessel_entry(args);
        clock_gettime(CLOCK_MONOTONIC, &stop);
        out_secs[r] = ((double)(stop.tv_sec - start.tv_sec)
                       + 1e-9 * (double)(stop.tv_nsec - start.tv_nsec)) / number;
    }
    return status;
}
"""

_RIGHT = "    for (int i = 0; i < 37; ++i) B[i] = A[i] * 2.0f + 1.0f;"
BODIES = {
    "right": _RIGHT,
    "wrong": "    for (int i = 0; i < 37; ++i) B[i] = A[i] * 2.0f + (i == 20 ? 1.5f : 1.0f);",
    "nan": "    for (int i = 0; i < 37; ++i) B[i] = i == 3 ? NAN : A[i] * 2.0f + 1.0f;",
    "partial": "    for (int i = 0; i < 36; ++i) B[i] = A[i] * 2.0f + 1.0f;",
    "segfault": "    *(volatile int*)(uintptr_t)8 = 1;\n" + _RIGHT,
    "abort": '    fprintf(stderr, "kernel gives up\\n"); fflush(stderr); abort();',
    "hang": "    volatile int spin = 1; while (spin) {}\n" + _RIGHT,
    "status": "    return 7;",
    "syntax": "    for (int i = 0; i < 37; ++i) B[i] = A[i] * 2.0f + 1.0f  /* no ; */",
}


def workload():
    A = te.placeholder((N,), name="A")
    B = te.compute((N,), lambda i: A[i] * 2.0 + 1.0, name="B")
    return te.create_func([A, B], name="affine")


def kill_parent_once(marker: str) -> str:
    """A body that, the first time (no `marker` file yet), kills the process that started the
    measuring process (a Dask worker), then computes the right answer."""
    return (f'    if (access("{marker}", F_OK) != 0) {{\n'
            f'        close(open("{marker}", O_CREAT | O_WRONLY, 0644));\n'
            "        kill(getppid(), SIGKILL); sleep(30);\n"
            "    }\n" + _RIGHT)


def source(body: str) -> str:
    return _TEMPLATE % BODIES.get(body, body)


def candidate_and_build(body: str, target, cache_dir):
    """(MeasureCandidate, BuildResult) for a named body (see BODIES) or literal C statements."""
    func = workload()
    build = build_source(source(body), param_specs(func), target, cache_dir=cache_dir)
    return MeasureCandidate(func, func), build
