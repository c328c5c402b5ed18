/* tools/cli_media.h — images for `gemma run` / `gemma chat` (--mmproj, --image, /image): the encoder, a
 * secret for naming images, and one call from a file to the rows of a gm_embed_span. */
#ifndef GM_TOOLS_CLI_MEDIA_H
#define GM_TOOLS_CLI_MEDIA_H

#include "gemma.h"
#include "gemma_vision.h"

enum { CLI_MAX_IMAGES = 16 };

typedef struct cli_media {
    gm_vision *v;
    uint64_t secret[2];  /* random per process: image names (gm_image_digest) */
    int32_t placeholder; /* the token image rows carry */
} cli_media;

/* Opens the mmproj for model m (its rows must be the model's width: GM_ERR_ARG otherwise), on pool: the text
 * engine's (NULL: a pool of its own, n_threads). */
gm_status cli_media_open(const char *mmproj, gm_threadpool *pool, int n_threads, const gm_model *m, cli_media *out,
                         gm_error *err);
void cli_media_close(cli_media *c);
/* The image file at path (at most 64 MiB) decoded and encoded. */
gm_status cli_media_load(cli_media *c, const char *path, gm_vision_rows *out, gm_error *err);
/* The span of an image's rows (bidirectional, named by its key). */
gm_embed_span cli_media_span(const cli_media *c, const gm_vision_rows *r);

#endif
