/* text/spm_proto.c — a minimal reader of SentencePiece's tokenizer.model (a ModelProto protobuf).
 *
 * Only what the tokenizer needs: ModelProto.pieces (1) = {piece (1), score (2), type (3)},
 * TrainerSpec (2) unk/bos/eos/pad ids (40..43), NormalizerSpec (3) add_dummy_prefix (3).
 * Every other field is skipped by its wire type. Every length is checked against what is left
 * of its enclosing message, so a corrupt file gives an error, never a read past the buffer. */
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "text/tokenizer.h"

typedef struct pb {
    const uint8_t *p, *end;
    const char *name;
} pb;

static gm_status pb_varint(pb *r, uint64_t *out, gm_error *err) {
    uint64_t v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
        if (r->p >= r->end) return gm_fail(err, GM_ERR_FORMAT, "%s: truncated varint", r->name);
        uint8_t b = *r->p++;
        v |= (uint64_t)(b & 0x7F) << shift;
        if (!(b & 0x80)) { *out = v; return GM_OK; }
    }
    return gm_fail(err, GM_ERR_FORMAT, "%s: varint longer than 10 bytes", r->name);
}

/* Reads a field key; *wire is the wire type. */
static gm_status pb_key(pb *r, uint32_t *field, int *wire, gm_error *err) {
    uint64_t k;
    gm_status st = pb_varint(r, &k, err);
    if (st) return st;
    *field = (uint32_t)(k >> 3);
    *wire = (int)(k & 7);
    if (*field == 0) return gm_fail(err, GM_ERR_FORMAT, "%s: protobuf field number 0", r->name);
    return GM_OK;
}

/* A length-delimited payload as a sub-reader. */
static gm_status pb_bytes(pb *r, pb *sub, gm_error *err) {
    uint64_t n;
    gm_status st = pb_varint(r, &n, err);
    if (st) return st;
    if (n > (uint64_t)(r->end - r->p))
        return gm_fail(err, GM_ERR_FORMAT, "%s: field of %llu bytes overruns its message (%zu left)",
                       r->name, (unsigned long long)n, (size_t)(r->end - r->p));
    *sub = (pb){r->p, r->p + n, r->name};
    r->p += n;
    return GM_OK;
}

static gm_status pb_skip(pb *r, int wire, gm_error *err) {
    uint64_t v;
    pb sub;
    switch (wire) {
    case 0: return pb_varint(r, &v, err);
    case 1:
        if (r->end - r->p < 8) return gm_fail(err, GM_ERR_FORMAT, "%s: truncated fixed64", r->name);
        r->p += 8;
        return GM_OK;
    case 2: return pb_bytes(r, &sub, err);
    case 5:
        if (r->end - r->p < 4) return gm_fail(err, GM_ERR_FORMAT, "%s: truncated fixed32", r->name);
        r->p += 4;
        return GM_OK;
    default: return gm_fail(err, GM_ERR_FORMAT, "%s: unsupported protobuf wire type %d", r->name, wire);
    }
}

static gm_status pb_float(pb *r, float *out, gm_error *err) {
    if (r->end - r->p < 4) return gm_fail(err, GM_ERR_FORMAT, "%s: truncated float", r->name);
    uint32_t u = (uint32_t)r->p[0] | (uint32_t)r->p[1] << 8 | (uint32_t)r->p[2] << 16 | (uint32_t)r->p[3] << 24;
    memcpy(out, &u, 4);
    r->p += 4;
    return GM_OK;
}

static gm_status parse_piece(pb *r, gm_spm_piece *out, gm_error *err) {
    *out = (gm_spm_piece){.piece = "", .len = 0, .score = 0.0f, .type = GM_TOKEN_NORMAL};
    while (r->p < r->end) {
        uint32_t field;
        int wire;
        gm_status st = pb_key(r, &field, &wire, err);
        if (st) return st;
        if (field == 1 && wire == 2) {
            pb s;
            if ((st = pb_bytes(r, &s, err))) return st;
            out->piece = (const char *)s.p;
            out->len = (uint32_t)(s.end - s.p);
        } else if (field == 2 && wire == 5) {
            if ((st = pb_float(r, &out->score, err))) return st;
        } else if (field == 3 && wire == 0) {
            uint64_t v;
            if ((st = pb_varint(r, &v, err))) return st;
            out->type = v <= GM_TOKEN_BYTE ? (int32_t)v : GM_TOKEN_UNDEFINED;
        } else if ((st = pb_skip(r, wire, err))) {
            return st;
        }
    }
    return GM_OK;
}

