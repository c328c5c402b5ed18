/* server/media.c — images in requests (OpenAI image_url parts): the URL read (data: URIs; file:// only under
 * --media-path; remote URLs refused: the server never fetches), the image decoded within the limits, named by
 * a keyed digest of its pixels, and encoded — once: an LRU cache of recent images' rows serves a repeated
 * image (a conversation resends every earlier image with each turn) without the encoder.
 *
 * Threads: connection threads call media_load; the encoder runs one image at a time, in arrival order, on the
 * server's one thread pool: the scheduler's engine keeps decoding meanwhile, the two taking turns op by op
 * (one thread per core, not two). The cache is under mu. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/error.h"
#include "gemma_vision.h"
#include "core/random.h"
#include "server/server.h"

typedef struct cached_image {
    uint64_t key[2];
    float *rows;
    int n_rows;
    int width, height;
    uint64_t used; /* tick of the last use: the least recent goes first */
} cached_image;

struct srv_media {
    gm_vision *v;
    int d;                   /* floats per row */
    srv_turns turns;         /* the encoder, one image at a time */
    uint64_t secret[2];
    int32_t placeholder;
    char *root;              /* --media-path, resolved (NULL: file:// refused) */
    gm_image_limits lim;
    pthread_mutex_t mu;      /* the cache and the counters */
    cached_image *c;
    int n, cap;
    size_t bytes, budget;
    uint64_t tick;
    srv_media_stats st;
};

gm_status media_new(const srv_options *o, const gm_model *m, gm_threadpool *pool, srv_media **out, gm_error *err) {
    *out = NULL;
    if (!o->mmproj_path) {
        if (o->media_path) return gm_fail(err, GM_ERR_ARG, "--media-path needs --mmproj (images need the encoder)");
        return GM_OK;
    }
    srv_media *x = calloc(1, sizeof *x);
    if (!x) return gm_fail(err, GM_ERR_NOMEM, "out of memory");
    const gm_vision_options vo = {.n_threads = o->threads, .pool = pool};
    gm_status st = gm_vision_open(o->mmproj_path, &vo, &x->v, err);
    if (!st && gm_vision_embd_dim(x->v) != gm_model_config(m)->d_model)
        st = gm_fail(err, GM_ERR_ARG, "the encoder makes rows of the wrong width for this model: it is another "
                         "model's mmproj");
    if (!st && o->media_path && !(x->root = realpath(o->media_path, NULL)))
        st = gm_fail(err, GM_ERR_IO, "--media-path: cannot resolve the folder");
    if (st) {
        gm_vision_free(x->v);
        free(x);
        return st;
    }
    x->d = gm_vision_embd_dim(x->v);
    turns_init(&x->turns);
    pthread_mutex_init(&x->mu, NULL);
    gm_random_words(x->secret, 2);
    x->placeholder = gm_tokenizer_image_placeholder(gm_model_tokenizer(m));
    x->lim = (gm_image_limits){.max_pixels = o->image_max_pixels};
    x->budget = o->image_cache_bytes;
    *out = x;
    return GM_OK;
}

void media_free(srv_media *x) {
    if (!x) return;
    for (int i = 0; i < x->n; i++) free(x->c[i].rows);
    free(x->c);
    free(x->root);
    gm_vision_free(x->v);
    turns_destroy(&x->turns);
    pthread_mutex_destroy(&x->mu);
    free(x);
}

int32_t media_placeholder(const srv_media *x) { return x->placeholder; }
gm_vision *media_vision(srv_media *x) { return x ? x->v : NULL; }

void media_stats(srv_media *x, srv_media_stats *out) {
    memset(out, 0, sizeof *out);
    if (!x) return;
    pthread_mutex_lock(&x->mu);
    *out = x->st;
    pthread_mutex_unlock(&x->mu);
}

/* ---------------------------------------------------------------- the cache */

