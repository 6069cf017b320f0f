/* Calls the GMM gradient that export_gmm.py exported (gmm.so, gmm.h), on the data it
 * wrote, compares with what adkit computed in-process and times the call.
 *
 *   ./main BUILD_FOLDER [THREADS]
 *
 * No Python is involved: the program links only gmm.so (and what gmm.so links). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "gmm.h"

#define N_INPUTS 4
#define N_OUTPUTS 4

static const int64_t input_sizes[N_INPUTS] = {GMM_GRAD_X0_SIZE, GMM_GRAD_X1_SIZE,
                                              GMM_GRAD_X2_SIZE, GMM_GRAD_X3_SIZE};
static const int64_t output_sizes[N_OUTPUTS] = {GMM_GRAD_Y0_SIZE, GMM_GRAD_Y1_SIZE,
                                                GMM_GRAD_Y2_SIZE, GMM_GRAD_Y3_SIZE};
static const char *output_names[N_OUTPUTS] = {"d alphas", "d means", "d icf", "objective"};

/* Read `count` doubles from `file` into new arrays, one per size. */
static double **read_arrays(const char *folder, const char *name, const int64_t *sizes,
                            int count) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", folder, name);
    FILE *f = fopen(path, "rb");
    if (!f) {
        perror(path);
        exit(2);
    }
    double **arrays = malloc(count * sizeof *arrays);
    for (int k = 0; k < count; k++) {
        arrays[k] = malloc(sizes[k] * sizeof(double));
        if (fread(arrays[k], sizeof(double), sizes[k], f) != (size_t)sizes[k]) {
            fprintf(stderr, "%s: too short\n", path);
            exit(2);
        }
    }
    fclose(f);
    return arrays;
}

static double seconds(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + 1e-9 * t.tv_nsec;
}

int main(int argc, char **argv) {
    const char *folder = argc > 1 ? argv[1] : "build";
    int64_t threads = gmm_set_threads(argc > 2 ? atoi(argv[2]) : 1);
    double **in = read_arrays(folder, "inputs.bin", input_sizes, N_INPUTS);
    double **want = read_arrays(folder, "expected.bin", output_sizes, N_OUTPUTS);
    double *out[N_OUTPUTS];
    for (int k = 0; k < N_OUTPUTS; k++)
        out[k] = malloc(output_sizes[k] * sizeof(double));
    void *work = malloc(gmm_grad_work_bytes()); /* reused by every call */

    int64_t code = gmm_grad(in[0], in[1], in[2], in[3], out[0], out[1], out[2], out[3], work);
    if (code != 0) {
        fprintf(stderr, "gmm_grad returned %lld\n", (long long)code);
        return 1;
    }
    double worst = 0.0;
    for (int k = 0; k < N_OUTPUTS; k++) {
        double scale = 1.0, diff = 0.0;
        for (int64_t i = 0; i < output_sizes[k]; i++) {
            scale = fmax(scale, fabs(want[k][i]));
            diff = fmax(diff, fabs(out[k][i] - want[k][i]));
        }
        printf("%-10s %6lld values, largest difference from adkit in-process: %.3g "
               "(relative %.3g)\n", output_names[k], (long long)output_sizes[k], diff,
               diff / scale);
        worst = fmax(worst, diff / scale);
    }
    printf("objective = %.17g\n", out[3][0]);

    double best = 1e30;
    for (int round = 0; round < 20; round++) {
        double start = seconds();
        gmm_grad(in[0], in[1], in[2], in[3], out[0], out[1], out[2], out[3], work);
        best = fmin(best, seconds() - start);
    }
    printf("gmm_grad: %.3f ms per call (best of 20, %lld thread%s; built for CPU %s)\n",
           best * 1e3, (long long)threads, threads == 1 ? "" : "s", GMM_TARGET_CPU);
    printf(worst <= 1e-12 ? "OK: within 1e-12 of adkit\n" : "MISMATCH\n");
    return worst <= 1e-12 ? 0 : 1;
}
