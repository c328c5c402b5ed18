#version 460
// Row i's keys and values into its cache rows: dst holds per row the device addresses of its K row and V row.
#include "common.glsl"
layout(local_size_x = 64) in;
layout(push_constant) uniform PC {
    uint64_t k, v, dst;
    uint n, kv_dim, f16;
} pc;

void main() {
    const uint i = gl_WorkGroupID.x;
    if (i >= pc.n) return;
    const uint64_t kd = U64s(pc.dst).v[2u * i], vd = U64s(pc.dst).v[2u * i + 1u];
    const uint64_t ks = pc.k + 4ul * uint64_t(i) * pc.kv_dim, vs = pc.v + 4ul * uint64_t(i) * pc.kv_dim;
    for (uint e = gl_LocalInvocationID.x; e < pc.kv_dim; e += 64u) {
        if (pc.f16 != 0u) {
            U16s(kd).v[e] = uint16_t(f32_to_f16(F32s(ks).v[e]));
            U16s(vd).v[e] = uint16_t(f32_to_f16(F32s(vs).v[e]));
        } else {
            F32s(kd).v[e] = F32s(ks).v[e];
            F32s(vd).v[e] = F32s(vs).v[e];
        }
    }
}