/* A copy of the cached rows of key into out; false when absent. */
static bool cache_get(srv_media *x, const uint64_t key[2], gm_vision_rows *out) {
    bool hit = false;
    pthread_mutex_lock(&x->mu);
    for (int i = 0; i < x->n && !hit; i++) {
        cached_image *c = &x->c[i];
        if (c->key[0] != key[0] || c->key[1] != key[1]) continue;
        const size_t sz = (size_t)c->n_rows * (size_t)x->d * sizeof(float);
        if ((out->rows = malloc(sz))) {
            memcpy(out->rows, c->rows, sz);
            *out = (gm_vision_rows){out->rows, c->n_rows, {key[0], key[1]}, c->width, c->height};
            c->used = ++x->tick;
            hit = true;
        }
    }
    x->st.cache_hits += hit;
    pthread_mutex_unlock(&x->mu);
    return hit;
}

/* Keeps a copy of r, evicting the least recently used images past the budget. */
static void cache_put(srv_media *x, const gm_vision_rows *r) {
    const size_t sz = (size_t)r->n_rows * (size_t)x->d * sizeof(float);
    if (sz > x->budget) return;
    float *copy = malloc(sz);
    if (!copy) return;
    memcpy(copy, r->rows, sz);
    pthread_mutex_lock(&x->mu);
    while (x->n > 0 && x->bytes + sz > x->budget) {
        int old = 0;
        for (int i = 1; i < x->n; i++)
            if (x->c[i].used < x->c[old].used) old = i;
        x->bytes -= (size_t)x->c[old].n_rows * (size_t)x->d * sizeof(float);
        free(x->c[old].rows);
        x->c[old] = x->c[--x->n];
    }
    if (x->n == x->cap) {
        const int cap = x->cap ? 2 * x->cap : 16;
        cached_image *c = realloc(x->c, (size_t)cap * sizeof *c);
        if (!c) {
            pthread_mutex_unlock(&x->mu);
            free(copy);
            return;
        }
        x->c = c, x->cap = cap;
    }
    x->c[x->n++] = (cached_image){{r->key[0], r->key[1]}, copy, r->n_rows, r->width, r->height, ++x->tick};
    x->bytes += sz;
    pthread_mutex_unlock(&x->mu);
}

/* ---------------------------------------------------------------- URLs */

static int b64_value(unsigned char c) {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+' || c == '-') return 62; /* standard and URL-safe alphabets */
    if (c == '/' || c == '_') return 63;
    return -1;
}

/* Standard base64 (padding optional); NULL for any other character. */
static unsigned char *b64_decode(const char *s, size_t n, size_t *out_len) {
    while (n > 0 && s[n - 1] == '=') n--;
    if (n % 4 == 1) return NULL;
    unsigned char *out = malloc(n / 4 * 3 + 3), *p = out;
    if (!out) return NULL;
    uint32_t acc = 0;
    int bits = 0;
    for (size_t i = 0; i < n; i++) {
        const int v = b64_value((unsigned char)s[i]);
        if (v < 0) {
            free(out);
            return NULL;
        }
        acc = acc << 6 | (uint32_t)v, bits += 6;
        if (bits >= 8) bits -= 8, *p++ = (unsigned char)(acc >> bits);
    }
    *out_len = (size_t)(p - out);
    return out;
}

/* data:image/<type>;base64,<payload> */
static unsigned char *read_data_uri(const char *url, size_t *len, srv_error *e) {
    const char *comma = strchr(url, ',');
    if (strncmp(url, "data:image/", 11) || !comma || comma - url < 18 || strncmp(comma - 7, ";base64", 7)) {
        srv_error_set(e, 400, "invalid_request_error", "invalid_image_url",
                      "an image data URI must be data:image/<type>;base64,<bytes>");
        return NULL;
    }
    unsigned char *b = b64_decode(comma + 1, strlen(comma + 1), len);
    if (!b) srv_error_set(e, 400, "invalid_request_error", "invalid_image_url", "the image data URI is not valid base64");
    return b;
}

