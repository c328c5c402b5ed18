/* tests/support/test.c — harness state, small file helpers and checks shared by several tests. */
#include "support/test.h"

#include <math.h>
#include <stdbool.h>
#include <string.h>
#include <unistd.h>

#include "formats/gguf.h"
#include "gemma.h"
#include "gemma_generator.h"

int gm_test_failures = 0;
int gm_test_checks = 0;

int test_summary(void) {
    fprintf(stderr, "%d checks, %d failed\n", gm_test_checks, gm_test_failures);
    return gm_test_failures ? 1 : 0;
}

bool test_have_default_model(const char *part) {
    if (access(GM_DEFAULT_MODEL, R_OK) == 0) return true;
    fprintf(stderr, "  (skipped%s%s: the default model %s is not installed: make model)\n", part ? ": " : "",
            part ? part : "", GM_DEFAULT_MODEL);
    return false;
}

int gm_test_threads(int n) {
    const char *cap = getenv("GM_TEST_MAX_THREADS");
    const int c = cap ? atoi(cap) : 0;
    return c > 0 && c < n ? c : n;
}

const char *test_data_path(const char *rel) {
    static char buf[4096];
    snprintf(buf, sizeof buf, "%s/%s", GM_TEST_DATA, rel);
    return buf;
}

unsigned char *test_read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    if (fseek(f, 0, SEEK_END) != 0) { fclose(f); return NULL; }
    long n = ftell(f);
    if (n < 0) { fclose(f); return NULL; }
    rewind(f);
    unsigned char *buf = malloc((size_t)n + 1);
    if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n) { free(buf); buf = NULL; }
    fclose(f);
    if (buf) { buf[n] = 0; if (len) *len = (size_t)n; }
    return buf;
}

void test_check_layer_kinds(const char *path, const char *kinds, const char *what) {
    gm_error err = {0};
    gm_model *m = NULL;
    CHECK_MSG(gm_model_open(path, NULL, &m, &err) == GM_OK, "%s: %s", what, err.msg);
    if (!m) return;
    const gm_config *c = gm_model_config(m);
    CHECK_MSG(c->n_layers == (int)strlen(kinds), "%s: %d layers", what, c->n_layers);
    for (int il = 0; il < c->n_layers && il < (int)strlen(kinds); il++) {
        const gm_layer_config *l = gm_model_layer(m, il);
        const bool s = kinds[il] == 's';
        CHECK_MSG(l->window == (s ? c->sliding_window : 0) &&
                      l->rope_base == (s ? c->rope_base_local : c->rope_base_global),
                  "%s: layer %d has window %d, RoPE base %g; wanted it %s", what, il, l->window, l->rope_base,
                  s ? "sliding" : "full");
    }
    gm_model_free(m);
}

double test_kl(const float *a, const float *b, int V) {
    double ma = a[0], mb = b[0];
    for (int i = 1; i < V; i++) {
        if (a[i] > ma) ma = a[i];
        if (b[i] > mb) mb = b[i];
    }
    double za = 0.0, zb = 0.0;
    for (int i = 0; i < V; i++) za += exp(a[i] - ma), zb += exp(b[i] - mb);
    double kl = 0.0;
    for (int i = 0; i < V; i++) {
        const double la = a[i] - ma - log(za), lb = b[i] - mb - log(zb);
        kl += exp(la) * (la - lb);
    }
    return kl > 0.0 ? kl : 0.0;
}

int test_argmax(const float *x, int V) {
    int best = 0;
    for (int i = 1; i < V; i++)
        if (x[i] > x[best]) best = i;
    return best;
}

void test_ids_for(const gm_model *m, int32_t *ids, int n) {
    const int V = gm_model_config(m)->n_vocab;
    ids[0] = 2; /* <bos> */
    for (int i = 1; i < n; i++) ids[i] = (int32_t)(((int64_t)i * 7919 + 11) % (V - 8)) + 4;
}

void test_greedy(const gm_model *m, gm_backend_kind kind, const int32_t *ids, int n_ids, int n, int32_t *out) {
    gm_error err = {0};
    gm_generator *g = NULL;
    const gm_generator_options o = {.n_threads = gm_test_threads(2), .ignore_stop = true, .backend = kind,
                                    .gpu_validate = kind == GM_BACKEND_VULKAN};
    const gm_sampling greedy_s = gm_sampling_default();
    int got = 0;
    memset(out, 0, (size_t)n * sizeof *out);
    CHECK_OK(gm_generator_new(m, &o, &g, &err), &err);
    if (!g) return;
    CHECK_OK(gm_generator_prefill(g, ids, n_ids, &err), &err);
    CHECK_OK(gm_generator_generate_cached(g, n, &greedy_s, out, &got, &err), &err);
    CHECK_EQ_INT(got, n);
    gm_generator_free(g);
}

/* Chi-square of counts against n * p, tokens with an expected count below 5 pooled into one bin;
 * true when below the critical value at significance 1e-3 (z = 3.09, Wilson-Hilferty). */
bool test_chi_square_ok(const int *count, const double *p, int V, int n, const char *what) {
    double chi = 0, pool_e = 0, pool_o = 0;
    int df = -1;
    for (int v = 0; v < V; v++) {
        const double e = n * p[v];
        if (e < 5) {
            pool_e += e, pool_o += count[v];
            continue;
        }
        chi += (count[v] - e) * (count[v] - e) / e;
        df++;
    }
    if (pool_e > 0) chi += (pool_o - pool_e) * (pool_o - pool_e) / (pool_e > 5 ? pool_e : 5), df++;
    const double h = 2.0 / (9.0 * df), crit = df * pow(1 - h + 3.09 * sqrt(h), 3);
    fprintf(stderr, "  %s: chi-square %.1f, %d degrees of freedom, critical %.1f\n", what, chi, df, crit);
    return df > 0 && chi < crit;
}

int test_parse_floats(char *p, float *out, int max) {
    int n = 0;
    for (char *end; n < max; n++, p = end) {
        out[n] = strtof(p, &end);
        if (end == p) break;
    }
    return n;
}

float test_rel_err(const float *a, const float *b, int n) {
    float m = 0, e = 0;
    for (int i = 0; i < n; i++) {
        m = fabsf(b[i]) > m ? fabsf(b[i]) : m;
        e = fabsf(a[i] - b[i]) > e ? fabsf(a[i] - b[i]) : e;
    }
    return m > 0 ? e / m : e;
}

bool test_zeroed_copy(const char *src, const char *tensor, char *path) {
    gm_error err = {0};
    gguf_file *f = NULL;
    const int fd = mkstemp(path);
    bool made = false;
    if (fd >= 0 && gguf_open(src, NULL, &f, &err) == GM_OK) {
        size_t len;
        unsigned char *bytes = test_read_file(src, &len);
        const gguf_tensor *t = gguf_find_tensor(f, tensor);
        if (bytes && t) {
            memset(bytes + f->data_offset + t->offset, 0, (size_t)t->nbytes);
            made = write(fd, bytes, len) == (ssize_t)len;
        }
        free(bytes);
    }
    if (fd >= 0) close(fd);
    gguf_close(f);
    return made;
}