static gm_status parse_trainer(pb *r, gm_spm_model *m, gm_error *err) {
    while (r->p < r->end) {
        uint32_t field;
        int wire;
        gm_status st = pb_key(r, &field, &wire, err);
        if (st) return st;
        if (field >= 40 && field <= 43 && wire == 0) {
            uint64_t v;
            if ((st = pb_varint(r, &v, err))) return st;
            int32_t id = (int32_t)(int64_t)v; /* negative int32 is a sign-extended varint */
            if (field == 40) m->unk_id = id;
            else if (field == 41) m->bos_id = id;
            else if (field == 42) m->eos_id = id;
            else m->pad_id = id;
        } else if ((st = pb_skip(r, wire, err))) {
            return st;
        }
    }
    return GM_OK;
}

static gm_status parse_normalizer(pb *r, gm_spm_model *m, gm_error *err) {
    while (r->p < r->end) {
        uint32_t field;
        int wire;
        gm_status st = pb_key(r, &field, &wire, err);
        if (st) return st;
        if (field == 3 && wire == 0) {
            uint64_t v;
            if ((st = pb_varint(r, &v, err))) return st;
            m->add_dummy_prefix = v != 0;
        } else if ((st = pb_skip(r, wire, err))) {
            return st;
        }
    }
    return GM_OK;
}

gm_status gm_spm_parse(const void *buf, size_t len, const char *name, gm_spm_model *m, gm_error *err) {
    if (!m) return gm_fail(err, GM_ERR_ARG, "gm_spm_parse: out is NULL");
    *m = (gm_spm_model){.unk_id = 0, .bos_id = 1, .eos_id = 2, .pad_id = -1, .add_dummy_prefix = true};
    if (!name) name = "tokenizer.model";
    if (!buf && len) return gm_fail(err, GM_ERR_ARG, "%s: NULL buffer", name);
    /* first pass: count pieces, so the array is sized once and by the data itself */
    pb r = {buf, (const uint8_t *)buf + len, name};
    size_t count = 0;
    gm_status st = GM_OK;
    while (r.p < r.end) {
        uint32_t field;
        int wire;
        if ((st = pb_key(&r, &field, &wire, err))) return st;
        if (field == 1 && wire == 2) count++;
        if ((st = pb_skip(&r, wire, err))) return st;
    }
    if (count == 0) return gm_fail(err, GM_ERR_FORMAT, "%s: no pieces (not a SentencePiece model?)", name);
    if (count > (1u << 24)) return gm_fail(err, GM_ERR_FORMAT, "%s: %zu pieces (absurd)", name, count);
    m->pieces = malloc(count * sizeof *m->pieces);
    if (!m->pieces) return gm_fail(err, GM_ERR_NOMEM, "%s: out of memory for %zu pieces", name, count);
    r = (pb){buf, (const uint8_t *)buf + len, name};
    while (r.p < r.end && !st) {
        uint32_t field;
        int wire;
        pb sub;
        if ((st = pb_key(&r, &field, &wire, err))) break;
        if (wire != 2 || field > 3) { st = pb_skip(&r, wire, err); continue; }
        if ((st = pb_bytes(&r, &sub, err))) break;
        if (field == 1) st = parse_piece(&sub, &m->pieces[m->n++], err);
        else if (field == 2) st = parse_trainer(&sub, m, err);
        else if (field == 3) st = parse_normalizer(&sub, m, err);
    }
    if (st) gm_spm_free(m);
    return st;
}

void gm_spm_free(gm_spm_model *m) {
    if (!m) return;
    free(m->pieces);
    m->pieces = NULL;
    m->n = 0;
}