/* file://PATH: a regular file inside --media-path once every link is resolved. */
static unsigned char *read_file_url(const srv_media *x, const char *url, size_t max, size_t *len, srv_error *e) {
    if (!x->root) {
        srv_error_set(e, 400, "invalid_request_error", "invalid_image_url",
                      "file:// image URLs are refused: the server was started without --media-path");
        return NULL;
    }
    const char *p = url + 7;
    char joined[PATH_MAX];
    if (snprintf(joined, sizeof joined, "%s/%s", x->root, *p == '/' ? p + 1 : p) >= (int)sizeof joined) {
        srv_error_set(e, 400, "invalid_request_error", "invalid_image_url", "the file:// path is too long");
        return NULL;
    }
    if (*p == '/') snprintf(joined, sizeof joined, "%s", p); /* absolute: must still resolve inside the root */
    char *real = realpath(joined, NULL);
    const size_t rl = strlen(x->root);
    if (!real || strncmp(real, x->root, rl) || (real[rl] != '/' && real[rl] != 0)) {
        free(real);
        srv_error_set(e, 400, "invalid_request_error", "invalid_image_url",
                      "the file:// image is not a file under the server's --media-path");
        return NULL;
    }
    const int fd = open(real, O_RDONLY | O_CLOEXEC);
    free(real);
    struct stat sb;
    unsigned char *b = NULL;
    if (fd >= 0 && fstat(fd, &sb) == 0 && S_ISREG(sb.st_mode) && (size_t)sb.st_size <= max &&
        (b = malloc((size_t)sb.st_size + 1))) {
        *len = 0;
        for (ssize_t r; *len < (size_t)sb.st_size && (r = read(fd, b + *len, (size_t)sb.st_size - *len)) > 0;) *len += (size_t)r;
        if (*len != (size_t)sb.st_size) free(b), b = NULL;
    }
    if (fd >= 0) close(fd);
    if (!b) srv_error_set(e, 400, "invalid_request_error", "invalid_image_url",
                          "the file:// image under --media-path cannot be read (a regular file of at most %zu bytes)",
                          max);
    return b;
}

/* ---------------------------------------------------------------- one image */

bool media_load(srv_media *x, const char *url, size_t max_bytes, gm_vision_rows *out, srv_error *e) {
    *out = (gm_vision_rows){0};
    if (!x) {
        srv_error_set(e, 400, "invalid_request_error", "images_unsupported",
                      "this server reads text only: start it with --mmproj (the model's vision encoder) for images");
        return false;
    }
    size_t len = 0;
    unsigned char *bytes = NULL;
    if (!strncmp(url, "data:", 5)) bytes = read_data_uri(url, &len, e);
    else if (!strncmp(url, "file://", 7)) bytes = read_file_url(x, url, max_bytes, &len, e);
    else if (!strncmp(url, "http://", 7) || !strncmp(url, "https://", 8)) {
        srv_error_set(e, 400, "invalid_request_error", "invalid_image_url",
                      "this server does not fetch remote images: send the image's bytes as a data:image/...;base64 URI");
        return false;
    } else {
        srv_error_set(e, 400, "invalid_request_error", "invalid_image_url",
                      "an image URL must be a data:image/...;base64 URI (or file:// under --media-path)");
        return false;
    }
    if (!bytes) return false;
    gm_error err = {0};
    gm_image img;
    gm_status st = gm_image_decode(bytes, len, &x->lim, &img, &err);
    free(bytes);
    if (st) {
        srv_error_set(e, st == GM_ERR_NOMEM ? 500 : 400, "invalid_request_error", "invalid_image", "image: %s", err.msg);
        return false;
    }
    uint64_t key[2];
    gm_image_digest(&img, x->secret, key);
    if (cache_get(x, key, out)) {
        gm_image_free(&img);
        return true;
    }
    turns_take(&x->turns);
    const double t0 = srv_now();
    st = gm_vision_encode_image(x->v, &img, &out->rows, &out->n_rows, &err);
    const double dt = srv_now() - t0;
    turns_give(&x->turns);
    *out = (gm_vision_rows){out->rows, out->n_rows, {key[0], key[1]}, img.width, img.height};
    gm_image_free(&img);
    if (st) {
        *out = (gm_vision_rows){0};
        srv_error_set(e, st == GM_ERR_NOMEM ? 500 : 400, "invalid_request_error", "invalid_image", "image: %s", err.msg);
        return false;
    }
    pthread_mutex_lock(&x->mu);
    x->st.encoded++;
    x->st.encode_seconds += dt;
    pthread_mutex_unlock(&x->mu);
    cache_put(x, out);
    return true;
}
