// backends/vulkan/shaders/common.glsl — what every shader of the Vulkan backend shares: buffers named by their
// device addresses (VK_KHR_buffer_device_address: no descriptor sets, no 128 MiB storage-buffer range, a pointer
// per argument in the push constants, as the host passes float pointers between ops), the file's weight types
// read as 32-bit words, and the f32 -> f16 rounding of quant/types.c in integers (so the cache holds the CPU's bits).
#extension GL_EXT_buffer_reference : require
#extension GL_EXT_buffer_reference2 : require
#extension GL_EXT_shader_explicit_arithmetic_types_int64 : require
#extension GL_EXT_shader_explicit_arithmetic_types_int16 : require
#extension GL_EXT_shader_16bit_storage : require

layout(buffer_reference, std430, buffer_reference_align = 4) buffer F32s { float v[]; };
layout(buffer_reference, std430, buffer_reference_align = 4) buffer U32s { uint v[]; };
layout(buffer_reference, std430, buffer_reference_align = 16) buffer V4s { vec4 v[]; };
layout(buffer_reference, std430, buffer_reference_align = 4) buffer I32s { int v[]; };
layout(buffer_reference, std430, buffer_reference_align = 8) buffer U64s { uint64_t v[]; };
layout(buffer_reference, std430, buffer_reference_align = 2) buffer U16s { uint16_t v[]; };

// the gm_type ids of include/gemma.h
const uint T_F32 = 0u, T_F16 = 1u, T_Q4_0 = 2u, T_Q4_1 = 3u, T_Q5_0 = 6u, T_Q5_1 = 7u, T_Q8_0 = 8u;
const uint T_Q4_K = 12u, T_Q5_K = 13u, T_Q6_K = 14u, T_BF16 = 30u;

// Weights as the backend uploads them (backend.c, upload_rows): the file's blocks with every field 4-byte aligned,
// so that a shader reads words, not bytes (byte loads are gathers, lavapipe's slowest path): Q8_0 as qs[32] d pad,
// Q4_0 as qs[16] d pad, Q5_0 as qs[16] qh d pad, Q6_K padded to 212 bytes; the other types as in the file.
uint w32(uint64_t a, uint byte_off) { return U32s(a + byte_off).v[0]; }
uint byte_of(uint w, uint k) { return (w >> (8u * k)) & 255u; }
float half_lo(uint w) { return unpackHalf2x16(w).x; }
float half_hi(uint w) { return unpackHalf2x16(w).y; }

// Q4_K / Q5_K: the 6-bit scale and min of sub-block j from the 12 packed bytes in words s0 s1 s2
uint sbyte(uint s0, uint s1, uint s2, uint i) { return byte_of(i < 4u ? s0 : i < 8u ? s1 : s2, i % 4u); }
void scale_min_k4(uint s0, uint s1, uint s2, uint j, out float sc, out float mn) {
    if (j < 4u) {
        sc = float(sbyte(s0, s1, s2, j) & 63u);
        mn = float(sbyte(s0, s1, s2, j + 4u) & 63u);
    } else {
        sc = float((sbyte(s0, s1, s2, j + 4u) & 15u) | ((sbyte(s0, s1, s2, j - 4u) >> 6u) << 4u));
        mn = float((sbyte(s0, s1, s2, j + 4u) >> 4u) | ((sbyte(s0, s1, s2, j) >> 6u) << 4u));
    }
}

