#version 460
// NEOX RoPE: the pairs (e, e + dims/2) of each head rotated by the angle of the row's position; tab holds per row
// dims/2 (cos, sin) pairs, computed on the host in double (rope_prepare).
#include "common.glsl"
layout(local_size_x = 64) in;
layout(push_constant) uniform PC {
    uint64_t x, tab;
    uint n, n_heads, hd, dims;
} pc;

void main() {
    const uint rh = gl_WorkGroupID.y * 65535u + gl_WorkGroupID.x;
    if (rh >= pc.n * pc.n_heads) return;
    const uint i = rh / pc.n_heads, h = pc.dims / 2u;
    const uint64_t v = pc.x + 4ul * uint64_t(rh) * pc.hd, tb = pc.tab + 8ul * uint64_t(i) * h;
    for (uint e = gl_LocalInvocationID.x; e < h; e += 64u) {
        const float c = F32s(tb).v[2u * e], s = F32s(tb).v[2u * e + 1u];
        const float x0 = F32s(v).v[e], x1 = F32s(v).v[e + h];
        F32s(v).v[e] = x0 * c - x1 * s;
        F32s(v).v[e + h] = x0 * s + x1 * c;
    }
}
