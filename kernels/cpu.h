/* kernels/cpu.h — run-time CPU feature detection (x86-64: CPUID plus what the OS has enabled: XGETBV for
 * the AVX / AVX-512 register state, arch_prctl for AMX tiles; AArch64: the kernel's getauxval(AT_HWCAP)) and the
 * ISA levels (gemma.h, gm_isa) the
 * kernels can use here. Which level runs is not decided here: it is an option of the model (the copies and
 * matrix kernels made at open) and of the engine (the CPU backend's kernel table, kernels/ops.h); the CLI
 * reads $GEMMA_ISA into them. The features are facts of the machine, detected once. */
#ifndef GM_KERNELS_CPU_H
#define GM_KERNELS_CPU_H

#include <stdbool.h>

#include "gemma.h"

typedef struct gm_cpu_features {
    bool sse42, avx, avx2, fma, f16c;
    bool avx512f, avx512bw, avx512dq, avx512vl, avx512vnni, avx512bf16, avx512fp16, avx512vbmi;
    bool avx_vnni;
    bool amx_tile, amx_int8, amx_bf16;
    bool os_avx;    /* XCR0: XMM and YMM state enabled */
    bool os_avx512; /* XCR0: opmask and ZMM state enabled */
    bool os_amx;    /* XCR0 tile bits set and arch_prctl(ARCH_REQ_XCOMP_PERM) granted */
    /* AArch64 (HWCAP bits): ASIMD (NEON, always there on Linux AArch64), ASIMDDP (sdot / udot), FPHP + ASIMDHP
     * (half-precision arithmetic; the kernels only convert halves, which ASIMD does) */
    bool asimd, asimddp, asimdhp;
} gm_cpu_features;

/* Levels in an array index: GM_ISA_AUTO .. GM_ISA_NEON_DOT. */
#define GM_ISA_LEVELS ((int)GM_ISA_NEON_DOT + 1)

/* Whether level isa includes `level`: the same family at or above it (SCALAR is in every level). An x86 level never
 * includes an AArch64 one or the reverse, so kernels test their family with this, never with isa >= level. */
static inline bool gm_isa_at_least(gm_isa isa, gm_isa level) {
    const bool x86 = level == GM_ISA_AVX2 || level == GM_ISA_AVX512;
    const bool arm = level == GM_ISA_NEON || level == GM_ISA_NEON_DOT;
    if (x86) return (isa == GM_ISA_AVX2 || isa == GM_ISA_AVX512) && isa >= level;
    if (arm) return (isa == GM_ISA_NEON || isa == GM_ISA_NEON_DOT) && isa >= level;
    return isa >= GM_ISA_SCALAR && (int)isa < GM_ISA_LEVELS && level == GM_ISA_SCALAR;
}

/* Detected once (thread-safe). */
const gm_cpu_features *gm_cpu_features_get(void);
/* Best level this CPU + OS can run (never GM_ISA_AUTO). */
gm_isa gm_isa_supported(void);
/* The level to run for a request: AUTO and levels above the supported one give the supported one (so
 * does a value outside the enum: callers that take a level from a user refuse those, gm_isa_valid). */
gm_isa gm_isa_resolve(gm_isa want);
bool gm_isa_valid(gm_isa want);
/* Whether this CPU runs level isa itself (gm_isa_resolve(isa) == isa, isa not AUTO): the levels tests loop over. */
bool gm_isa_runs(gm_isa isa);
/* "avx2 fma f16c avx512f ..." / "asimd asimddp ..." into buf, for diagnostics. */
void gm_cpu_describe(char *buf, int size);

#endif