// Elements [32 u, 32 u + 32) of an uploaded row of type t starting at row. Every type's blocks are whole
// 32-element units.
void dequant32(uint t, uint64_t row, uint u, out float w[32]) {
    if (t == T_F32) {
        for (uint e = 0u; e < 32u; e++) w[e] = F32s(row).v[32u * u + e];
    } else if (t == T_F16 || t == T_BF16) {
        for (uint e = 0u; e < 16u; e++) {
            const uint x = U32s(row).v[16u * u + e];
            w[2u * e] = t == T_F16 ? half_lo(x) : uintBitsToFloat(x << 16u);
            w[2u * e + 1u] = t == T_F16 ? half_hi(x) : uintBitsToFloat(x & 0xFFFF0000u);
        }
    } else if (t == T_Q8_0) {
        const uint64_t b = row + 36u * u;
        const float d = half_lo(w32(b, 32u));
        for (uint k = 0u; k < 8u; k++) {
            const uint x = w32(b, 4u * k);
            for (uint c = 0u; c < 4u; c++) w[4u * k + c] = d * float(bitfieldExtract(int(x), int(8u * c), 8));
        }
    } else if (t == T_Q4_0 || t == T_Q4_1) {
        const bool q40 = t == T_Q4_0;
        const uint64_t b = row + 20u * u;
        const uint dm = w32(b, q40 ? 16u : 0u), qo = q40 ? 0u : 4u;
        const float d = half_lo(dm), m = q40 ? 0.0 : half_hi(dm);
        for (uint k = 0u; k < 4u; k++) {
            const uint x = w32(b, qo + 4u * k);
            for (uint c = 0u; c < 4u; c++) {
                const uint q = byte_of(x, c);
                w[4u * k + c] = q40 ? float(int(q & 15u) - 8) * d : float(q & 15u) * d + m;
                w[4u * k + c + 16u] = q40 ? float(int(q >> 4u) - 8) * d : float(q >> 4u) * d + m;
            }
        }
    } else if (t == T_Q5_0 || t == T_Q5_1) {
        const bool q50 = t == T_Q5_0;
        const uint64_t b = row + 24u * u;
        const uint dm = w32(b, q50 ? 20u : 0u), qh = w32(b, q50 ? 16u : 4u), qo = q50 ? 0u : 8u;
        const float d = half_lo(dm), m = q50 ? 0.0 : half_hi(dm);
        for (uint k = 0u; k < 4u; k++) {
            const uint x = w32(b, qo + 4u * k);
            for (uint c = 0u; c < 4u; c++) {
                const uint e = 4u * k + c, q = byte_of(x, c);
                const uint x0 = (q & 15u) | (((qh >> e) << 4u) & 16u), x1 = (q >> 4u) | ((qh >> (e + 12u)) & 16u);
                w[e] = q50 ? float(int(x0) - 16) * d : float(x0) * d + m;
                w[e + 16u] = q50 ? float(int(x1) - 16) * d : float(x1) * d + m;
            }
        }
    } else if (t == T_Q4_K || t == T_Q5_K) {
        const bool q4 = t == T_Q4_K;
        const uint64_t b = row + (q4 ? 144u : 176u) * (u / 8u);
        const uint s = u % 8u, c = s / 2u;
        const uint dd = w32(b, 0u);
        float sc, mn;
        scale_min_k4(w32(b, 4u), w32(b, 8u), w32(b, 12u), s, sc, mn);
        const float dl = half_lo(dd) * sc, ml = half_hi(dd) * mn;
        const uint qs = (q4 ? 16u : 48u) + 32u * c;
        for (uint k = 0u; k < 8u; k++) {
            const uint x = w32(b, qs + 4u * k), h = q4 ? 0u : w32(b, 16u + 4u * k);
            for (uint cc = 0u; cc < 4u; cc++) {
                const uint l = 4u * k + cc, xb = byte_of(x, cc);
                uint q = (s & 1u) == 0u ? (xb & 15u) : (xb >> 4u);
                if (!q4) q += ((byte_of(h, cc) >> s) & 1u) << 4u;
                w[l] = dl * float(q) - ml;
            }
        }
    } else if (t == T_Q6_K) {
        const uint64_t b = row + 212u * (u / 8u);
        const uint s = u % 8u, h = s / 4u, qt = s % 4u;
        const float d = half_lo(w32(b, 208u));
        const uint ql = 64u * h + 32u * (qt & 1u), qh = 128u + 32u * h, sw = w32(b, 192u + 8u * h + 2u * qt - (2u * qt) % 4u);
        const uint so = (2u * qt) % 4u; // the scales of this unit: bytes so, so + 1 of word sw
        const float d0 = d * float(bitfieldExtract(int(sw), int(8u * so), 8));
        const float d1 = d * float(bitfieldExtract(int(sw), int(8u * (so + 1u)), 8));
        for (uint k = 0u; k < 8u; k++) {
            const uint xl = w32(b, ql + 4u * k), xh = w32(b, qh + 4u * k);
            for (uint cc = 0u; cc < 4u; cc++) {
                const uint l = 4u * k + cc;
                const uint lo = qt >= 2u ? (byte_of(xl, cc) >> 4u) : (byte_of(xl, cc) & 15u);
                const uint hi = (byte_of(xh, cc) >> (2u * qt)) & 3u;
                w[l] = (l < 16u ? d0 : d1) * float(int(lo | (hi << 4u)) - 32);
            }
        }
    } else {
        for (uint e = 0u; e < 32u; e++) w[e] = 0.0;
    }
}

// f32 -> f16 bits, round to nearest even (gm_fp32_to_fp16 of quant/types.c)
uint f32_to_f16(float f) {
    const uint u = floatBitsToUint(f), sign = (u >> 16u) & 0x8000u, a = u & 0x7FFFFFFFu;
    if (a > 0x7F800000u) return sign | 0x7E00u | ((a >> 13u) & 0x3FFu);
    if (a >= 0x477FF000u) return sign | 0x7C00u;
    if (a < 0x38800000u) { // subnormal or zero: a's value / 2^-24 rounded to nearest even
        if (a < 0x33000000u) return sign; // below 2^-25: rounds to zero
        const uint e = a >> 23u, m = (a & 0x7FFFFFu) | 0x800000u, sh = 126u - e; // value = m 2^(e - 150) / 2^-24
        const uint q = m >> sh, r = m & ((1u << sh) - 1u), half_ = 1u << (sh - 1u);
        return sign | (q + ((r > half_ || (r == half_ && (q & 1u) != 0u)) ? 1u : 0u));
    }
    return sign | (((a + 0x0FFFu + ((a >> 13u) & 1u)) - 0x38000000u) >> 13u);
}

// tanh that stays finite: GLSL's may be computed through exp and give inf / inf for |x| past ~44 (tanh(15) is 1.0f)
float tanh_safe(float x) { return tanh(clamp(x, -15.0, 15.0)); }
void put(uint64_t base, uint64_t i, float v) { F32s(base + 4ul * i).v[0] = v; }
