/* One core's register-only peaks for the instructions tfc's low-precision
 * matrix products are built on: f32 FMA (vfmadd231ps), vdpbf16ps (bf16 pairs
 * into f32), vpdpbusd (u8 x s8 quadruples into s32, VNNI), and, when the CPU
 * and OS grant the AMX tile state, tdpbf16ps and tdpbusd on tiles that never
 * leave the registers.
 *
 * Build and run (see README.md):
 *   gcc -O2 -mavx512f -mavx512bf16 -mavx512vnni -mamx-tile -mamx-bf16 \
 *       -mamx-int8 -o /tmp/peak benches/lowp/peak.c && /tmp/peak
 *
 * Every figure counts 2 operations per multiply-add: one vfmadd231ps on 16
 * lanes = 32 FLOP, one vdpbf16ps = 16 lanes x 2 pairs = 64 FLOP, one
 * vpdpbusd = 16 lanes x 4 = 128 OP, one 16x16x32 tdpbf16ps = 16384 FLOP, one
 * 16x16x64 tdpbusd = 32768 OP. Each loop keeps enough independent
 * accumulators (24 zmm, or 4 C tiles) to cover the instruction's latency.
 */
#define _GNU_SOURCE
#include <immintrin.h>
#include <cpuid.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define ARCH_REQ_XCOMP_PERM 0x1023
#define XFEATURE_XTILEDATA 18

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

/* Keeps the accumulators alive without the compiler seeing through them. */
static volatile float sink_f;
static volatile int sink_i;

#define ITERS 20000000L

/* 24 independent chains of one instruction, ITERS times; returns seconds.
 * The operands a and b never change, so the loop is register-only. */
#define CHAINS(TYPE, ZERO, OP, A, B, SINK)                                   \
    do {                                                                     \
        TYPE c0 = ZERO, c1 = ZERO, c2 = ZERO, c3 = ZERO, c4 = ZERO;          \
        TYPE c5 = ZERO, c6 = ZERO, c7 = ZERO, c8 = ZERO, c9 = ZERO;          \
        TYPE c10 = ZERO, c11 = ZERO, c12 = ZERO, c13 = ZERO, c14 = ZERO;     \
        TYPE c15 = ZERO, c16 = ZERO, c17 = ZERO, c18 = ZERO, c19 = ZERO;     \
        TYPE c20 = ZERO, c21 = ZERO, c22 = ZERO, c23 = ZERO;                 \
        /* Opaque to the compiler, so it cannot merge the equal chains. */   \
        __asm__ volatile("" : "+v"(c0), "+v"(c1), "+v"(c2), "+v"(c3),        \
                         "+v"(c4), "+v"(c5), "+v"(c6), "+v"(c7));            \
        __asm__ volatile("" : "+v"(c8), "+v"(c9), "+v"(c10), "+v"(c11),      \
                         "+v"(c12), "+v"(c13), "+v"(c14), "+v"(c15));        \
        __asm__ volatile("" : "+v"(c16), "+v"(c17), "+v"(c18), "+v"(c19),    \
                         "+v"(c20), "+v"(c21), "+v"(c22), "+v"(c23));        \
        for (long i = 0; i < ITERS; i++) {                                   \
            c0 = OP(c0, A, B); c1 = OP(c1, A, B); c2 = OP(c2, A, B);         \
            c3 = OP(c3, A, B); c4 = OP(c4, A, B); c5 = OP(c5, A, B);         \
            c6 = OP(c6, A, B); c7 = OP(c7, A, B); c8 = OP(c8, A, B);         \
            c9 = OP(c9, A, B); c10 = OP(c10, A, B); c11 = OP(c11, A, B);     \
            c12 = OP(c12, A, B); c13 = OP(c13, A, B); c14 = OP(c14, A, B);   \
            c15 = OP(c15, A, B); c16 = OP(c16, A, B); c17 = OP(c17, A, B);   \
            c18 = OP(c18, A, B); c19 = OP(c19, A, B); c20 = OP(c20, A, B);   \
            c21 = OP(c21, A, B); c22 = OP(c22, A, B); c23 = OP(c23, A, B);   \
            __asm__ volatile("" : "+v"(A), "+v"(B));                         \
        }                                                                    \
        TYPE s = c0;                                                         \
        TYPE all[] = {c1, c2, c3, c4, c5, c6, c7, c8, c9, c10, c11, c12,     \
                      c13, c14, c15, c16, c17, c18, c19, c20, c21, c22, c23};\
        for (int j = 0; j < 23; j++) s = SINK##_ADD(s, all[j]);              \
        SINK##_OUT(s);                                                       \
    } while (0)

#define F_ADD(x, y) _mm512_add_ps(x, y)
#define F_OUT(s) (sink_f = _mm512_reduce_add_ps(s))
#define I_ADD(x, y) _mm512_add_epi32(x, y)
#define I_OUT(s) (sink_i = _mm512_reduce_add_epi32(s))

