/* kernels/vec_neon_dot.c — kernels/vec_neon.c again with the dot-product extension (sdot: 16 int8 products into 4
 * int32 lanes in one instruction), under its own names. Only this file is built with -march=armv8.2-a+dotprod
 * (CMakeLists.txt): kernels/cpu.c selects it where the kernel reports HWCAP_ASIMDDP. The same integers as the
 * plain NEON copy, so the same bits. */
#define VN_DOT 1
#include "kernels/vec_neon.c"
