/* text/tokenizer_hf.c — the vocabulary from a Hugging Face folder.
 *
 * Sources, in the order llama.cpp's converter (convert_hf_to_gguf.py) uses them, so a folder and
 * the GGUF made from it give the same tokenizer:
 *  - tokenizer.model (SentencePiece): pieces, scores and types as stored; ids of unk/bos/eos/pad
 *    from its TrainerSpec; add_space_prefix = NormalizerSpec.add_dummy_prefix.
 *  - else tokenizer.json: model.type "Unigram" (vocab = [[piece, score], ...]) or "BPE"
 *    (vocab = {piece: id}, no scores: each normal piece gets score -rank, rank counted over the
 *    normal pieces in id order, which keeps SentencePiece-BPE's merge order); "<0xXX>" pieces
 *    with byte_fallback are byte tokens; its added_tokens are applied like added_tokens_decoder.
 *    add_space_prefix when a normalizer / pre-tokenizer prepends U+2581.
 *  - tokenizer_config.json: added_tokens_decoder {id: {content, special}} -> CONTROL when special
 *    or looking special (<unused..>, <|..|>, <pad>, <mask>), else USER_DEFINED with U+2581 turned
 *    into ' ' (converter rule), score -1000 either way; bos/eos/unk/pad_token, add_bos_token,
 *    chat_template. special_tokens_map.json fills the special tokens the config lacks. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "text/tokenizer.h"

typedef struct hf_vocab {
    int32_t n, cap;
    char **pieces;
    uint32_t *lens;
    float *scores;
    int32_t *types;
    gm_vocab_spec spec; /* ids and flags */
    char *chat_template;
    int32_t id_limit; /* ids must be below this (0: 1 << 24); see hf_id_limit */
} hf_vocab;

/* Token ids in a JSON file are dense: a vocabulary that lists k entries (+ added tokens) has
 * ids below k, give or take a few gaps the builder fills with "[PADn]" holes. Without a bound
 * a 30-byte file naming id 16777215 made 16 million holes (hundreds of MB, seconds of work);
 * found by fuzz/fuzz_tokenizer_json. 64Ki of slack keeps any plausible gap. */
static int32_t hf_id_limit(int32_t have, int entries) {
    int64_t lim = (int64_t)have + (entries > 0 ? entries : 0) + 65536;
    return lim > (1 << 24) ? (1 << 24) : (int32_t)lim;
}

static void hf_free(hf_vocab *v) {
    for (int32_t i = 0; i < v->n; i++) free(v->pieces[i]);
    free(v->pieces);
    free(v->lens);
    free(v->scores);
    free(v->types);
    free(v->chat_template);
}

static gm_status hf_reserve(hf_vocab *v, int32_t n, gm_error *err) {
    if (n <= v->cap) return GM_OK;
    if (n > (1 << 24)) return gm_fail(err, GM_ERR_FORMAT, "vocabulary of %d pieces (absurd)", n);
    int32_t cap = v->cap * 2 > n ? v->cap * 2 : n;
    if (cap > (1 << 24)) cap = 1 << 24;
    char **p = realloc(v->pieces, sizeof *p * (size_t)cap);
    if (p) v->pieces = p;
    uint32_t *l = p ? realloc(v->lens, sizeof *l * (size_t)cap) : NULL;
    if (l) v->lens = l;
    float *s = l ? realloc(v->scores, sizeof *s * (size_t)cap) : NULL;
    if (s) v->scores = s;
    int32_t *t = s ? realloc(v->types, sizeof *t * (size_t)cap) : NULL;
    if (t) v->types = t;
    if (!t) return gm_fail(err, GM_ERR_NOMEM, "out of memory for %d pieces", n);
    for (int32_t i = v->cap; i < cap; i++) v->pieces[i] = NULL;
    v->cap = cap;
    return GM_OK;
}

