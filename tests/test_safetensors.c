/* tests/test_safetensors.c — the safetensors reader: hand-built headers, the tiny model's HF
 * folders (single file and two shards), and header validation. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "formats/safetensors.h"
#include "quant/quant.h"
#include "support/test.h"
#include "support/tiny_model.h"

/* A file image: u64 header length, header, data. */
static uint8_t *image(const char *header, const void *data, size_t data_len, size_t *len) {
    size_t h = strlen(header);
    *len = 8 + h + data_len;
    uint8_t *p = malloc(*len);
    uint64_t n = h;
    memcpy(p, &n, 8);
    memcpy(p + 8, header, h);
    if (data_len) memcpy(p + 8 + h, data, data_len);
    return p;
}

TEST(parse_valid_header) {
    float vals[6] = {1, 2, 3, 4, 5, 6};
    uint16_t bf[2] = {gm_fp32_to_bf16(1.5f), gm_fp32_to_bf16(-2.0f)};
    uint8_t data[32];
    memcpy(data, vals, 24);
    memcpy(data + 24, bf, 4);
    memset(data + 28, 7, 4);
    const char *hdr = "{\"__metadata__\":{\"format\":\"pt\"},"
                      "\"w\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,24]},"
                      "\"b\":{\"dtype\":\"BF16\",\"shape\":[2],\"data_offsets\":[24,28]},"
                      "\"q\":{\"dtype\":\"I8\",\"shape\":[4],\"data_offsets\":[28,32]},"
                      "\"s\":{\"dtype\":\"F16\",\"shape\":[],\"data_offsets\":[32,32]}}   ";
    size_t len;
    uint8_t *p = image(hdr, data, sizeof data, &len);
    /* a scalar F16 needs 2 bytes: [32, 32) lies about its size */
    gm_error err = {0};
    st_file *f = NULL;
    CHECK_EQ_INT(st_open_memory(p, len, "h.safetensors", &f, &err), GM_ERR_FORMAT);
    CHECK(strstr(err.msg, "'s'") && strstr(err.msg, "h.safetensors"));
    free(p);

    hdr = "{\"__metadata__\":{\"format\":\"pt\"},"
          "\"w\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,24]},"
          "\"b\":{\"dtype\":\"BF16\",\"shape\":[2],\"data_offsets\":[24,28]},"
          "\"q\":{\"dtype\":\"I8\",\"shape\":[4],\"data_offsets\":[28,32]},"
          "\"z\":{\"dtype\":\"F16\",\"shape\":[0,5],\"data_offsets\":[32,32]}}   ";
    p = image(hdr, data, sizeof data, &len);
    CHECK_OK(st_open_memory(p, len, "h.safetensors", &f, &err), &err);
    if (f) {
        CHECK_EQ_INT(f->n_tensors, 4);
        CHECK(f->has_metadata);
        const st_tensor *w = st_find(f, "w"), *b = st_find(f, "b"), *q = st_find(f, "q");
        CHECK(w && b && q && st_find(f, "z") && !st_find(f, "__metadata__"));
        if (w && b && q) {
            CHECK(w->type == GM_TYPE_F32 && w->n_dims == 2 && w->shape[0] == 2 && w->shape[1] == 3);
            CHECK(w->data == p + f->data_offset && w->nbytes == 24);
            CHECK(memcmp(w->data, vals, 24) == 0);
            CHECK(b->type == GM_TYPE_BF16);
            uint16_t got[2];
            memcpy(got, b->data, 4);
            CHECK(gm_bf16_to_fp32(got[0]) == 1.5f && gm_bf16_to_fp32(got[1]) == -2.0f);
            CHECK_EQ_INT(q->type, -1);
            CHECK(!strcmp(q->dtype, "I8"));
            int type;
            CHECK_EQ_INT(st_tensor_type(q, "h.safetensors", &type, &err), GM_ERR_UNSUPPORTED);
            CHECK(strstr(err.msg, "'q'") && strstr(err.msg, "I8"));
            CHECK_OK(st_tensor_type(w, "h.safetensors", &type, &err), &err);
        }
        st_close(f);
    }
    free(p);
}

