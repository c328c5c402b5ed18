#version 460
// y[i][j] = x[i] . W[j] (softcap > 0: softcap tanh(y / softcap)). One output feature j per invocation, for up to
// TILE input rows (the weights dequantized once per 32-element unit serve them all); each dot product sums its
// units in order, with no cross-invocation reduction, so a row's result is the same whatever rows share its tile
// and whatever the batch (batch invariance), and no barriers (the slowest thing on lavapipe).
#include "common.glsl"
layout(local_size_x = 64) in;
layout(push_constant) uniform PC {
    uint64_t w, x, y;
    uint rows, cols, n, type, row_bytes, ldy, gx;
    float softcap;
} pc;
const uint TILE = 16u;

void main() {
    const uint j = (gl_WorkGroupID.y * pc.gx + gl_WorkGroupID.x) * 64u + gl_LocalInvocationID.x;
    if (j >= pc.rows) return;
    const uint i0 = gl_WorkGroupID.z * TILE, nr = min(TILE, pc.n - i0);
    float acc[TILE];
    for (uint r = 0u; r < TILE; r++) acc[r] = 0.0;
    const uint64_t row = pc.w + uint64_t(j) * uint64_t(pc.row_bytes);
    for (uint u = 0u; u < pc.cols / 32u; u++) {
        float w[32];
        dequant32(pc.type, row, u, w);
        for (uint r = 0u; r < TILE; r++) {
            if (r >= nr) break;
            const uint64_t xr = pc.x + 4ul * (uint64_t(i0 + r) * pc.cols + 32u * u); // 16-byte aligned
            float s = 0.0;
            for (uint k = 0u; k < 8u; k++) {
                const vec4 xv = V4s(xr).v[k];
                s += w[4u * k] * xv.x;
                s += w[4u * k + 1u] * xv.y;
                s += w[4u * k + 2u] * xv.z;
                s += w[4u * k + 3u] * xv.w;
            }
            acc[r] += s;
        }
    }
    for (uint r = 0u; r < nr; r++) {
        float v = acc[r];
        if (pc.softcap > 0.0) v = pc.softcap * tanh_safe(v / pc.softcap);
        put(pc.y, uint64_t(i0 + r) * pc.ldy + j, v);
    }
}