/* Sets piece id (growing the vocabulary with "[PADn]" unused holes up to it). */
static gm_status hf_set(hf_vocab *v, int32_t id, const char *s, size_t len, float score, int32_t type,
                        gm_error *err) {
    if (id < 0 || id >= (v->id_limit ? v->id_limit : (1 << 24)))
        return gm_fail(err, GM_ERR_FORMAT, "token id %d out of range (the file lists fewer than %d tokens)", id,
                       v->id_limit ? v->id_limit : (1 << 24));
    gm_status st = hf_reserve(v, id + 1, err);
    if (st) return st;
    while (v->n <= id) {
        char hole[32];
        int w = snprintf(hole, sizeof hole, "[PAD%d]", v->n);
        v->pieces[v->n] = strdup(hole);
        v->lens[v->n] = (uint32_t)w;
        v->scores[v->n] = -1000.0f;
        v->types[v->n] = GM_TOKEN_UNUSED;
        if (!v->pieces[v->n]) return gm_fail(err, GM_ERR_NOMEM, "out of memory");
        v->n++;
    }
    char *c = malloc(len + 1);
    if (!c) return gm_fail(err, GM_ERR_NOMEM, "out of memory");
    memcpy(c, s, len);
    c[len] = 0;
    free(v->pieces[id]);
    v->pieces[id] = c;
    v->lens[id] = (uint32_t)len;
    v->scores[id] = score;
    v->types[id] = type;
    return GM_OK;
}

static char *read_file(const char *dir, const char *name, size_t *len, char *path, size_t path_cap) {
    snprintf(path, path_cap, "%s/%s", dir, name);
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    char *buf = NULL;
    long n = -1;
    if (fseek(f, 0, SEEK_END) == 0) n = ftell(f);
    if (n >= 0 && n < (1L << 30) && fseek(f, 0, SEEK_SET) == 0 && (buf = malloc((size_t)n + 1))) {
        if (fread(buf, 1, (size_t)n, f) != (size_t)n) {
            free(buf);
            buf = NULL;
        } else {
            buf[n] = 0;
            *len = (size_t)n;
        }
    }
    fclose(f);
    return buf;
}

static bool file_exists(const char *dir, const char *name) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "rb");
    if (f) fclose(f);
    return f != NULL;
}

static bool ends_with(const char *s, const char *suf) {
    size_t a = strlen(s), b = strlen(suf);
    return a >= b && memcmp(s + a - b, suf, b) == 0;
}

/* llama.cpp converter's does_token_look_special */
static bool looks_special(const char *s) {
    if (!strcmp(s, "<pad>") || !strcmp(s, "<mask>") || !strcmp(s, "<2mass>") || !strcmp(s, "[@BOS@]"))
        return true;
    if (!strncmp(s, "<|", 2) && ends_with(s, "|>")) return true;
    if (!strncmp(s, "<\xef\xbd\x9c", 4) && ends_with(s, "\xef\xbd\x9c>")) return true;
    return !strncmp(s, "<unused", 7) && ends_with(s, ">");
}

/* One added token: CONTROL when special, else USER_DEFINED with U+2581 -> ' '. */
static gm_status add_token(hf_vocab *v, int32_t id, const char *content, bool special, gm_error *err) {
    if (special || looks_special(content)) return hf_set(v, id, content, strlen(content), -1000.0f, GM_TOKEN_CONTROL, err);
    size_t n = strlen(content);
    char *buf = malloc(n + 1);
    if (!buf) return gm_fail(err, GM_ERR_NOMEM, "out of memory");
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        if (i + 2 < n && !memcmp(content + i, "\xe2\x96\x81", 3)) { buf[k++] = ' '; i += 2; }
        else buf[k++] = content[i];
    }
    gm_status st = hf_set(v, id, buf, k, -1000.0f, GM_TOKEN_USER_DEFINED, err);
    free(buf);
    return st;
}

