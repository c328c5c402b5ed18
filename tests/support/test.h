/* tests/support/test.h — a tiny test harness shared by every tests/test_*.c.
 *   TEST(name) { CHECK(cond); CHECK_EQ_INT(a, b); CHECK_NEAR(a, b, tol); }
 *   int main(void) { RUN(name); ...; return test_summary(); }
 * A test binary exits 0 when all checks pass, 1 otherwise, 77 to report "skipped". */
#ifndef GM_TEST_H
#define GM_TEST_H

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include "gemma.h"

extern int gm_test_failures;
extern int gm_test_checks;

#define TEST(name) static void name(void)
#define RUN(name)                                                                   \
    do {                                                                            \
        int before_ = gm_test_failures;                                             \
        name();                                                                     \
        fprintf(stderr, "%s %s\n", gm_test_failures == before_ ? "ok  " : "FAIL", #name); \
    } while (0)

#define CHECK(cond)                                                                 \
    do {                                                                            \
        gm_test_checks++;                                                           \
        if (!(cond)) {                                                              \
            gm_test_failures++;                                                     \
            fprintf(stderr, "  %s:%d: CHECK(%s) failed\n", __FILE__, __LINE__, #cond); \
        }                                                                           \
    } while (0)

#define CHECK_MSG(cond, ...)                                                        \
    do {                                                                            \
        gm_test_checks++;                                                           \
        if (!(cond)) {                                                              \
            gm_test_failures++;                                                     \
            fprintf(stderr, "  %s:%d: CHECK(%s) failed: ", __FILE__, __LINE__, #cond); \
            fprintf(stderr, __VA_ARGS__);                                           \
            fputc('\n', stderr);                                                    \
        }                                                                           \
    } while (0)

#define CHECK_EQ_INT(a, b)                                                          \
    do {                                                                            \
        long long a_ = (long long)(a), b_ = (long long)(b);                         \
        CHECK_MSG(a_ == b_, "%s = %lld, %s = %lld", #a, a_, #b, b_);                \
    } while (0)

#define CHECK_NEAR(a, b, tol)                                                       \
    do {                                                                            \
        double a_ = (double)(a), b_ = (double)(b);                                  \
        CHECK_MSG(fabs(a_ - b_) <= (tol), "%s = %.9g, %s = %.9g (tol %g)", #a, a_, #b, b_, (double)(tol)); \
    } while (0)

/* A gm_status call that must succeed; prints the error message otherwise. */
#define CHECK_OK(call, errp)                                                        \
    do {                                                                            \
        int st_ = (int)(call);                                                      \
        CHECK_MSG(st_ == 0, "%s -> status %d: %s", #call, st_, (errp)->msg);        \
    } while (0)

int test_summary(void);
/* The default model (models/, `make model`): the tests that need it skip the same way without it. A test that
 * needs it throughout starts main with `if (!test_have_default_model(NULL)) return TEST_SKIP;` (CTest's skip
 * code); a test with a part that needs it returns from that part when test_have_default_model("what") is false.
 * Both print one line saying what was skipped and how to install the model. */
enum { TEST_SKIP = 77 };
bool test_have_default_model(const char *part);
/* Path of a file under tests/data (static buffer, valid until the next call). */
const char *test_data_path(const char *rel);
/* n, or $GM_TEST_MAX_THREADS when that is set and smaller: scripts/test-aarch64.sh runs the suite a second time
 * with 1 so every engine, generator and pool the tests make runs on the caller's thread alone (the tests'
 * 1-against-2-threads checks then compare 1 with 1). */
int gm_test_threads(int n);
/* Opens the model at path and checks each layer's kind as it loaded (gm_model_layer): kinds[il] 's' sliding (the
 * config's window and local RoPE base), 'f' full (no window, the global base); what names the case in failures. */
void test_check_layer_kinds(const char *path, const char *kinds, const char *what);
/* KL(p || q) of the softmaxes of logit rows a (the reference) and b over V entries, in double (>= 0). */
double test_kl(const float *a, const float *b, int V);
/* The index of the largest of x[0..V) (the first of equals). */
int test_argmax(const float *x, int V);
/* Chi-square of counts (n draws over V tokens) against n * p, tokens with an expected count below 5 pooled into one
 * bin; true when below the critical value at significance 1e-3. Prints the statistic under `what`. */
bool test_chi_square_ok(const int *count, const double *p, int V, int n, const char *what);
/* Up to max floats parsed from text p (spaces between); returns how many. */
int test_parse_floats(char *p, float *out, int max);
/* max |a - b| / max |b| over n (the error relative to the reference row b's largest value). */
float test_rel_err(const float *a, const float *b, int n);
/* A copy of the GGUF at src with tensor's bytes zeroed, written to a new file from the mkstemp template path. */
bool test_zeroed_copy(const char *src, const char *tensor, char *path);
/* n token ids for a model: <bos> then a fixed spread over the vocabulary (no special ids below 4). */
void test_ids_for(const gm_model *m, int32_t *ids, int n);
/* n greedy tokens after ids[0..n_ids) on a generator of backend kind (2 threads; Vulkan with its validation
 * layer on), into out; failures are CHECK failures. */
void test_greedy(const gm_model *m, gm_backend_kind kind, const int32_t *ids, int n_ids, int n, int32_t *out);
/* Reads a whole file; NULL on failure. Caller frees. */
unsigned char *test_read_file(const char *path, size_t *len);

#endif
