/* tests/support/hf_writer.c — see hf_writer.h */
#include "hf_writer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

bool st_write(const char *path, const st_tensor *t, int n) {
    cJSON *h = cJSON_CreateObject();
    cJSON_AddStringToObject(cJSON_AddObjectToObject(h, "__metadata__"), "format", "pt");
    size_t off = 0;
    for (int i = 0; i < n; i++) {
        cJSON *e = cJSON_AddObjectToObject(h, t[i].name);
        cJSON_AddStringToObject(e, "dtype", t[i].dtype);
        cJSON *shape = cJSON_AddArrayToObject(e, "shape");
        for (int d = 0; d < t[i].nd; d++) cJSON_AddItemToArray(shape, cJSON_CreateNumber((double)t[i].shape[d]));
        cJSON *offs = cJSON_AddArrayToObject(e, "data_offsets");
        cJSON_AddItemToArray(offs, cJSON_CreateNumber((double)off));
        cJSON_AddItemToArray(offs, cJSON_CreateNumber((double)(off + t[i].nbytes)));
        off += t[i].nbytes;
    }
    char *js = cJSON_PrintUnformatted(h);
    cJSON_Delete(h);
    if (!js) return false;
    const size_t jn = strlen(js), padded = (jn + 7) / 8 * 8;
    const uint64_t n64 = padded;
    FILE *f = fopen(path, "wb");
    bool ok = f && fwrite(&n64, 8, 1, f) == 1 && fwrite(js, 1, jn, f) == jn;
    for (size_t i = jn; ok && i < padded; i++) ok = fputc(' ', f) != EOF;
    for (int i = 0; ok && i < n; i++) ok = fwrite(t[i].data, 1, t[i].nbytes, f) == t[i].nbytes;
    if (f && fclose(f) != 0) ok = false;
    free(js);
    return ok;
}

bool st_write_json(const char *path, cJSON *j) {
    char *text = cJSON_Print(j);
    cJSON_Delete(j);
    FILE *f = text ? fopen(path, "wb") : NULL;
    bool ok = f && fputs(text, f) >= 0;
    if (f && fclose(f) != 0) ok = false;
    free(text);
    return ok;
}

static void added_token(cJSON *added, cJSON *dec, int id, const char *content) {
    cJSON *e = cJSON_CreateObject();
    cJSON_AddNumberToObject(e, "id", id);
    cJSON_AddStringToObject(e, "content", content);
    cJSON_AddBoolToObject(e, "single_word", false);
    cJSON_AddBoolToObject(e, "lstrip", false);
    cJSON_AddBoolToObject(e, "rstrip", false);
    cJSON_AddBoolToObject(e, "normalized", false);
    cJSON_AddBoolToObject(e, "special", true);
    cJSON_AddItemToArray(added, e);
    char key[16];
    snprintf(key, sizeof key, "%d", id);
    cJSON *d = cJSON_AddObjectToObject(dec, key);
    cJSON_AddStringToObject(d, "content", content);
    cJSON_AddBoolToObject(d, "special", true);
}

bool hf_write_tokenizer(const char *dir, int n, const char *const *tokens, const double *scores, const bool *special,
                        int unk_id) {
    cJSON *t = cJSON_CreateObject(), *c = cJSON_CreateObject();
    cJSON_AddStringToObject(t, "version", "1.0");
    cJSON *added = cJSON_AddArrayToObject(t, "added_tokens"), *dec = cJSON_AddObjectToObject(c, "added_tokens_decoder");
    cJSON *norm = cJSON_AddObjectToObject(t, "normalizer");
    cJSON_AddStringToObject(norm, "type", "Replace");
    cJSON_AddStringToObject(cJSON_AddObjectToObject(norm, "pattern"), "String", " ");
    cJSON_AddStringToObject(norm, "content", "\xe2\x96\x81");
    cJSON_AddNullToObject(t, "pre_tokenizer");
    cJSON *model = cJSON_AddObjectToObject(t, "model");
    cJSON_AddStringToObject(model, "type", "Unigram");
    cJSON_AddNumberToObject(model, "unk_id", unk_id);
    cJSON *vocab = cJSON_AddArrayToObject(model, "vocab");
    for (int i = 0; i < n; i++) {
        cJSON *e = cJSON_CreateArray();
        cJSON_AddItemToArray(e, cJSON_CreateString(tokens[i]));
        cJSON_AddItemToArray(e, cJSON_CreateNumber(scores[i]));
        cJSON_AddItemToArray(vocab, e);
        if (special[i]) added_token(added, dec, i, tokens[i]);
    }
    cJSON_AddBoolToObject(model, "byte_fallback", true);
    cJSON_AddStringToObject(c, "bos_token", "<bos>");
    cJSON_AddStringToObject(c, "eos_token", "<eos>");
    cJSON_AddStringToObject(c, "unk_token", "<unk>");
    cJSON_AddStringToObject(c, "pad_token", "<pad>");
    cJSON_AddBoolToObject(c, "add_bos_token", true);
    cJSON_AddBoolToObject(c, "add_eos_token", false);
    char path[4096];
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    bool ok = st_write_json(path, t);
    snprintf(path, sizeof path, "%s/tokenizer_config.json", dir);
    return st_write_json(path, c) && ok;
}
