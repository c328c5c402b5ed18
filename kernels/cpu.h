/* kernels/cpu.h — run-time CPU feature detection (CPUID plus what the OS has enabled: XGETBV for
 * the AVX / AVX-512 register state, arch_prctl for AMX tiles) and the ISA levels (gemma.h, gm_isa) the
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
} gm_cpu_features;

/* Detected once (thread-safe). */
const gm_cpu_features *gm_cpu_features_get(void);
/* Best level this CPU + OS can run (never GM_ISA_AUTO). */
gm_isa gm_isa_supported(void);
/* The level to run for a request: AUTO and levels above the supported one give the supported one (so
 * does a value outside the enum: callers that take a level from a user refuse those, gm_isa_valid). */
gm_isa gm_isa_resolve(gm_isa want);
bool gm_isa_valid(gm_isa want);
/* "avx2 fma f16c avx512f ..." into buf, for diagnostics. */
void gm_cpu_describe(char *buf, int size);

#endif
