/* engine/mtp.c — Gemma 4's MTP assistant on a target engine (gemma.h, "drafters"): its own backend of the target's
 * kind over the assistant's weights, reading the target's cache through the target's layout; the math is
 * runtime/mtp.c's. */
#include <stdlib.h>

#include "core/error.h"
#include "engine/engine.h"
#include "runtime/mtp.h"

struct gm_mtp {
    gm_engine *e;
    const gm_model *a;
    gm_backend *be;
    gm_mtp_fwd *fwd;
    gm_mtp_fwd_row *rows;
    int max_rows;
};

const gm_model *gm_mtp_assistant(const gm_mtp *d) { return d ? d->a : NULL; }
const gm_engine *gm_mtp_target(const gm_mtp *d) { return d ? d->e : NULL; }

void gm_mtp_free(gm_mtp *d) {
    if (!d) return;
    gm_mtp_fwd_free(d->fwd);
    if (d->be) d->be->ops->free(d->be);
    free(d->rows);
    free(d);
}

gm_status gm_mtp_new(gm_engine *e, const gm_model *a, const gm_mtp_options *opt, gm_mtp **out, gm_error *err) {
    if (!out) return gm_fail(err, GM_ERR_ARG, "mtp: out is NULL");
    *out = NULL;
    if (!e || !a) return gm_fail(err, GM_ERR_ARG, "mtp: no target engine or assistant");
    const gm_mtp_options o = opt ? *opt : (gm_mtp_options){0};
    if (o.max_rows < 0) return gm_fail(err, GM_ERR_ARG, "mtp: max_rows %d", o.max_rows);
    gm_mtp *d = calloc(1, sizeof *d);
    if (!d) return gm_fail(err, GM_ERR_NOMEM, "mtp: out of memory");
    d->e = e, d->a = a;
    d->max_rows = o.max_rows ? o.max_rows : 64;
    d->rows = malloc((size_t)d->max_rows * sizeof *d->rows);
    gm_status st = d->rows ? GM_OK : gm_fail(err, GM_ERR_NOMEM, "mtp: out of memory");
    if (!st && !a->cfg.is_drafter)
        st = gm_fail(err, GM_ERR_ARG, "mtp: %s is not a drafter (arch %s)", gm_source_path(a->src), a->cfg.arch);
    if (!st) st = gm_engine_side_backend(e, a, &e->lay, d->max_rows, "mtp: the assistant", &d->be, err);
    if (!st) st = gm_mtp_fwd_new(e->m, &e->lay, a, d->be, d->max_rows, e->n_ctx, &d->fwd, err);
    if (st) {
        gm_mtp_free(d);
        return st;
    }
    *out = d;
    return GM_OK;
}

gm_status gm_mtp_draft(gm_mtp *d, const gm_mtp_row *rows, int n, gm_error *err) {
    if (!d || !rows || n <= 0) return gm_fail(err, GM_ERR_ARG, "mtp: no rows");
    for (int off = 0; off < n; off += d->max_rows) {
        const int k = n - off < d->max_rows ? n - off : d->max_rows;
        for (int i = 0; i < k; i++) {
            const gm_mtp_row *r = &rows[off + i];
            if (!r->seq || r->seq->e != d->e)
                return gm_fail(err, GM_ERR_ARG, "mtp: row %d: not a sequence of the target engine", off + i);
            d->rows[i] = (gm_mtp_fwd_row){.kv = &r->seq->kv, .pos = r->seq->n_kv, .token = r->token, .h = r->h,
                                          .logits = r->logits, .h_next = r->h_next};
        }
        gm_status st = gm_mtp_fwd_run(d->fwd, d->rows, k, err);
        if (st) return st;
    }
    return GM_OK;
}