static __m512 fma_op(__m512 c, __m512 a, __m512 b) { return _mm512_fmadd_ps(a, b, c); }
static __m512 dpbf16_op(__m512 c, __m512i a, __m512i b) {
    return _mm512_dpbf16_ps(c, (__m512bh)a, (__m512bh)b);
}
static __m512i dpbusd_op(__m512i c, __m512i a, __m512i b) { return _mm512_dpbusd_epi32(c, a, b); }

static void report(const char *name, const char *unit, double ops, double secs) {
    printf("%-12s %8.1f %s  (%.3f s)\n", name, ops / secs * 1e-9, unit, secs);
}

static void vector_peaks(void) {
    double t;
    {
        __m512 a = _mm512_set1_ps(1e-8f), b = _mm512_set1_ps(1e-8f);
        t = now();
        CHAINS(__m512, _mm512_setzero_ps(), fma_op, a, b, F);
        report("vfmadd231ps", "GFLOP/s", 24.0 * ITERS * 32, now() - t);
    }
    {
        __m512i a = _mm512_set1_epi16(0x3c00), b = _mm512_set1_epi16(0x3c00); /* 2^-7 */
        t = now();
        CHAINS(__m512, _mm512_setzero_ps(), dpbf16_op, a, b, F);
        report("vdpbf16ps", "GFLOP/s", 24.0 * ITERS * 64, now() - t);
    }
    {
        __m512i a = _mm512_set1_epi8(1), b = _mm512_set1_epi8(1);
        t = now();
        CHAINS(__m512i, _mm512_setzero_si512(), dpbusd_op, a, b, I);
        report("vpdpbusd", "GOP/s  ", 24.0 * ITERS * 128, now() - t);
    }
}

/* Whether the CPU has AMX-TILE/BF16/INT8, the OS enables the tile state in
 * XCR0, and Linux grants this process the tile data (ARCH_REQ_XCOMP_PERM). */
static int amx_ready(void) {
    unsigned a, b, c, d;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return 0;
    int cpu = (d >> 22 & 1) && (d >> 24 & 1) && (d >> 25 & 1);
    if (!cpu) { printf("AMX: this CPU has no AMX tiles, skipped\n"); return 0; }
    __get_cpuid(1, &a, &b, &c, &d);
    if (!(c >> 27 & 1)) { printf("AMX: no OSXSAVE, skipped\n"); return 0; }
    unsigned lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    if ((lo & (3u << 17)) != (3u << 17)) { printf("AMX: XCR0 lacks the tile state, skipped\n"); return 0; }
    if (syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) != 0) {
        printf("AMX: the kernel refused ARCH_REQ_XCOMP_PERM, skipped\n");
        return 0;
    }
    return 1;
}

/* palette 1; tiles 0-7 of 16 rows x 64 bytes. */
struct __attribute__((packed, aligned(64))) tilecfg {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
};

#define AMX_ITERS 20000000L

__attribute__((target("amx-tile,amx-bf16,amx-int8")))
static void amx_peaks(void) {
    struct tilecfg cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.palette = 1;
    for (int t = 0; t < 8; t++) { cfg.colsb[t] = 64; cfg.rows[t] = 16; }
    _tile_loadconfig(&cfg);
    static uint16_t ones[16 * 32] __attribute__((aligned(64)));
    for (int i = 0; i < 16 * 32; i++) ones[i] = 0x3c00;
    float out[16 * 16] __attribute__((aligned(64)));

    /* C in tmm0-3, A in tmm4-5, B in tmm6-7: a 2x2 block, each A and B tile
     * used twice, as a GEMM micro-kernel would. */
    _tile_zero(0); _tile_zero(1); _tile_zero(2); _tile_zero(3);
    _tile_loadd(4, ones, 64); _tile_loadd(5, ones, 64);
    _tile_loadd(6, ones, 64); _tile_loadd(7, ones, 64);
    double t = now();
    for (long i = 0; i < AMX_ITERS; i++) {
        _tile_dpbf16ps(0, 4, 6); _tile_dpbf16ps(1, 4, 7);
        _tile_dpbf16ps(2, 5, 6); _tile_dpbf16ps(3, 5, 7);
    }
    _tile_stored(0, out, 64);
    report("tdpbf16ps", "GFLOP/s", 4.0 * AMX_ITERS * 16384, now() - t);
    sink_f = out[0];

    _tile_zero(0); _tile_zero(1); _tile_zero(2); _tile_zero(3);
    t = now();
    for (long i = 0; i < AMX_ITERS; i++) {
        _tile_dpbusd(0, 4, 6); _tile_dpbusd(1, 4, 7);
        _tile_dpbusd(2, 5, 6); _tile_dpbusd(3, 5, 7);
    }
    _tile_stored(0, out, 64);
    report("tdpbusd", "GOP/s  ", 4.0 * AMX_ITERS * 32768, now() - t);
    sink_i = (int)out[0];
    _tile_release();
}

int main(void) {
    printf("one core, register-only, 2 ops per multiply-add\n");
    /* Twice: the first round also warms the core up (frequency, the
     * AVX-512 and AMX power states); the second is the one to read. */
    int amx = amx_ready();
    for (int round = 1; round <= 2; round++) {
        printf("round %d\n", round);
        vector_peaks();
        if (amx) amx_peaks();
    }
    return 0;
}
