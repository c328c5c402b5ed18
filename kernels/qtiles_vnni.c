/* kernels/qtiles_vnni.c — kernels/qtiles_avx2.c built again for CPUs with AVX-512 VNNI (the AVX-512 level):
 * the same kernels on 256-bit vectors, with vpdpbusd where the AVX2 route multiplies in three steps (K-quant
 * prefill tiles), and the 32 vector registers of EVEX encoding. The same integers, hence the same bits as the
 * AVX2 kernels (tests/test_matmul.c compares them); exported as gm_vnni_qtiles / gm_vnni_qx8_tiles. */
#define QT_VNNI 1
#include "kernels/qtiles_avx2.c"
