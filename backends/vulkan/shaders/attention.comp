#version 460
// One query head of one row per workgroup: softmax(q . k_j (soft-capped, biased)) . v_j over the row's keys
// [lo, hi), read from its paged cache blocks. Keys go in chunks of 64, one per thread (a dot product in order);
// the chunk's max and sum meet in fixed trees, and each thread keeps its own output dimensions, adding the chunk's
// weighted values in key order (an online softmax). Nothing depends on other rows: batch invariant.
// meta per row (4 x u64): the address of its K block list, of its V block list (per block of 64 positions: the
// layer's rows in it), lo | hi << 32, the address of its bias row (0: none).
#include "common.glsl"
layout(local_size_x = 64) in;
layout(push_constant) uniform PC {
    uint64_t q, att, meta;
    uint n, n_heads, group, hd, row_bytes, f16;
    float softcap;
} pc;
const uint MAX_HD = 512u;
shared float qs[MAX_HD];
shared float p[64];
shared float red[64];

float cached(uint64_t a, uint e) {
    return pc.f16 != 0u ? unpackHalf2x16(uint(U16s(a).v[e])).x : F32s(a).v[e];
}

uint64_t row_of(uint64_t list, uint j, uint head_off) {
    return U64s(list).v[j / 64u] + uint64_t(j % 64u) * pc.row_bytes + head_off;
}

void main() {
    const uint i = gl_WorkGroupID.x, h = gl_WorkGroupID.y, t = gl_LocalInvocationID.x;
    if (i >= pc.n) return;
    const uint64_t m = pc.meta + 32ul * i;
    const uint64_t kl = U64s(m).v[0], vl = U64s(m).v[1], bias = U64s(m).v[3];
    const uint lo = uint(U64s(m).v[2] & 0xFFFFFFFFul), hi = uint(U64s(m).v[2] >> 32ul);
    const uint hd = pc.hd, head_off = (h / pc.group) * hd * (pc.f16 != 0u ? 2u : 4u);
    const uint64_t qr = pc.q + 4ul * (uint64_t(i) * pc.n_heads + h) * hd;
    for (uint e = t; e < hd; e += 64u) qs[e] = F32s(qr).v[e];
    float acc[MAX_HD / 64u];
    for (uint k = 0u; k < MAX_HD / 64u; k++) acc[k] = 0.0;
    float mx = uintBitsToFloat(0xFF800000u), z = 0.0; // -inf
    barrier();
    for (uint c0 = lo; c0 < hi; c0 += 64u) {
        const uint j = c0 + t;
        float s = uintBitsToFloat(0xFF800000u);
        if (j < hi) {
            const uint64_t kr = row_of(kl, j, head_off);
            float d = 0.0;
            for (uint e = 0u; e < hd; e++) d += qs[e] * cached(kr, e);
            if (pc.softcap > 0.0) d = pc.softcap * tanh_safe(d / pc.softcap);
            if (bias != 0ul) d += F32s(bias).v[j];
            s = d;
        }
        red[t] = s;
        barrier();
        for (uint w = 32u; w > 0u; w >>= 1u) {
            if (t < w) red[t] = max(red[t], red[t + w]);
            barrier();
        }
        const float mn = max(mx, red[0]);
        barrier();
        if (mn == uintBitsToFloat(0xFF800000u)) continue; // every key so far masked (uniform: shared value)
        const float alpha = mx == uintBitsToFloat(0xFF800000u) ? 0.0 : exp(mx - mn);
        const float pt = j < hi ? exp(s - mn) : 0.0;
        p[t] = pt;
        red[t] = pt;
        barrier();
        for (uint w = 32u; w > 0u; w >>= 1u) {
            if (t < w) red[t] += red[t + w];
            barrier();
        }
        z = z * alpha + red[0];
        const uint nk = min(64u, hi - c0);
        for (uint k = 0u; k * 64u + t < hd; k++) {
            const uint e = k * 64u + t;
            float a = acc[k] * alpha;
            for (uint jj = 0u; jj < nk; jj++)
                if (p[jj] != 0.0) a += p[jj] * cached(row_of(vl, c0 + jj, head_off), e);
            acc[k] = a;
        }
        mx = mn;
        barrier();
    }
    const uint64_t o = pc.att + 4ul * (uint64_t(i) * pc.n_heads + h) * hd;
    for (uint k = 0u; k * 64u + t < hd; k++) F32s(o).v[k * 64u + t] = z > 0.0 ? acc[k] / z : 0.0;
}
