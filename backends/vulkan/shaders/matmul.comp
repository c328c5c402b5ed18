#version 460
// y[i][j] = x[i] . W[j] (softcap > 0: softcap tanh(y / softcap)). OUT adjacent output features per invocation, for
// up to TILE input rows: each 32-element unit of x is read once for the OUT features and each unit of W dequantized
// once for the TILE rows. Each dot product sums its units in order, with no cross-invocation reduction, so a row's
// result is the same whatever rows share its tile and whatever the batch (batch invariance), and no barriers (the
// slowest thing on lavapipe). Why OUT = 2: lavapipe (Mesa 22.3) turns every load into a scalar loop over the SIMD
// lanes, and with one feature per invocation x was loaded once per multiply-add, half of a decode step; more
// features gave no more there and cost a GPU registers (docs/gpu.md has the figures).
#include "common.glsl"
layout(local_size_x = 64) in;
layout(push_constant) uniform PC {
    uint64_t w, x, y;
    uint rows, cols, n, type, row_bytes, ldy, gx;
    float softcap;
} pc;
const uint TILE = 8u, OUT = 2u; // backend.c's dispatch grid follows both

void main() {
    const uint j0 = ((gl_WorkGroupID.y * pc.gx + gl_WorkGroupID.x) * 64u + gl_LocalInvocationID.x) * OUT;
    if (j0 >= pc.rows) return;
    const uint i0 = gl_WorkGroupID.z * TILE, nr = min(TILE, pc.n - i0);
    float acc[TILE * OUT];
    for (uint a = 0u; a < TILE * OUT; a++) acc[a] = 0.0;
    uint64_t row[OUT]; // features past the last are computed on the last row and not stored
    for (uint o = 0u; o < OUT; o++) row[o] = pc.w + uint64_t(min(j0 + o, pc.rows - 1u)) * uint64_t(pc.row_bytes);
    for (uint u = 0u; u < pc.cols / 32u; u++) {
        float w[OUT][32];
        for (uint o = 0u; o < OUT; o++) dequant32(pc.type, row[o], u, w[o]);
        for (uint r = 0u; r < nr; r++) {
            const uint64_t xr = pc.x + 4ul * (uint64_t(i0 + r) * pc.cols + 32u * u); // 16-byte aligned
            float s[OUT];
            for (uint o = 0u; o < OUT; o++) s[o] = 0.0;
            for (uint k = 0u; k < 8u; k++) {
                const vec4 xv = V4s(xr).v[k];
                for (uint o = 0u; o < OUT; o++) {
                    s[o] += w[o][4u * k] * xv.x;
                    s[o] += w[o][4u * k + 1u] * xv.y;
                    s[o] += w[o][4u * k + 2u] * xv.z;
                    s[o] += w[o][4u * k + 3u] * xv.w;
                }
            }
            for (uint o = 0u; o < OUT; o++) acc[r * OUT + o] += s[o];
        }
    }
    for (uint r = 0u; r < nr; r++) {
        for (uint o = 0u; o < OUT; o++) {
            if (j0 + o >= pc.rows) break;
            float v = acc[r * OUT + o];
            if (pc.softcap > 0.0) v = pc.softcap * tanh_safe(v / pc.softcap);
            put(pc.y, uint64_t(i0 + r) * pc.ldy + j0 + o, v);
        }
    }
}