static gm_status load_spm(const char *dir, hf_vocab *v, gm_error *err) {
    char path[4096];
    size_t len = 0;
    char *buf = read_file(dir, "tokenizer.model", &len, path, sizeof path);
    if (!buf) return gm_fail(err, GM_ERR_IO, "%s: cannot read", path);
    gm_spm_model m;
    gm_status st = gm_spm_parse(buf, len, path, &m, err);
    for (int32_t i = 0; !st && i < m.n; i++)
        st = hf_set(v, i, m.pieces[i].piece, m.pieces[i].len, m.pieces[i].score, m.pieces[i].type, err);
    if (!st) {
        v->spec.unk_id = m.unk_id;
        v->spec.bos_id = m.bos_id;
        v->spec.eos_id = m.eos_id;
        v->spec.pad_id = m.pad_id;
        v->spec.add_space_prefix = m.add_dummy_prefix;
    }
    gm_spm_free(&m);
    free(buf);
    return st;
}

static bool prepends_space(const cJSON *node) {
    /* {"type":"Prepend","prepend":"▁"} or Metaspace with prepend_scheme / add_prefix_space */
    if (!cJSON_IsObject(node)) return false;
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(node, "type");
    if (cJSON_IsString(type)) {
        if (!strcmp(type->valuestring, "Prepend")) return true;
        if (!strcmp(type->valuestring, "Metaspace")) {
            const cJSON *sch = cJSON_GetObjectItemCaseSensitive(node, "prepend_scheme");
            if (cJSON_IsString(sch)) return strcmp(sch->valuestring, "never") != 0;
            return cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(node, "add_prefix_space"));
        }
    }
    const cJSON *seq = cJSON_GetObjectItemCaseSensitive(node, "normalizers");
    if (!seq) seq = cJSON_GetObjectItemCaseSensitive(node, "pretokenizers");
    const cJSON *it;
    cJSON_ArrayForEach(it, seq) if (prepends_space(it)) return true;
    return false;
}

static gm_status load_json_vocab(const cJSON *model, const char *path, hf_vocab *v, gm_error *err) {
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(model, "type");
    const cJSON *vocab = cJSON_GetObjectItemCaseSensitive(model, "vocab");
    bool byte_fallback = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(model, "byte_fallback"));
    gm_status st = GM_OK;
    if (cJSON_IsArray(vocab)) { /* Unigram: [[piece, score], ...] */
        int32_t id = 0;
        const cJSON *e;
        cJSON_ArrayForEach(e, vocab) {
            const cJSON *p = cJSON_GetArrayItem(e, 0), *s = cJSON_GetArrayItem(e, 1);
            if (!cJSON_IsString(p) || !cJSON_IsNumber(s))
                return gm_fail(err, GM_ERR_FORMAT, "%s: model.vocab[%d] is not [piece, score]", path, id);
            if ((st = hf_set(v, id, p->valuestring, strlen(p->valuestring), (float)s->valuedouble, GM_TOKEN_NORMAL, err))) return st;
            id++;
        }
        const cJSON *unk = cJSON_GetObjectItemCaseSensitive(model, "unk_id");
        if (cJSON_IsNumber(unk)) v->spec.unk_id = unk->valueint;
    } else if (cJSON_IsObject(vocab)) { /* BPE: {piece: id} */
        const cJSON *e;
        cJSON_ArrayForEach(e, vocab) {
            if (!cJSON_IsNumber(e) || e->valuedouble < 0 || e->valuedouble >= (1 << 24))
                return gm_fail(err, GM_ERR_FORMAT, "%s: model.vocab['%.64s'] is not a valid id", path, e->string);
            if ((st = hf_set(v, e->valueint, e->string, strlen(e->string), 0.0f, GM_TOKEN_NORMAL, err))) return st;
        }
        const cJSON *unk = cJSON_GetObjectItemCaseSensitive(model, "unk_token");
        if (cJSON_IsString(unk)) {
            for (int32_t i = 0; i < v->n; i++)
                if (!strcmp(v->pieces[i], unk->valuestring)) v->spec.unk_id = i;
        }
    } else {
        return gm_fail(err, GM_ERR_UNSUPPORTED, "%s: model.type '%s' has no vocab we can read", path,
                       cJSON_IsString(type) ? type->valuestring : "?");
    }
    int32_t rank = 0;
    for (int32_t i = 0; i < v->n; i++) {
        if (byte_fallback && v->lens[i] == 6 && !strncmp(v->pieces[i], "<0x", 3) && v->pieces[i][5] == '>') {
            v->types[i] = GM_TOKEN_BYTE;
            v->scores[i] = 0.0f;
        } else if (cJSON_IsObject(vocab) && v->types[i] == GM_TOKEN_NORMAL) {
            v->scores[i] = -(float)rank++;
        }
    }
    if (v->spec.unk_id >= 0 && v->spec.unk_id < v->n) v->types[v->spec.unk_id] = GM_TOKEN_UNKNOWN;
    return GM_OK;
}

