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

/* 24 independent chains (zmm8-zmm31) of one instruction INSN on the same
 * two operands (zmm0, zmm1), ITERS times; returns seconds. Written in asm:
 * gcc -O2 spilled the accumulators of an intrinsics loop to the stack for
 * vpdpbusd (measuring a third of the real rate). The sums are never read. */
#define CHAINS(INSN)                                                         \
    do {                                                                     \
        long n = ITERS;                                                      \
        __asm__ volatile(                                                    \
        "vpxord %%zmm0, %%zmm0, %%zmm0\n\t"                                  \
        "vpxord %%zmm1, %%zmm1, %%zmm1\n\t"                                  \
        "1:\n\t"                                                             \
        INSN " %%zmm1, %%zmm0, %%zmm8\n\t"   \
        INSN " %%zmm1, %%zmm0, %%zmm9\n\t"   \
        INSN " %%zmm1, %%zmm0, %%zmm10\n\t"   \
        INSN " %%zmm1, %%zmm0, %%zmm11\n\t"   \
        INSN " %%zmm1, %%zmm0, %%zmm12\n\t"   \
        INSN " %%zmm1, %%zmm0, %%zmm13\n\t"   \
        INSN " %%zmm1, %%zmm0, %%zmm14\n\t"   \
        INSN " %%zmm1, %%zmm0, %%zmm15\n\t"   \
        INSN " %%zmm1, %%zmm0, %%zmm16\n\t"   \
        INSN " %%zmm1, %%zmm0, %%zmm17\n\t"   \
        INSN " %%zmm1, %%zmm0, %%zmm18\n\t"   \
        INSN " %%zmm1, %%zmm0, %%zmm19\n\t"   \
        INSN " %%zmm1, %%zmm0, %%zmm20\n\t"   \
        INSN " %%zmm1, %%zmm0, %%zmm21\n\t"   \
        INSN " %%zmm1, %%zmm0, %%zmm22\n\t"   \
        INSN " %%zmm1, %%zmm0, %%zmm23\n\t"   \
        INSN " %%zmm1, %%zmm0, %%zmm24\n\t"   \
        INSN " %%zmm1, %%zmm0, %%zmm25\n\t"   \
        INSN " %%zmm1, %%zmm0, %%zmm26\n\t"   \
        INSN " %%zmm1, %%zmm0, %%zmm27\n\t"   \
        INSN " %%zmm1, %%zmm0, %%zmm28\n\t"   \
        INSN " %%zmm1, %%zmm0, %%zmm29\n\t"   \
        INSN " %%zmm1, %%zmm0, %%zmm30\n\t"   \
        INSN " %%zmm1, %%zmm0, %%zmm31\n\t"   \
        "dec %0\n\t"                                                          \
        "jnz 1b\n\t"                                                         \
        : "+r"(n)                                                            \
        :                                                                    \
        : "xmm0", "xmm1", "xmm8", "xmm9", "xmm10", "xmm11", "xmm12", "xmm13",\
          "xmm14", "xmm15", "xmm16", "xmm17", "xmm18", "xmm19", "xmm20",     \
          "xmm21", "xmm22", "xmm23", "xmm24", "xmm25", "xmm26", "xmm27",     \
          "xmm28", "xmm29", "xmm30", "xmm31", "cc");                         \
    } while (0)

static void report(const char *name, const char *unit, double ops, double secs) {
    printf("%-12s %8.1f %s  (%.3f s)\n", name, ops / secs * 1e-9, unit, secs);
}

static void vector_peaks(void) {
    double t = now();
    CHAINS("vfmadd231ps");
    report("vfmadd231ps", "GFLOP/s", 24.0 * ITERS * 32, now() - t);
    t = now();
    CHAINS("vdpbf16ps");
    report("vdpbf16ps", "GFLOP/s", 24.0 * ITERS * 64, now() - t);
    t = now();
    CHAINS("vpdpbusd");
    report("vpdpbusd", "GOP/s  ", 24.0 * ITERS * 128, now() - t);
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