TEST(header_validation) {
    static const struct {
        const char *hdr;
        size_t data;
        gm_status want;
    } cases[] = {
        {"{not json", 0, GM_ERR_FORMAT},
        {"[1,2,3]", 0, GM_ERR_FORMAT},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}} x", 8, GM_ERR_FORMAT},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,12]}}", 12, GM_ERR_FORMAT},   /* size lie */
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 4, GM_ERR_FORMAT},     /* past end */
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,0]}}", 8, GM_ERR_FORMAT},     /* reversed */
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[-2],\"data_offsets\":[0,8]}}", 8, GM_ERR_FORMAT},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1.5],\"data_offsets\":[0,8]}}", 8, GM_ERR_FORMAT},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296,4294967296],\"data_offsets\":[0,8]}}", 8,
         GM_ERR_FORMAT},
        {"{\"a\":{\"dtype\":\"Q9\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8, GM_ERR_UNSUPPORTED},
        {"{\"a\":{\"shape\":[2],\"data_offsets\":[0,8]}}", 8, GM_ERR_FORMAT},
        {"{\"a\":{\"dtype\":\"F32\",\"data_offsets\":[0,8]}}", 8, GM_ERR_FORMAT},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2]}}", 8, GM_ERR_FORMAT},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
         "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}", 12, GM_ERR_FORMAT},  /* overlap */
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
         "\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,16]}}", 16, GM_ERR_FORMAT},  /* duplicate */
        {"{\"__metadata__\":5}", 0, GM_ERR_FORMAT},
        {"{\"a\":7}", 0, GM_ERR_FORMAT},
    };
    uint8_t zeros[16] = {0};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        size_t len;
        uint8_t *p = image(cases[i].hdr, zeros, cases[i].data, &len);
        gm_error err = {0};
        st_file *f = NULL;
        gm_status st = st_open_memory(p, len, "case.safetensors", &f, &err);
        CHECK_MSG(st == cases[i].want && strstr(err.msg, "case.safetensors"), "case %zu: status %d, %s", i, st,
                  err.msg);
        CHECK(f == NULL);
        free(p);
    }
    /* header length larger than the file, and absurd */
    uint8_t small[16] = {0};
    uint64_t n = 100;
    memcpy(small, &n, 8);
    gm_error err = {0};
    st_file *f = NULL;
    CHECK_EQ_INT(st_open_memory(small, sizeof small, "short.safetensors", &f, &err), GM_ERR_FORMAT);
    CHECK(strstr(err.msg, "larger than the file"));
    n = UINT64_MAX;
    memcpy(small, &n, 8);
    CHECK_EQ_INT(st_open_memory(small, sizeof small, "short.safetensors", &f, &err), GM_ERR_FORMAT);
    CHECK_EQ_INT(st_open_memory(small, 5, "tiny.safetensors", &f, &err), GM_ERR_FORMAT);
}

static void tmpdir(char *out, size_t n, const char *name) {
    snprintf(out, n, "%s/h1_st_%s_%d", GM_BUILD_DIR, name, (int)getpid());
}

static void rm_folder(const char *dir) {
    const char *files[] = {"config.json", "tokenizer_config.json", "tokenizer.json", "model.safetensors", "model.safetensors.index.json",
                           "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"};
    char p[4096];
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        snprintf(p, sizeof p, "%s/%s", dir, files[i]);
        remove(p);
    }
    rmdir(dir);
}

