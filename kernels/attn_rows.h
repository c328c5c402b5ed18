/* kernels/attn_rows.h — the row drivers of the fused attention passes, shared by every ISA file (attn_avx2.c,
 * attn_neon.c): which key tiles and value slices are computed for which rows, in what order. The inner loops
 * are the ISA file's own. Included at the end of such a file, with
 *   ATTN_ISA    the functions' suffix (avx2, neon)
 *   ATTN_TILE   keys per score tile
 *   scores_tile(R, G, scores, q, kr0, rs, kt, n_keys, hd, j)   R <= ATTN_TILE keys from key j on, G heads
 *   values_slice(G, part, scores, v, kt, rs, n_keys, hd, c)    columns [c, c + 16) of every head
 * defined; or with ATTN_STUBS defined instead, in a build of the file for another CPU: the functions exist
 * (ops.c names them) and are never selected. */
#define ATTN_CAT2(a, b) a##b
#define ATTN_CAT(a, b) ATTN_CAT2(a, b)
#define ATTN_FN(name) ATTN_CAT(name, ATTN_ISA)

#ifndef ATTN_STUBS

/* Tiles of ATTN_TILE keys from the rows' first key on, each tile for every row that attends (part of) it while its
 * key rows are in L1. A score does not depend on the tiling: each row's are its one-row bits. */
void ATTN_FN(gm_attend_scores_rows_)(float *scores, size_t row_stride, const gm_attend_row *rows, int n, int G,
                                     const void *k, gm_kv_type kt, size_t kv_stride, int hd) {
    const size_t rs = kv_stride * gm_kv_type_size(kt);
    int lo = rows[0].lo, hi = rows[0].hi;
    for (int i = 1; i < n; i++) lo = rows[i].lo < lo ? rows[i].lo : lo, hi = rows[i].hi > hi ? rows[i].hi : hi;
    for (int j = lo; j < hi; j += ATTN_TILE)
        for (int i = 0; i < n; i++) {
            const int a = j > rows[i].lo ? j : rows[i].lo, b = j + ATTN_TILE < rows[i].hi ? j + ATTN_TILE : rows[i].hi;
            if (a < b)
                scores_tile(b - a, G, scores + (size_t)i * row_stride, rows[i].q, (const char *)k + (size_t)a * rs, rs, kt,
                            rows[i].hi - rows[i].lo, hd, a - rows[i].lo);
        }
}

void ATTN_FN(gm_attend_scores_)(float *scores, const float *q, int G, const void *k, gm_kv_type kt, size_t kv_stride,
                                int n_keys, int hd) {
    const gm_attend_row r = {.q = q, .lo = 0, .hi = n_keys};
    ATTN_FN(gm_attend_scores_rows_)(scores, 0, &r, 1, G, k, kt, kv_stride, hd);
}

/* slice by slice, every row in turn: a slice of the chunk's value rows stays in L1 for all the rows */
void ATTN_FN(gm_attend_values_rows_)(const float *scores, size_t row_stride, const gm_attend_row *rows, int n, int G,
                                     const void *v, gm_kv_type kt, size_t kv_stride, int hd) {
    const size_t rs = kv_stride * gm_kv_type_size(kt);
    for (int c = 0; c < hd; c += 16)
        for (int i = 0; i < n; i++) {
            const float *s = scores + (size_t)i * row_stride;
            const char *vr = (const char *)v + (size_t)rows[i].lo * rs;
            const int nk = rows[i].hi - rows[i].lo;
            switch (G) {
            case 1: values_slice(1, rows[i].part, s, vr, kt, rs, nk, hd, c); break;
            case 2: values_slice(2, rows[i].part, s, vr, kt, rs, nk, hd, c); break;
            case 3: values_slice(3, rows[i].part, s, vr, kt, rs, nk, hd, c); break;
            default: values_slice(4, rows[i].part, s, vr, kt, rs, nk, hd, c); break;
            }
        }
}

void ATTN_FN(gm_attend_values_)(float *part, const float *scores, int G, const void *v, gm_kv_type kt,
                                size_t kv_stride, int n_keys, int hd) {
    const gm_attend_row r = {.part = part, .lo = 0, .hi = n_keys};
    ATTN_FN(gm_attend_values_rows_)(scores, 0, &r, 1, G, v, kt, kv_stride, hd);
}

#else

void ATTN_FN(gm_attend_scores_)(float *scores, const float *q, int G, const void *k, gm_kv_type kt, size_t kv_stride,
                                int n_keys, int hd) {
    (void)scores, (void)q, (void)G, (void)k, (void)kt, (void)kv_stride, (void)n_keys, (void)hd;
}
void ATTN_FN(gm_attend_values_)(float *part, const float *scores, int G, const void *v, gm_kv_type kt,
                                size_t kv_stride, int n_keys, int hd) {
    (void)part, (void)scores, (void)G, (void)v, (void)kt, (void)kv_stride, (void)n_keys, (void)hd;
}
void ATTN_FN(gm_attend_scores_rows_)(float *scores, size_t row_stride, const gm_attend_row *rows, int n, int G,
                                     const void *k, gm_kv_type kt, size_t kv_stride, int hd) {
    (void)scores, (void)row_stride, (void)rows, (void)n, (void)G, (void)k, (void)kt, (void)kv_stride, (void)hd;
}
void ATTN_FN(gm_attend_values_rows_)(const float *scores, size_t row_stride, const gm_attend_row *rows, int n, int G,
                                     const void *v, gm_kv_type kt, size_t kv_stride, int hd) {
    (void)scores, (void)row_stride, (void)rows, (void)n, (void)G, (void)v, (void)kt, (void)kv_stride, (void)hd;
}

#endif
