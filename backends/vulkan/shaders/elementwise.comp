#version 460
// op 0: y += x; op 1: y *= s; op 2: y = gelu_tanh(y) * x (GeGLU); op 3: y = x (copy). n floats.
#include "common.glsl"
layout(local_size_x = 256) in;
layout(push_constant) uniform PC {
    uint64_t y, x;
    uint64_t n;
    uint op, gx;
    float s;
} pc;

void main() {
    const uint64_t i = (uint64_t(gl_WorkGroupID.y) * pc.gx + gl_WorkGroupID.x) * 256ul + gl_LocalInvocationID.x;
    if (i >= pc.n) return;
    const uint64_t y = pc.y + 4ul * i, x = pc.x + 4ul * i;
    if (pc.op == 0u) {
        F32s(y).v[0] += F32s(x).v[0];
    } else if (pc.op == 1u) {
        F32s(y).v[0] *= pc.s;
    } else if (pc.op == 2u) {
        const float g = F32s(y).v[0];
        F32s(y).v[0] = 0.5 * g * (1.0 + tanh_safe(0.7978845608028654 * (g + 0.044715 * g * g * g))) * F32s(x).v[0];
    } else {
        F32s(y).v[0] = F32s(x).v[0];
    }
}