/* Values in the folder equal tm_weight_values (PyTorch shape = reversed ggml shape). */
static void check_folder(const char *dir, const tm_options *o, int dtype, int expect_files) {
    gm_error err = {0};
    st_set *s = NULL;
    CHECK_OK(st_set_open(dir, &s, &err), &err);
    if (!s) return;
    CHECK_EQ_INT(s->n_files, expect_files);
    CHECK_EQ_INT(s->n_tensors, tm_tensor_count(o));
    const st_tensor *q = st_set_find(s, "model.layers.1.self_attn.q_proj.weight");
    CHECK(q != NULL);
    if (q) {
        CHECK(q->n_dims == 2 && q->shape[0] == o->n_heads * o->head_dim && q->shape[1] == o->d_model);
        CHECK_EQ_INT(q->type, dtype);
        int64_t n = q->shape[0] * q->shape[1];
        float *want = malloc((size_t)n * sizeof *want);
        CHECK(tm_weight_values(o, "blk.1.attn_q.weight", want, n));
        int bad = 0;
        for (int64_t i = 0; i < n; i++) {
            float got;
            if (dtype == GM_TYPE_F32) memcpy(&got, (const uint8_t *)q->data + 4 * i, 4);
            else {
                uint16_t h;
                memcpy(&h, (const uint8_t *)q->data + 2 * i, 2);
                got = gm_bf16_to_fp32(h);
            }
            bad += got != want[i];
        }
        CHECK_EQ_INT(bad, 0);
        free(want);
        CHECK(st_set_file_of(s, q) != NULL);
    }
    st_set_close(s);
}

TEST(hf_folders) {
    tm_options o;
    tm_options_default(&o, "gemma3");
    char dir[512], e[256];
    tmpdir(dir, sizeof dir, "one");
    tm_hf_options h = {GM_TYPE_F32, 1, false};
    CHECK(tm_write_hf(&o, &h, dir, e, sizeof e));
    check_folder(dir, &o, GM_TYPE_F32, 1);
    char file[600];
    snprintf(file, sizeof file, "%s/model.safetensors", dir);
    st_set *s = NULL;
    gm_error err;
    CHECK_OK(st_set_open(file, &s, &err), &err); /* a file path works too */
    st_set_close(s);
    rm_folder(dir);

    tmpdir(dir, sizeof dir, "two");
    h = (tm_hf_options){GM_TYPE_BF16, 2, false};
    CHECK(tm_write_hf(&o, &h, dir, e, sizeof e));
    check_folder(dir, &o, GM_TYPE_BF16, 2);
    /* a missing shard is an error naming it */
    snprintf(file, sizeof file, "%s/model-00002-of-00002.safetensors", dir);
    remove(file);
    CHECK(st_set_open(dir, &s, &err) != GM_OK);
    CHECK(strstr(err.msg, "model-00002-of-00002.safetensors") != NULL);
    rm_folder(dir);

    CHECK(st_set_open("/nonexistent/folder", &s, &err) != GM_OK);
}

/* Every strict prefix of a valid file fails cleanly and names the file. */
TEST(every_truncation_fails) {
    tm_options o;
    tm_options_default(&o, "gemma2");
    o.n_layers = 1;
    char dir[512], e[256], file[600];
    tmpdir(dir, sizeof dir, "trunc");
    tm_hf_options h = {GM_TYPE_BF16, 1, false};
    CHECK(tm_write_hf(&o, &h, dir, e, sizeof e));
    snprintf(file, sizeof file, "%s/model.safetensors", dir);
    size_t len = 0;
    unsigned char *buf = test_read_file(file, &len);
    CHECK(buf != NULL);
    if (buf) {
        gm_error err;
        st_file *f = NULL;
        CHECK_OK(st_open_memory(buf, len, "t.safetensors", &f, &err), &err);
        st_close(f);
        int bad = 0;
        for (size_t n = 0; n < len; n += (n < 4096 ? 1 : 61)) {
            err.msg[0] = 0;
            f = NULL;
            if (st_open_memory(buf, n, "t.safetensors", &f, &err) == GM_OK || !strstr(err.msg, "t.safetensors")) bad++;
            st_close(f);
        }
        CHECK_EQ_INT(bad, 0);
        free(buf);
    }
    rm_folder(dir);
}

int main(void) {
    RUN(parse_valid_header);
    RUN(header_validation);
    RUN(hf_folders);
    RUN(every_truncation_fails);
    return test_summary();
}
