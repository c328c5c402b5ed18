/* model/families/eagle3.c — an EAGLE-3 draft head's keys and tensors (see eagle3.h). */
#include "model/families/eagle3.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/limits.h"
#include "kernels/ops.h"
#include "model/model.h"

gm_status gm_e3_config_keys(const gguf_file *f, gm_config *c, gm_error *err) {
    if (c->n_layers != 1)
        return gm_fail(err, GM_ERR_UNSUPPORTED, "%s: an EAGLE-3 head has one decoder layer (block_count %d)", f->path,
                       c->n_layers);
    uint32_t th = 0;
    gm_status st = gguf_get_u32(f, "eagle3.target_hidden_size", &th, err);
    if (st) return st;
    if (th == 0 || th > GM_MAX_D_MODEL)
        return gm_fail(err, GM_ERR_FORMAT, "%s: eagle3.target_hidden_size %u out of range", f->path, th);
    c->d_backbone = (int)th;
    c->is_drafter = true;
    c->final_softcap = 0.0f;
    if (!gguf_find_tensor(f, "token_embd.weight")) { /* the target's embedding: the vocabulary is the tokenizer's */
        const gguf_value *arr;
        if ((st = gguf_get_arr(f, "tokenizer.ggml.tokens", -1, &arr, err))) return st;
        if (arr->v.arr.n == 0 || arr->v.arr.n > INT32_MAX)
            return gm_fail(err, GM_ERR_FORMAT, "%s: %llu tokens", f->path, (unsigned long long)arr->v.arr.n);
        c->n_vocab = (int)arr->v.arr.n;
    }
    return GM_OK;
}

/* target_layers: exactly three non-negative ids (llama.cpp requires three). */
static gm_status read_taps(const gguf_file *f, int taps[3], gm_error *err) {
    const gguf_value *arr;
    gm_status st = gguf_get_arr(f, "eagle3.target_layers", -1, &arr, err);
    if (st) return st;
    if (arr->v.arr.n != 3)
        return gm_fail(err, GM_ERR_FORMAT, "%s: eagle3.target_layers has %llu ids (3 are needed)", f->path,
                       (unsigned long long)arr->v.arr.n);
    gguf_arr_iter it;
    gguf_value v;
    gguf_arr_iter_init(&it, arr);
    for (int i = 0; gguf_arr_iter_next(&it, &v); i++) {
        const bool is_int = v.type == GGUF_VT_I32 || v.type == GGUF_VT_I64 || v.type == GGUF_VT_I16 || v.type == GGUF_VT_I8;
        const int64_t x = is_int ? v.v.i : (int64_t)v.v.u;
        if (x < 0 || x > GM_MAX_LAYERS)
            return gm_fail(err, GM_ERR_FORMAT, "%s: eagle3.target_layers[%d] = %lld", f->path, i, (long long)x);
        taps[i] = (int)x;
    }
    return GM_OK;
}

static bool flag(const gguf_file *f, const char *key) {
    bool b = false;
    return gguf_find(f, key) && gguf_get_bool(f, key, &b, NULL) == GM_OK && b;
}

/* d2t: n_draft absolute target ids (I64, as llama.cpp's converter writes them). */
static gm_status read_d2t(gm_model *m, gm_e3_weights *w, gm_error *err) {
    const gm_tensor *t = gm_source_tensor(m->src, "d2t");
    if (!t) return GM_OK;
    const char *path = gm_source_path(m->src);
    if (t->type != GM_TYPE_I64 || t->ne[0] != w->n_draft || t->ne[1] != 1 || t->nbytes < (uint64_t)w->n_draft * 8)
        return gm_fail(err, GM_ERR_FORMAT, "%s: d2t must be %d I64 target ids (one per output row)", path, w->n_draft);
    if (!(w->d2t = malloc((size_t)w->n_draft * sizeof *w->d2t)))
        return gm_fail(err, GM_ERR_NOMEM, "model: out of memory");
    for (int i = 0; i < w->n_draft; i++) {
        int64_t id;
        memcpy(&id, (const char *)t->data + (size_t)i * 8, 8);
        if (id < 0 || id >= m->cfg.n_vocab)
            return gm_fail(err, GM_ERR_FORMAT, "%s: d2t[%d] = %lld is not a token of the %d-token vocabulary", path, i,
                           (long long)id, m->cfg.n_vocab);
        w->d2t[i] = (int32_t)id;
    }
    return GM_OK;
}

