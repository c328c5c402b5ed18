/* quant/types.c — the trait table (one row per supported tensor type), type names, row sizes and
 * the IEEE half / bfloat16 conversions everything else builds on. */
#include <math.h>
#include <string.h>

#include "quant/blocks.h"

/* F16 and BF16 weights dot against f32 activations (not f16 / bf16 as ggml does): the dot cost is
 * the weight conversion either way, and f32 keeps the large GeGLU products of small Gemmas from
 * overflowing f16's 65504 range. */
static const gm_type_traits k_traits[] = {
    {GM_TYPE_F32, "F32", 1, 4, gm_dequant_f32, gm_quant_f32, GM_TYPE_F32, gm_vec_dot_f32},
    {GM_TYPE_F16, "F16", 1, 2, gm_dequant_f16, gm_quant_f16, GM_TYPE_F32, gm_vec_dot_f16_f32},
    {GM_TYPE_BF16, "BF16", 1, 2, gm_dequant_bf16, gm_quant_bf16, GM_TYPE_F32, gm_vec_dot_bf16_f32},
    {GM_TYPE_Q4_0, "Q4_0", GM_QK, sizeof(gm_block_q4_0), gm_dequant_q4_0, gm_quant_q4_0, GM_TYPE_Q8_0,
     gm_vec_dot_q4_0_q8_0},
    {GM_TYPE_Q4_1, "Q4_1", GM_QK, sizeof(gm_block_q4_1), gm_dequant_q4_1, gm_quant_q4_1, GM_TYPE_Q8_1,
     gm_vec_dot_q4_1_q8_1},
    {GM_TYPE_Q5_0, "Q5_0", GM_QK, sizeof(gm_block_q5_0), gm_dequant_q5_0, gm_quant_q5_0, GM_TYPE_Q8_0,
     gm_vec_dot_q5_0_q8_0},
    {GM_TYPE_Q5_1, "Q5_1", GM_QK, sizeof(gm_block_q5_1), gm_dequant_q5_1, gm_quant_q5_1, GM_TYPE_Q8_1,
     gm_vec_dot_q5_1_q8_1},
    {GM_TYPE_Q8_0, "Q8_0", GM_QK, sizeof(gm_block_q8_0), gm_dequant_q8_0, gm_quant_q8_0, GM_TYPE_Q8_0,
     gm_vec_dot_q8_0_q8_0},
    {GM_TYPE_Q8_1, "Q8_1", GM_QK, sizeof(gm_block_q8_1), gm_dequant_q8_1, gm_quant_q8_1, GM_TYPE_Q8_1,
     gm_vec_dot_q8_1_q8_1},
    {GM_TYPE_Q4_K, "Q4_K", GM_QK_K, sizeof(gm_block_q4_K), gm_dequant_q4_K, gm_quant_q4_K, GM_TYPE_Q8_K,
     gm_vec_dot_q4_K_q8_K},
    {GM_TYPE_Q5_K, "Q5_K", GM_QK_K, sizeof(gm_block_q5_K), gm_dequant_q5_K, gm_quant_q5_K, GM_TYPE_Q8_K,
     gm_vec_dot_q5_K_q8_K},
    {GM_TYPE_Q6_K, "Q6_K", GM_QK_K, sizeof(gm_block_q6_K), gm_dequant_q6_K, gm_quant_q6_K, GM_TYPE_Q8_K,
     gm_vec_dot_q6_K_q8_K},
    {GM_TYPE_Q8_K, "Q8_K", GM_QK_K, sizeof(gm_block_q8_K), gm_dequant_q8_K, gm_quant_q8_K, GM_TYPE_Q8_K,
     gm_vec_dot_q8_K_q8_K},
};

const gm_type_traits *gm_type_traits_of(int type) {
    for (size_t i = 0; i < sizeof k_traits / sizeof k_traits[0]; i++)
        if (k_traits[i].type == type) return &k_traits[i];
    return NULL;
}

/* Names of every ggml id we know of, supported or not, so error messages can say "Q2_K is not
 * supported" rather than "type 10". */
