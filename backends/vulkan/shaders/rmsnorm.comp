#version 460
// y[i] = x[idx ? idx[i] : i] / sqrt(mean(x^2) + eps) * (w ? w : 1): one row per workgroup, the sum of squares in a
// fixed order (each thread's strided elements, then a tree).
#include "common.glsl"
layout(local_size_x = 64) in;
layout(push_constant) uniform PC {
    uint64_t y, x, w, idx;
    uint n, dim;
    float eps;
} pc;
shared float red[64];

void main() {
    const uint i = gl_WorkGroupID.y * 65535u + gl_WorkGroupID.x, t = gl_LocalInvocationID.x;
    if (i >= pc.n) return;
    const uint src = pc.idx != 0ul ? uint(I32s(pc.idx).v[i]) : i;
    const uint64_t xr = pc.x + 4ul * uint64_t(src) * pc.dim, yr = pc.y + 4ul * uint64_t(i) * pc.dim;
    float ss = 0.0;
    for (uint e = t; e < pc.dim; e += 64u) ss += F32s(xr).v[e] * F32s(xr).v[e];
    red[t] = ss;
    barrier();
    for (uint s = 32u; s > 0u; s >>= 1u) {
        if (t < s) red[t] += red[t + s];
        barrier();
    }
    const float k = 1.0 / sqrt(red[0] / float(pc.dim) + pc.eps);
    for (uint e = t; e < pc.dim; e += 64u) {
        const float v = F32s(xr).v[e] * k;
        F32s(yr).v[e] = pc.w != 0ul ? v * F32s(pc.w).v[e] : v;
    }
}