#define MAT(field, name, cols, rows) \
    if ((st = gm_model_load_matrix(m, name, cols, rows, &field, err))) return st
#define NORM(field, name, n, required)                                                 \
    if ((st = gm_model_load_norm(m, name, n, required, store, &field, err))) return st; \
    store += (n)

gm_status gm_e3_load(gm_model *m, gm_error *err) {
    const gm_config *c = &m->cfg;
    const gguf_file *f = gm_source_gguf(m->src);
    if (!f) return gm_fail(err, GM_ERR_UNSUPPORTED, "%s: EAGLE-3 heads are read from GGUF files", gm_source_path(m->src));
    const int64_t d = c->d_model, bb = c->d_backbone, q = (int64_t)c->n_heads * c->head_dim,
                  kv = (int64_t)c->n_kv_heads * c->head_dim, ff = c->d_ff;
    gm_e3_weights *w = calloc(1, sizeof *w);
    m->family_weights = w;
    if (!w || !(w->store = malloc((size_t)(4 * d + 3 * bb + c->head_dim) * sizeof(float))))
        return gm_fail(err, GM_ERR_NOMEM, "model: out of memory for the EAGLE-3 head");
    float *store = w->store;
    gm_status st = read_taps(f, w->taps, err);
    if (st) return st;
    w->norm_before_fc = flag(f, "eagle3.norm_before_fc");
    w->norm_before_residual = flag(f, "eagle3.norm_before_residual");
    gm_layer *L = &m->layers[0];
    MAT(w->fc, "fc.weight", 3 * bb, d);
    if (w->norm_before_fc) { NORM(w->enc_norm, "enc.output_norm.weight", (int)(3 * bb), true); }
    MAT(L->wq, "blk.0.attn_q.weight", 2 * d, q);
    MAT(L->wk, "blk.0.attn_k.weight", 2 * d, kv);
    MAT(L->wv, "blk.0.attn_v.weight", 2 * d, kv);
    MAT(L->wo, "blk.0.attn_output.weight", q, d);
    MAT(L->gate, "blk.0.ffn_gate.weight", d, ff);
    MAT(L->up, "blk.0.ffn_up.weight", d, ff);
    MAT(L->down, "blk.0.ffn_down.weight", ff, d);
    NORM(L->attn_norm, "blk.0.attn_norm.weight", (int)d, true);
    NORM(w->attn_norm2, "blk.0.attn_norm_2.weight", (int)d, true);
    NORM(L->ffn_norm, "blk.0.ffn_norm.weight", (int)d, true);
    NORM(m->output_norm, "output_norm.weight", (int)d, true);
    w->own_embd = gm_source_tensor(m->src, "token_embd.weight") != NULL;
    if (w->own_embd) { MAT(m->embd, "token_embd.weight", d, c->n_vocab); }
    else if (d != bb)
        return gm_fail(err, GM_ERR_FORMAT, "%s: without token_embd the head embeds with the target's table, so its width "
                       "%lld must be the target's %lld", gm_source_path(m->src), (long long)d, (long long)bb);
    const gm_tensor *out = gm_source_tensor(m->src, "output.weight");
    if (!out)
        return gm_fail(err, GM_ERR_UNSUPPORTED, "%s: an EAGLE-3 head without output.weight (the target's head) is not "
                       "supported yet", gm_source_path(m->src));
    w->n_draft = out->ne[1] > 0 && out->ne[1] <= c->n_vocab ? (int)out->ne[1] : 0;
    if (!w->n_draft) return gm_fail(err, GM_ERR_FORMAT, "%s: output.weight has %lld rows", gm_source_path(m->src),
                                    (long long)out->ne[1]);
    MAT(m->output, "output.weight", d, w->n_draft);
    if ((st = read_d2t(m, w, err))) return st;
    if (!w->d2t && w->n_draft != c->n_vocab)
        return gm_fail(err, GM_ERR_FORMAT, "%s: %d output rows for a %d-token vocabulary and no d2t map",
                       gm_source_path(m->src), w->n_draft, c->n_vocab);
    float *inv = store;
    gm_rope_inv_freq(inv, L->lc.rope_dims, L->lc.rope_base, 1.0);
    L->inv_freq = inv;
    return GM_OK;
}

#undef MAT
#undef NORM

void gm_e3_free(gm_e3_weights *w) {
    if (!w) return;
    free(w->d2t);
    free(w->store);
    free(w);
}