const char *gm_type_name(int type) {
    switch (type) {
    case GM_TYPE_F32: return "F32";
    case GM_TYPE_F16: return "F16";
    case GM_TYPE_Q4_0: return "Q4_0";
    case GM_TYPE_Q4_1: return "Q4_1";
    case GM_TYPE_Q5_0: return "Q5_0";
    case GM_TYPE_Q5_1: return "Q5_1";
    case GM_TYPE_Q8_0: return "Q8_0";
    case GM_TYPE_Q8_1: return "Q8_1";
    case GM_TYPE_Q2_K: return "Q2_K";
    case GM_TYPE_Q3_K: return "Q3_K";
    case GM_TYPE_Q4_K: return "Q4_K";
    case GM_TYPE_Q5_K: return "Q5_K";
    case GM_TYPE_Q6_K: return "Q6_K";
    case GM_TYPE_Q8_K: return "Q8_K";
    case GM_TYPE_BF16: return "BF16";
    case GM_TYPE_I8: return "I8";
    case GM_TYPE_I16: return "I16";
    case GM_TYPE_I32: return "I32";
    case GM_TYPE_I64: return "I64";
    case GM_TYPE_F64: return "F64";
    default: return NULL;
    }
}

size_t gm_row_bytes(int type, int64_t n) {
    const gm_type_traits *t = gm_type_traits_of(type);
    if (!t || n < 0 || n % t->block_elems != 0) return 0;
    /* n is a tensor dimension read from a file: refuse sizes whose byte count would overflow. */
    if ((uint64_t)(n / t->block_elems) > (uint64_t)(SIZE_MAX / t->block_bytes)) return 0;
    return (size_t)(n / t->block_elems) * t->block_bytes;
}

/* ------------------------------------------------------------------ half precision */

static inline uint32_t f32_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static inline float f32_from_bits(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

float gm_fp16_to_fp32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000) << 16;
    uint32_t exp = (h >> 10) & 0x1F;
    uint32_t man = h & 0x3FF;
    if (exp == 0x1F) return f32_from_bits(sign | 0x7F800000u | (man << 13)); /* inf / nan */
    if (exp == 0) {
        /* zero or subnormal: man * 2^-24 is exact in f32 */
        float v = (float)man * 5.9604644775390625e-08f;
        return sign ? -v : v;
    }
    return f32_from_bits(sign | ((exp + 112) << 23) | (man << 13));
}

uint16_t gm_fp32_to_fp16(float f) {
    uint32_t u = f32_bits(f);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000);
    uint32_t a = u & 0x7FFFFFFFu;
    if (a > 0x7F800000u) return (uint16_t)(sign | 0x7E00 | ((a >> 13) & 0x3FF)); /* quiet nan */
    if (a >= 0x477FF000u) return (uint16_t)(sign | 0x7C00); /* rounds to >= 65520: inf */
    if (a < 0x38800000u) {
        /* result is subnormal (or zero): value / 2^-24 rounded to nearest even. The f32 add
         * rounds in the FPU's default nearest-even mode, which is what we want. */
        float v = f32_from_bits(a) * 16777216.f; /* exact: a power-of-two scale */
        float r = (v + 8388608.f) - 8388608.f;     /* RNE to an integer for v < 2^23 */
        return (uint16_t)(sign | (uint16_t)r);
    }
    /* normal: drop 13 mantissa bits with round-to-nearest-even; a carry into the exponent is
     * the correct result (up to 0x7BFF + 1 = inf, excluded above). */
    uint32_t rounded = a + 0x0FFFu + ((a >> 13) & 1u);
    return (uint16_t)(sign | ((rounded - 0x38000000u) >> 13));
}

float gm_bf16_to_fp32(uint16_t h) { return f32_from_bits((uint32_t)h << 16); }

uint16_t gm_fp32_to_bf16(float f) {
    uint32_t u = f32_bits(f);
    if ((u & 0x7FFFFFFFu) > 0x7F800000u) return (uint16_t)((u >> 16) | 0x0040); /* quiet nan */
    return (uint16_t)((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}
