/* run_export.c: calls one function of a library `tfc build --emit lib`
 * wrote, as a C program does, for tests/library.rs and benches/infer.
 *
 * Built with the library's header forced in and the function named by
 * macros, e.g.
 *   cc -O2 -include out/mlp.h -DCALL=mlp_predict_b64 -DIN_ELEMS=MLP_PREDICT_B64_X_ELEMENTS \
 *      -DOUT_ELEMS=MLP_PREDICT_B64_OUT0_ELEMENTS -DARENA_BYTES=MLP_PREDICT_B64_ARENA_BYTES \
 *      run_export.c out/mlp.o -Ltarget/release -ltfc -lm -lpthread -ldl -Wl,--gc-sections
 * Usage: run_export IN.f32 OUT.f32 [CALLS]
 * reads IN_ELEMS little-endian floats, calls the function twice, writes its
 * OUT_ELEMS results; exits 4 if a call returned non-zero, 3 if a call
 * allocated memory (malloc and its
 * kin are counted here, in front of the C library's). With CALLS, it times
 * that many more calls and prints the median microseconds of one call. */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static size_t allocations;
extern void *__libc_malloc(size_t);
extern void *__libc_calloc(size_t, size_t);
extern void *__libc_realloc(void *, size_t);
extern void *__libc_memalign(size_t, size_t);
void *malloc(size_t n) { allocations++; return __libc_malloc(n); }
void *calloc(size_t n, size_t m) { allocations++; return __libc_calloc(n, m); }
void *realloc(void *p, size_t n) { allocations++; return __libc_realloc(p, n); }
void *memalign(size_t a, size_t n) { allocations++; return __libc_memalign(a, n); }
void *aligned_alloc(size_t a, size_t n) { allocations++; return __libc_memalign(a, n); }
int posix_memalign(void **p, size_t a, size_t n) {
    allocations++;
    *p = __libc_memalign(a, n);
    return *p ? 0 : 12;
}

static float in[IN_ELEMS], out[OUT_ELEMS];
static _Alignas(64) unsigned char arena[ARENA_BYTES];

static double now_us(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}

static int by_value(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: %s IN.f32 OUT.f32 [CALLS]\n", argv[0]);
        return 2;
    }
    FILE *f = fopen(argv[1], "rb");
    if (!f || fread(in, sizeof(float), IN_ELEMS, f) != IN_ELEMS) {
        fprintf(stderr, "cannot read %d floats from %s\n", IN_ELEMS, argv[1]);
        return 2;
    }
    fclose(f);
    size_t before = allocations;
    int status = CALL(in, out, arena) | CALL(in, out, arena);
    size_t made = allocations - before;
    if (status != 0) {
        fprintf(stderr, "the call returned %d\n", status);
        return 4;
    }
    f = fopen(argv[2], "wb");
    if (!f || fwrite(out, sizeof(float), OUT_ELEMS, f) != OUT_ELEMS || fclose(f) != 0) {
        fprintf(stderr, "cannot write %s\n", argv[2]);
        return 2;
    }
    if (made) {
        fprintf(stderr, "the calls allocated memory %zu times\n", made);
        return 3;
    }
    if (argc > 3) {
        int calls = atoi(argv[3]);
        double *times = __libc_malloc(sizeof(double) * (calls > 0 ? calls : 1));
        for (int i = 0; i < calls; i++) {
            double t = now_us();
            CALL(in, out, arena);
            times[i] = now_us() - t;
        }
        qsort(times, calls, sizeof(double), by_value);
        printf("%.3f\n", calls > 0 ? times[calls / 2] : 0.0);
    }
    return 0;
}