/* tokenizer.json's text buf[0..len) (path names it in errors). */
static gm_status load_json_text(const char *buf, size_t len, const char *path, hf_vocab *v, gm_error *err) {
    cJSON *root = cJSON_ParseWithLength(buf, len);
    if (!root) return gm_fail(err, GM_ERR_FORMAT, "%s: not valid JSON", path);
    gm_status st = GM_OK;
    const cJSON *model = cJSON_GetObjectItemCaseSensitive(root, "model");
    if (!cJSON_IsObject(model)) {
        st = gm_fail(err, GM_ERR_FORMAT, "%s: no \"model\" object", path);
        goto done;
    }
    v->spec.unk_id = -1;
    v->id_limit = hf_id_limit(0, cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(model, "vocab")) +
                                     cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(root, "added_tokens")));
    if ((st = load_json_vocab(model, path, v, err))) goto done;
    v->spec.add_space_prefix = prepends_space(cJSON_GetObjectItemCaseSensitive(root, "normalizer")) ||
                               prepends_space(cJSON_GetObjectItemCaseSensitive(root, "pre_tokenizer"));
    const cJSON *e;
    cJSON_ArrayForEach(e, cJSON_GetObjectItemCaseSensitive(root, "added_tokens")) {
        const cJSON *id = cJSON_GetObjectItemCaseSensitive(e, "id");
        const cJSON *content = cJSON_GetObjectItemCaseSensitive(e, "content");
        if (!cJSON_IsNumber(id) || !cJSON_IsString(content)) {
            st = gm_fail(err, GM_ERR_FORMAT, "%s: an added_tokens entry lacks id or content", path);
            goto done;
        }
        if ((st = add_token(v, id->valueint, content->valuestring,
                            cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(e, "special")), err)))
            goto done;
    }
done:
    cJSON_Delete(root);
    return st;
}

static gm_status load_json(const char *dir, hf_vocab *v, gm_error *err) {
    char path[4096];
    size_t len = 0;
    char *buf = read_file(dir, "tokenizer.json", &len, path, sizeof path);
    if (!buf) return gm_fail(err, GM_ERR_IO, "%s: cannot read", path);
    gm_status st = load_json_text(buf, len, path, v, err);
    free(buf);
    return st ? gm_fail_prefix(err, "%s: ", dir) : GM_OK;
}

static const char *token_string(const cJSON *node) {
    if (cJSON_IsString(node)) return node->valuestring;
    const cJSON *c = cJSON_GetObjectItemCaseSensitive(node, "content");
    return cJSON_IsString(c) ? c->valuestring : NULL;
}

static int32_t find_piece(const hf_vocab *v, const char *s) {
    for (int32_t i = 0; s && i < v->n; i++)
        if (v->lens[i] == strlen(s) && !memcmp(v->pieces[i], s, v->lens[i])) return i;
    return -1;
}

