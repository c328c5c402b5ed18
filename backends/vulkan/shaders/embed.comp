#version 460
// x[i] = row token(i) of the embedding matrix times scale, or the row's caller embedding (no scale).
// meta per row: the token id, the address of its caller embedding (0: none).
#include "common.glsl"
layout(local_size_x = 64) in;
layout(push_constant) uniform PC {
    uint64_t x, w, meta;
    uint n, d, type, row_bytes;
    float scale;
} pc;

void main() {
    const uint i = gl_WorkGroupID.x;
    if (i >= pc.n) return;
    const uint64_t xr = pc.x + 4ul * uint64_t(i) * pc.d, own = U64s(pc.meta).v[2u * i + 1u];
    if (own != 0ul) {
        for (uint e = gl_LocalInvocationID.x; e < pc.d; e += 64u) F32s(xr).v[e] = F32s(own).v[e];
        return;
    }
    const uint64_t row = pc.w + U64s(pc.meta).v[2u * i] * uint64_t(pc.row_bytes);
    for (uint u = gl_LocalInvocationID.x; u < pc.d / 32u; u += 64u) {
        float w[32];
        dequant32(pc.type, row, u, w);
        for (uint e = 0u; e < 32u; e++) F32s(xr).v[32u * u + e] = w[e] * pc.scale;
    }
}
