/* fma_peak.c: this core's single-precision FMA peak, for the roofline of
 * benches/infer/run.sh: 16 independent chains of 512-bit fused
 * multiply-adds (AVX-512F), best of 5 runs of 50M steps.
 * Build: cc -O2 -mavx512f fma_peak.c -o fma_peak. Prints GFLOP/s. */
#include <immintrin.h>
#include <stdio.h>
#include <time.h>

#define CHAINS(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9) X(10) X(11) X(12) X(13) X(14) X(15)
#define DECLARE(i) __m512 c##i = _mm512_set1_ps((float)i);
#define STEP(i) c##i = _mm512_fmadd_ps(c##i, a, b);
#define SUM(i) s = _mm512_add_ps(s, c##i);

int main(void) {
    const long steps = 50000000;
    double best = 0;
    float sink = 0;
    for (int run = 0; run < 5; run++) {
        CHAINS(DECLARE)
        __m512 a = _mm512_set1_ps(1.0000001f), b = _mm512_set1_ps(0.9999999f);
        struct timespec t0, t1;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        for (long k = 0; k < steps; k++) {
            CHAINS(STEP)
        }
        clock_gettime(CLOCK_MONOTONIC, &t1);
        __m512 s = _mm512_setzero_ps();
        CHAINS(SUM)
        sink += _mm512_reduce_add_ps(s);
        double secs = (t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) / 1e9;
        double gflops = 2.0 * 16 * 16 * steps / secs / 1e9;
        if (gflops > best) best = gflops;
    }
    printf("%.1f\n", best);
    return sink == 12345.0f;
}
