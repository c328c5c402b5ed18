/* tools/cli_media.c — see cli_media.h. */
#include "tools/cli_media.h"
#include "gemma_vision.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/error.h"
#include "core/random.h"

enum { MAX_IMAGE_FILE = 64 << 20 };

gm_status cli_media_open(const char *mmproj, gm_threadpool *pool, int n_threads, const gm_model *m, cli_media *out,
                         gm_error *err) {
    memset(out, 0, sizeof *out);
    const gm_vision_options vo = {.n_threads = n_threads, .pool = pool};
    gm_status st = gm_vision_open(mmproj, &vo, &out->v, err);
    if (st) return st;
    const int want = gm_model_config(m)->d_model, got = gm_vision_embd_dim(out->v);
    if (want != got) {
        cli_media_close(out);
        return gm_fail(err, GM_ERR_ARG, "%s makes rows of %d values, but the model's width is %d: it is the "
                       "encoder of another model", mmproj, got, want);
    }
    gm_random_words(out->secret, 2);
    out->placeholder = gm_tokenizer_image_placeholder(gm_model_tokenizer(m));
    return GM_OK;
}

void cli_media_close(cli_media *c) {
    gm_vision_free(c->v);
    c->v = NULL;
}

gm_status cli_media_load(cli_media *c, const char *path, gm_vision_rows *out, gm_error *err) {
    struct stat sb;
    if (stat(path, &sb) != 0) return gm_fail(err, GM_ERR_IO, "%s: %s", path, strerror(errno));
    if (!S_ISREG(sb.st_mode)) return gm_fail(err, GM_ERR_IO, "%s: not a regular file", path);
    if (sb.st_size > MAX_IMAGE_FILE)
        return gm_fail(err, GM_ERR_UNSUPPORTED, "%s: %lld bytes is more than an image file may have (%d MiB)", path,
                       (long long)sb.st_size, MAX_IMAGE_FILE >> 20);
    FILE *f = fopen(path, "rb");
    if (!f) return gm_fail(err, GM_ERR_IO, "%s: %s", path, strerror(errno));
    const size_t len = (size_t)sb.st_size;
    unsigned char *buf = malloc(len ? len : 1);
    const bool ok = buf && fread(buf, 1, len, f) == len;
    fclose(f);
    gm_status st = ok ? gm_vision_encode_bytes(c->v, buf, len, NULL, c->secret, out, err)
                      : gm_fail(err, buf ? GM_ERR_IO : GM_ERR_NOMEM, "%s: cannot read it", path);
    free(buf);
    return st ? gm_fail_prefix(err, "%s: ", path) : GM_OK;
}

gm_embed_span cli_media_span(const cli_media *c, const gm_vision_rows *r) {
    return (gm_embed_span){.embeds = r->rows, .n = r->n_rows, .placeholder = c->placeholder,
                           .key = {r->key[0], r->key[1]}, .bidirectional = true};
}