/* bos/eos/unk/pad from a config object; only fills ids that *found says are still unset. */
static void apply_special_names(hf_vocab *v, const cJSON *cfg, bool found[4]) {
    static const char *keys[4] = {"bos_token", "eos_token", "unk_token", "pad_token"};
    int32_t *ids[4] = {&v->spec.bos_id, &v->spec.eos_id, &v->spec.unk_id, &v->spec.pad_id};
    for (int k = 0; k < 4; k++) {
        if (found[k]) continue;
        int32_t id = find_piece(v, token_string(cJSON_GetObjectItemCaseSensitive(cfg, keys[k])));
        if (id >= 0) { *ids[k] = id; found[k] = true; }
    }
}

static gm_status apply_config(const char *dir, hf_vocab *v, gm_error *err) {
    char path[4096];
    size_t len = 0;
    bool found[4] = {false, false, false, false};
    char *buf = read_file(dir, "tokenizer_config.json", &len, path, sizeof path);
    if (buf) {
        cJSON *cfg = cJSON_ParseWithLength(buf, len);
        free(buf);
        if (!cfg) return gm_fail(err, GM_ERR_FORMAT, "%s: not valid JSON", path);
        gm_status st = GM_OK;
        const cJSON *e;
        const cJSON *decoder = cJSON_GetObjectItemCaseSensitive(cfg, "added_tokens_decoder");
        v->id_limit = hf_id_limit(v->n, cJSON_GetArraySize(decoder));
        cJSON_ArrayForEach(e, decoder) {
            char *end = NULL;
            long id = strtol(e->string ? e->string : "", &end, 10);
            const cJSON *content = cJSON_GetObjectItemCaseSensitive(e, "content");
            if (!end || *end || id < 0 || !cJSON_IsString(content)) {
                st = gm_fail(err, GM_ERR_FORMAT, "%s: bad added_tokens_decoder entry '%.32s'", path, e->string ? e->string : "");
                break;
            }
            if ((st = add_token(v, (int32_t)id, content->valuestring,
                                cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(e, "special")), err)))
                break;
        }
        if (!st) {
            apply_special_names(v, cfg, found);
            const cJSON *ab = cJSON_GetObjectItemCaseSensitive(cfg, "add_bos_token");
            if (cJSON_IsBool(ab)) v->spec.add_bos = cJSON_IsTrue(ab);
            const cJSON *tmpl = cJSON_GetObjectItemCaseSensitive(cfg, "chat_template");
            const char *text = cJSON_IsString(tmpl) ? tmpl->valuestring : NULL;
            const cJSON *tmpls = cJSON_IsArray(tmpl) ? tmpl : NULL;
            cJSON_ArrayForEach(e, tmpls) { /* [{name, template}] */
                const cJSON *nm = cJSON_GetObjectItemCaseSensitive(e, "name");
                const cJSON *tt = cJSON_GetObjectItemCaseSensitive(e, "template");
                if (cJSON_IsString(nm) && !strcmp(nm->valuestring, "default") && cJSON_IsString(tt)) text = tt->valuestring;
            }
            if (text && !(v->chat_template = strdup(text))) st = gm_fail(err, GM_ERR_NOMEM, "out of memory");
        }
        cJSON_Delete(cfg);
        if (st) return st;
    }
    buf = read_file(dir, "special_tokens_map.json", &len, path, sizeof path);
    if (buf) {
        cJSON *map = cJSON_ParseWithLength(buf, len);
        free(buf);
        if (!map) return gm_fail(err, GM_ERR_FORMAT, "%s: not valid JSON", path);
        apply_special_names(v, map, found);
        cJSON_Delete(map);
    }
    /* a separate chat_template.jinja (newer transformers) when the config has none */
    if (!v->chat_template) v->chat_template = read_file(dir, "chat_template.jinja", &len, path, sizeof path);
    return GM_OK;
}

static gm_vocab_spec hf_default_spec(void) {
    return (gm_vocab_spec){.bos_id = -1, .eos_id = -1, .unk_id = -1, .pad_id = -1, .eot_id = -1,
                           .add_bos = true, .add_space_prefix = true};
}

