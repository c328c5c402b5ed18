/* kernels/cpu.h — run-time CPU feature detection (CPUID plus what the OS has enabled: XGETBV for
 * the AVX / AVX-512 register state, arch_prctl for AMX tiles) and the ISA level the kernels use.
 * The level is the best one the CPU and OS support, lowered by GEMMA_ISA=scalar|avx2|avx512 (never
 * raised above what is supported). */
#ifndef GM_KERNELS_CPU_H
#define GM_KERNELS_CPU_H

#include <stdbool.h>

typedef struct gm_cpu_features {
    bool sse42, avx, avx2, fma, f16c;
    bool avx512f, avx512bw, avx512dq, avx512vl, avx512vnni, avx512bf16, avx512fp16, avx512vbmi;
    bool avx_vnni;
    bool amx_tile, amx_int8, amx_bf16;
    bool os_avx;    /* XCR0: XMM and YMM state enabled */
    bool os_avx512; /* XCR0: opmask and ZMM state enabled */
    bool os_amx;    /* XCR0 tile bits set and arch_prctl(ARCH_REQ_XCOMP_PERM) granted */
} gm_cpu_features;

typedef enum gm_isa {
    GM_ISA_SCALAR = 0,
    GM_ISA_AVX2 = 1,   /* AVX2 + FMA + F16C */
    GM_ISA_AVX512 = 2, /* AVX-512 F/BW/DQ/VL + VNNI */
} gm_isa;

/* Detected once (thread-safe). */
const gm_cpu_features *gm_cpu_features_get(void);
/* Best level this CPU + OS can run. */
gm_isa gm_isa_supported(void);
/* Level in use: supported, clamped by GEMMA_ISA read at first use. */
gm_isa gm_isa_active(void);
/* Force a level (tests, benchmarks); clamped to the supported one. Returns the level set. Not
 * meant to be called while other threads run kernels. */
gm_isa gm_isa_set(gm_isa level);
const char *gm_isa_name(gm_isa level);
/* "avx2 fma f16c avx512f ..." into buf, for diagnostics. */
void gm_cpu_describe(char *buf, int size);

#endif
