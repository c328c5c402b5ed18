/* kernels/cpu.c — CPUID / XGETBV / arch_prctl based detection on x86-64. A feature counts only if the OS
 * saves its register state: AVX needs XCR0 bits 1-2, AVX-512 bits 5-7, AMX bits 17-18 plus a
 * per-process permission request (Linux >= 5.16). On AArch64 the kernel's hwcaps (getauxval(AT_HWCAP)): reading
 * the ID registers directly traps on older kernels, and the hwcaps already say what the kernel supports. */
#include "kernels/cpu.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>

#if defined(__x86_64__)
#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif
#if defined(__aarch64__)
#include <sys/auxv.h>
/* the AArch64 Linux hwcap bits (asm/hwcap.h), spelled out for libcs whose headers predate them */
#ifndef HWCAP_ASIMD
#define HWCAP_ASIMD (1ul << 1)
#endif
#ifndef HWCAP_ASIMDHP
#define HWCAP_ASIMDHP (1ul << 10)
#endif
#ifndef HWCAP_ASIMDDP
#define HWCAP_ASIMDDP (1ul << 20)
#endif
#endif

static gm_cpu_features g_feat;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

#if defined(__x86_64__)
static unsigned long long read_xcr0(void) {
    unsigned lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return ((unsigned long long)hi << 32) | lo;
}

static bool request_amx(void) {
    /* ARCH_REQ_XCOMP_PERM = 0x1023, XFEATURE_XTILEDATA = 18 */
    return syscall(SYS_arch_prctl, 0x1023, 18) == 0;
}
#endif

static void detect(void) {
    memset(&g_feat, 0, sizeof g_feat);
#if defined(__x86_64__)
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d)) return;
    g_feat.sse42 = (c >> 20) & 1;
    g_feat.fma = (c >> 12) & 1;
    g_feat.f16c = (c >> 29) & 1;
    bool osxsave = (c >> 27) & 1, avx = (c >> 28) & 1;
    unsigned long long xcr0 = osxsave ? read_xcr0() : 0;
    g_feat.os_avx = (xcr0 & 0x6) == 0x6;
    g_feat.os_avx512 = g_feat.os_avx && (xcr0 & 0xE0) == 0xE0;
    g_feat.avx = avx && g_feat.os_avx;
    unsigned max_leaf = __get_cpuid_max(0, NULL);
    if (max_leaf >= 7) {
        __cpuid_count(7, 0, a, b, c, d);
        g_feat.avx2 = (b >> 5) & 1;
        g_feat.avx512f = (b >> 16) & 1;
        g_feat.avx512dq = (b >> 17) & 1;
        g_feat.avx512bw = (b >> 30) & 1;
        g_feat.avx512vl = (b >> 31) & 1;
        g_feat.avx512vbmi = (c >> 1) & 1;
        g_feat.avx512vnni = (c >> 11) & 1;
        g_feat.avx512fp16 = (d >> 23) & 1;
        g_feat.amx_bf16 = (d >> 22) & 1;
        g_feat.amx_tile = (d >> 24) & 1;
        g_feat.amx_int8 = (d >> 25) & 1;
        __cpuid_count(7, 1, a, b, c, d);
        g_feat.avx_vnni = (a >> 4) & 1;
        g_feat.avx512bf16 = (a >> 5) & 1;
    }
    if (!g_feat.os_avx) {
        g_feat.avx2 = g_feat.fma = g_feat.f16c = g_feat.avx_vnni = false;
    }
    if (!g_feat.os_avx512) {
        g_feat.avx512f = g_feat.avx512bw = g_feat.avx512dq = g_feat.avx512vl = false;
        g_feat.avx512vnni = g_feat.avx512bf16 = g_feat.avx512fp16 = g_feat.avx512vbmi = false;
    }
    if (g_feat.amx_tile && (xcr0 & 0x60000) == 0x60000) g_feat.os_amx = request_amx();
#elif defined(__aarch64__)
    const unsigned long hw = getauxval(AT_HWCAP);
    g_feat.asimd = (hw & HWCAP_ASIMD) != 0;
    g_feat.asimddp = g_feat.asimd && (hw & HWCAP_ASIMDDP) != 0;
    g_feat.asimdhp = g_feat.asimd && (hw & HWCAP_ASIMDHP) != 0;
#endif
}

const gm_cpu_features *gm_cpu_features_get(void) {
    pthread_once(&g_once, detect);
    return &g_feat;
}

gm_isa gm_isa_supported(void) {
    const gm_cpu_features *f = gm_cpu_features_get();
    bool avx2 = f->avx2 && f->fma && f->f16c;
    if (avx2 && f->avx512f && f->avx512bw && f->avx512dq && f->avx512vl && f->avx512vnni) return GM_ISA_AVX512;
    if (avx2) return GM_ISA_AVX2;
    if (f->asimd && f->asimddp) return GM_ISA_NEON_DOT;
    if (f->asimd) return GM_ISA_NEON;
    return GM_ISA_SCALAR;
}

bool gm_isa_valid(gm_isa want) { return (int)want >= GM_ISA_AUTO && (int)want < GM_ISA_LEVELS; }

gm_isa gm_isa_resolve(gm_isa want) {
    const gm_isa best = gm_isa_supported();
    if (!gm_isa_valid(want) || want == GM_ISA_AUTO) return best;
    if (want == GM_ISA_SCALAR) return want;
    /* a level the best includes runs as asked; one above it in its family, or of the other family: the best */
    return gm_isa_at_least(best, want) ? want : best;
}

bool gm_isa_runs(gm_isa isa) { return gm_isa_valid(isa) && isa != GM_ISA_AUTO && gm_isa_resolve(isa) == isa; }

static const char *const ISA_NAMES[] = {"auto", "scalar", "avx2", "avx512", "neon", "neondot"};

const char *gm_isa_name(gm_isa isa) { return gm_isa_valid(isa) ? ISA_NAMES[isa] : "?"; }

bool gm_isa_parse(const char *name, gm_isa *out) {
    for (int i = 0; name && i < GM_ISA_LEVELS; i++)
        if (!strcmp(name, ISA_NAMES[i])) {
            *out = (gm_isa)i;
            return true;
        }
    return false;
}

void gm_cpu_describe(char *buf, int size) {
    const gm_cpu_features *f = gm_cpu_features_get();
    struct { bool on; const char *name; } items[] = {
        {f->avx2, "avx2"}, {f->fma, "fma"}, {f->f16c, "f16c"}, {f->avx512f, "avx512f"}, {f->avx512bw, "avx512bw"},
        {f->avx512dq, "avx512dq"}, {f->avx512vl, "avx512vl"}, {f->avx512vnni, "avx512vnni"},
        {f->avx512bf16, "avx512bf16"}, {f->avx512fp16, "avx512fp16"}, {f->avx512vbmi, "avx512vbmi"},
        {f->avx_vnni, "avxvnni"}, {f->amx_tile, "amx-tile"}, {f->amx_int8, "amx-int8"}, {f->amx_bf16, "amx-bf16"},
        {f->os_amx, "amx-os-permitted"}, {f->asimd, "asimd"}, {f->asimddp, "asimddp"}, {f->asimdhp, "asimdhp"},
    };
    int used = 0;
    if (size > 0) buf[0] = 0;
    for (size_t i = 0; i < sizeof items / sizeof items[0]; i++) {
        if (!items[i].on || used >= size) continue;
        int w = snprintf(buf + used, (size_t)(size - used), "%s%s", used ? " " : "", items[i].name);
        if (w > 0) used += w;
    }
}