static gm_status hf_build(hf_vocab *v, const char *name, gm_tokenizer **out, gm_error *err) {
    v->spec.n = v->n;
    v->spec.pieces = (const char *const *)v->pieces;
    v->spec.piece_lens = v->lens;
    v->spec.scores = v->scores;
    v->spec.types = v->types;
    v->spec.chat_template = v->chat_template;
    v->spec.chat_template_len = v->chat_template ? strlen(v->chat_template) : 0;
    return gm_tokenizer_build(&v->spec, name, out, err);
}

gm_status gm_tokenizer_from_hf_dir(const char *dir, gm_tokenizer **out, gm_error *err) {
    if (!dir || !out) return gm_fail(err, GM_ERR_ARG, "gm_tokenizer_from_hf_dir: NULL argument");
    *out = NULL;
    hf_vocab v = {0};
    v.spec = hf_default_spec();
    gm_status st;
    if (file_exists(dir, "tokenizer.model")) st = load_spm(dir, &v, err);
    else if (file_exists(dir, "tokenizer.json")) st = load_json(dir, &v, err);
    else st = gm_fail(err, GM_ERR_NOT_FOUND, "%s: no tokenizer.model or tokenizer.json", dir);
    if (!st) st = apply_config(dir, &v, err);
    if (!st) st = hf_build(&v, dir, out, err);
    hf_free(&v);
    return st;
}

gm_status gm_tokenizer_from_hf_json(const void *buf, size_t len, const char *name, gm_tokenizer **out,
                                    gm_error *err) {
    if (!out) return gm_fail(err, GM_ERR_ARG, "gm_tokenizer_from_hf_json: out is NULL");
    *out = NULL;
    if (!name) name = "tokenizer.json";
    if (!buf && len) return gm_fail(err, GM_ERR_ARG, "%s: NULL buffer", name);
    hf_vocab v = {0};
    v.spec = hf_default_spec();
    v.spec.add_bos = false; /* add_bos_token and bos_token live in tokenizer_config.json, absent here */
    gm_status st = load_json_text(buf ? buf : "", len, name, &v, err);
    if (!st) st = hf_build(&v, name, out, err);
    hf_free(&v);
    return st;
}

gm_status gm_tokenizer_from_spm_model(const void *buf, size_t len, const char *name, gm_tokenizer **out,
                                      gm_error *err) {
    if (!out) return gm_fail(err, GM_ERR_ARG, "gm_tokenizer_from_spm_model: out is NULL");
    *out = NULL;
    gm_spm_model m;
    gm_status st = gm_spm_parse(buf, len, name, &m, err);
    if (st) return st;
    const char **pieces = malloc(sizeof *pieces * (size_t)m.n);
    uint32_t *lens = malloc(sizeof *lens * (size_t)m.n);
    float *scores = malloc(sizeof *scores * (size_t)m.n);
    int32_t *types = malloc(sizeof *types * (size_t)m.n);
    if (!pieces || !lens || !scores || !types) {
        st = gm_fail(err, GM_ERR_NOMEM, "out of memory");
    } else {
        for (int32_t i = 0; i < m.n; i++) {
            pieces[i] = m.pieces[i].piece;
            lens[i] = m.pieces[i].len;
            scores[i] = m.pieces[i].score;
            types[i] = m.pieces[i].type;
        }
        gm_vocab_spec spec = {.n = m.n, .pieces = pieces, .piece_lens = lens, .scores = scores, .types = types,
                              .bos_id = m.bos_id, .eos_id = m.eos_id, .unk_id = m.unk_id, .pad_id = m.pad_id,
                              .eot_id = -1, .add_bos = m.bos_id >= 0 && m.bos_id < m.n,
                              .add_space_prefix = m.add_dummy_prefix};
        st = gm_tokenizer_build(&spec, name ? name : "tokenizer.model", out, err);
    }
    free(pieces);
    free(lens);
    free(scores);
    free(types);
    gm_spm_free(&m);
    return st;
}
