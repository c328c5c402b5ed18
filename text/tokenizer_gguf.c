/* text/tokenizer_gguf.c — the vocabulary from GGUF tokenizer.* metadata, and gm_tokenizer_open. */
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/error.h"
#include "text/tokenizer.h"

/* Optional integer key: *out keeps its default when the key is absent; a present key of the
 * wrong type is an error. */
static gm_status opt_i32(const gguf_file *f, const char *key, int32_t *out, gm_error *err) {
    if (!gguf_find(f, key)) return GM_OK;
    return gguf_get_i32(f, key, out, err);
}

static gm_status opt_bool(const gguf_file *f, const char *key, bool *out, gm_error *err) {
    if (!gguf_find(f, key)) return GM_OK;
    return gguf_get_bool(f, key, out, err);
}

/* Reads a numeric array (F32 or an integer type) of at least n elements as floats / ints. */
static gm_status read_numbers(const gguf_file *f, const char *key, int32_t n, float *fv, int32_t *iv,
                              gm_error *err) {
    const gguf_value *arr;
    gm_status st = gguf_get_arr(f, key, -1, &arr, err);
    if (st) return st;
    gguf_vtype et = arr->v.arr.elem;
    bool ok_type = fv ? (et == GGUF_VT_F32 || et == GGUF_VT_I32) : (et == GGUF_VT_I32);
    if (!ok_type)
        return gm_fail(err, GM_ERR_TYPE, "%s: %s has elements of type %s", f->path, key, gguf_vtype_name(et));
    if (arr->v.arr.n < (uint64_t)n)
        return gm_fail(err, GM_ERR_FORMAT, "%s: %s has %llu elements for %d tokens", f->path, key,
                       (unsigned long long)arr->v.arr.n, n);
    gguf_arr_iter it;
    gguf_arr_iter_init(&it, arr);
    gguf_value e;
    for (int32_t i = 0; i < n && gguf_arr_iter_next(&it, &e); i++) {
        if (fv) fv[i] = et == GGUF_VT_F32 ? (float)e.v.f : (float)e.v.i;
        else iv[i] = (int32_t)e.v.i;
    }
    return GM_OK;
}

gm_status gm_tokenizer_from_gguf(const gguf_file *f, gm_tokenizer **out, gm_error *err) {
    if (!f || !out) return gm_fail(err, GM_ERR_ARG, "gm_tokenizer_from_gguf: NULL argument");
    *out = NULL;
    gguf_str model;
    gm_status st = gguf_get_str(f, "tokenizer.ggml.model", &model, err);
    if (st) return st;
    if (model.len != 5 || memcmp(model.ptr, "llama", 5) != 0)
        return gm_fail(err, GM_ERR_UNSUPPORTED,
                       "%s: tokenizer.ggml.model is '%.*s'; only 'llama' (SentencePiece) is supported",
                       f->path, (int)(model.len > 64 ? 64 : model.len), model.ptr);
    const gguf_value *tokens;
    if ((st = gguf_get_arr(f, "tokenizer.ggml.tokens", GGUF_VT_STRING, &tokens, err))) return st;
    if (tokens->v.arr.n == 0 || tokens->v.arr.n > (1u << 24))
        return gm_fail(err, GM_ERR_FORMAT, "%s: tokenizer.ggml.tokens has %llu entries", f->path,
                       (unsigned long long)tokens->v.arr.n);
    int32_t n = (int32_t)tokens->v.arr.n;
    const char **pieces = malloc(sizeof *pieces * (size_t)n);
    uint32_t *lens = malloc(sizeof *lens * (size_t)n);
    float *scores = malloc(sizeof *scores * (size_t)n);
    int32_t *types = malloc(sizeof *types * (size_t)n);
    if (!pieces || !lens || !scores || !types) {
        st = gm_fail(err, GM_ERR_NOMEM, "%s: out of memory for %d tokens", f->path, n);
        goto done;
    }
    gguf_arr_iter it;
    gguf_arr_iter_init(&it, tokens);
    gguf_value e;
    for (int32_t i = 0; i < n; i++) {
        if (!gguf_arr_iter_next(&it, &e) || e.v.str.len > (1u << 20)) {
            st = gm_fail(err, GM_ERR_FORMAT, "%s: tokenizer.ggml.tokens[%d] is unreadable or too long", f->path, i);
            goto done;
        }
        pieces[i] = e.v.str.ptr;
        lens[i] = (uint32_t)e.v.str.len;
        scores[i] = 0.0f;
        types[i] = GM_TOKEN_NORMAL;
    }
    if (gguf_find(f, "tokenizer.ggml.scores") &&
        (st = read_numbers(f, "tokenizer.ggml.scores", n, scores, NULL, err)))
        goto done;
    if (gguf_find(f, "tokenizer.ggml.token_type") &&
        (st = read_numbers(f, "tokenizer.ggml.token_type", n, NULL, types, err)))
        goto done;
    /* llama.cpp's SentencePiece defaults when a key is absent */
    gm_vocab_spec spec = {.n = n, .pieces = pieces, .piece_lens = lens, .scores = scores, .types = types,
                          .bos_id = 1, .eos_id = 2, .unk_id = 0, .pad_id = -1, .eot_id = -1,
                          .add_bos = true, .add_space_prefix = true};
    if ((st = opt_i32(f, "tokenizer.ggml.bos_token_id", &spec.bos_id, err)) ||
        (st = opt_i32(f, "tokenizer.ggml.eos_token_id", &spec.eos_id, err)) ||
        (st = opt_i32(f, "tokenizer.ggml.unknown_token_id", &spec.unk_id, err)) ||
        (st = opt_i32(f, "tokenizer.ggml.padding_token_id", &spec.pad_id, err)) ||
        (st = opt_i32(f, "tokenizer.ggml.eot_token_id", &spec.eot_id, err)) ||
        (st = opt_bool(f, "tokenizer.ggml.add_bos_token", &spec.add_bos, err)) ||
        (st = opt_bool(f, "tokenizer.ggml.add_space_prefix", &spec.add_space_prefix, err)))
        goto done;
    if (gguf_find(f, "tokenizer.chat_template")) {
        gguf_str tmpl;
        if ((st = gguf_get_str(f, "tokenizer.chat_template", &tmpl, err))) goto done;
        spec.chat_template = tmpl.ptr;
        spec.chat_template_len = (size_t)tmpl.len;
    }
    st = gm_tokenizer_build(&spec, f->path, out, err);
done:
    free(pieces);
    free(lens);
    free(scores);
    free(types);
    return st;
}

gm_status gm_tokenizer_open(const char *path, gm_tokenizer **out, gm_error *err) {
    if (!path || !out) return gm_fail(err, GM_ERR_ARG, "gm_tokenizer_open: NULL path or out");
    *out = NULL;
    struct stat sb;
    if (stat(path, &sb) != 0) return gm_fail(err, GM_ERR_IO, "%s: cannot open (no such file or folder)", path);
    if (S_ISDIR(sb.st_mode)) return gm_tokenizer_from_hf_dir(path, out, err);
    gguf_file *f = NULL;
    gm_status st = gguf_open(path, NULL, &f, err);
    if (st) return st;
    st = gm_tokenizer_from_gguf(f, out, err);
    gguf_close(f);
    return st;
}
