/* tests/test_gguf.c — the GGUF reader against files built by the test-side writer, plus the real
 * default model when it is present. */
#include <stdlib.h>
#include <string.h>

#include "formats/gguf.h"
#include "quant/quant.h"
#include "support/gguf_writer.h"
#include "support/test.h"
#include "support/tiny_model.h"

static gguf_file *open_buf(const uint8_t *buf, size_t len, const gguf_open_options *opt, gm_error *err) {
    gguf_file *f = NULL;
    gm_status st = gguf_open_memory(buf, len, "mem.gguf", opt, &f, err);
    return st == GM_OK ? f : NULL;
}

static bool str_eq(gguf_str s, const char *c) { return s.len == strlen(c) && !memcmp(s.ptr, c, s.len); }

/* One key of every scalar type, arrays of every fixed type, strings, nested arrays. */
static gw_writer *metadata_writer(void) {
    gw_writer *w = gw_new();
    gw_add_u8(w, "t.u8", 200);
    gw_add_i8(w, "t.i8", -100);
    gw_add_u16(w, "t.u16", 60000);
    gw_add_i16(w, "t.i16", -30000);
    gw_add_u32(w, "t.u32", 4000000000u);
    gw_add_i32(w, "t.i32", -2000000000);
    gw_add_u64(w, "t.u64", 0xfedcba9876543210ull);
    gw_add_i64(w, "t.i64", -5000000000ll);
    gw_add_f32(w, "t.f32", 0.15625f);
    gw_add_f64(w, "t.f64", -1.0e300);
    gw_add_bool(w, "t.bool", true);
    gw_add_str(w, "t.str", "h\xc3\xa9llo");
    gw_add_str(w, "t.empty", "");
    int16_t a16[3] = {-1, 2, -3};
    gw_add_arr(w, "t.arr_i16", GGUF_VT_I16, 3, a16);
    double af64[2] = {1.5, -2.25};
    gw_add_arr(w, "t.arr_f64", GGUF_VT_F64, 2, af64);
    uint8_t ab[4] = {1, 0, 1, 1};
    gw_add_arr(w, "t.arr_bool", GGUF_VT_BOOL, 4, ab);
    gw_add_arr(w, "t.arr_empty", GGUF_VT_U32, 0, NULL);
    const char *strs[3] = {"a", "", "three"};
    gw_add_arr_str(w, "t.arr_str", 3, strs);
    /* [[1, 2], [], [3]] as u32, then [["x"], ["y", "z"]] */
    gw_buf b = {0};
    gw_buf_u32(&b, GGUF_VT_ARRAY);
    gw_buf_u64(&b, 3);
    uint32_t inner[3][2] = {{1, 2}, {0, 0}, {3, 0}};
    uint64_t counts[3] = {2, 0, 1};
    for (int i = 0; i < 3; i++) {
        gw_buf_u32(&b, GGUF_VT_U32);
        gw_buf_u64(&b, counts[i]);
        gw_buf_bytes(&b, inner[i], counts[i] * 4);
    }
    gw_add_raw(w, "t.nested", GGUF_VT_ARRAY, b.p, b.n);
    gw_buf_free(&b);
    gw_buf_u32(&b, GGUF_VT_ARRAY);
    gw_buf_u64(&b, 2);
    gw_buf_u32(&b, GGUF_VT_STRING);
    gw_buf_u64(&b, 1);
    gw_buf_str(&b, "x");
    gw_buf_u32(&b, GGUF_VT_STRING);
    gw_buf_u64(&b, 2);
    gw_buf_str(&b, "y");
    gw_buf_str(&b, "z");
    gw_add_raw(w, "t.nested_str", GGUF_VT_ARRAY, b.p, b.n);
    gw_buf_free(&b);
    return w;
}

TEST(metadata_round_trip) {
    gw_writer *w = metadata_writer();
    uint8_t *buf;
    size_t len;
    CHECK(gw_to_memory(w, &buf, &len));
    gw_free(w);
    gm_error err = {0};
    gguf_file *f = open_buf(buf, len, NULL, &err);
    CHECK_MSG(f != NULL, "%s", err.msg);
    if (!f) { free(buf); return; }
    CHECK_EQ_INT(f->version, 3);
    CHECK_EQ_INT(f->n_kv, 20);
    CHECK_EQ_INT(f->n_tensors, 0);
    CHECK_EQ_INT(gguf_find(f, "t.u8")->val.type, GGUF_VT_U8);
    CHECK_EQ_INT(gguf_find(f, "t.u8")->val.v.u, 200);
    CHECK_EQ_INT(gguf_find(f, "t.i8")->val.v.i, -100);
    CHECK_EQ_INT(gguf_find(f, "t.u16")->val.v.u, 60000);
    CHECK_EQ_INT(gguf_find(f, "t.i16")->val.v.i, -30000);
    CHECK(gguf_find(f, "t.u64")->val.v.u == 0xfedcba9876543210ull);
    CHECK_EQ_INT(gguf_find(f, "t.i64")->val.v.i, -5000000000ll);
    CHECK(gguf_find(f, "t.f64")->val.v.f == -1.0e300);
    CHECK(gguf_find(f, "nope") == NULL);

    uint32_t u32;
    int32_t i32;
    uint64_t u64;
    float f32;
    bool b;
    gguf_str s;
    CHECK_OK(gguf_get_u32(f, "t.u32", &u32, &err), &err);
    CHECK(u32 == 4000000000u);
    CHECK_OK(gguf_get_u32(f, "t.u8", &u32, &err), &err); /* any integer type that fits */
    CHECK_EQ_INT(u32, 200);
    CHECK_OK(gguf_get_i32(f, "t.i32", &i32, &err), &err);
    CHECK_EQ_INT(i32, -2000000000);
    CHECK_OK(gguf_get_i32(f, "t.i8", &i32, &err), &err);
    CHECK_EQ_INT(i32, -100);
    CHECK_EQ_INT(gguf_get_i32(f, "t.u32", &i32, &err), GM_ERR_TYPE); /* 4e9 does not fit */
    CHECK(strstr(err.msg, "t.u32") != NULL);
    CHECK_EQ_INT(gguf_get_u32(f, "t.i8", &u32, &err), GM_ERR_TYPE); /* negative */
    CHECK_EQ_INT(gguf_get_u32(f, "t.u64", &u32, &err), GM_ERR_TYPE);
    CHECK_OK(gguf_get_u64(f, "t.u64", &u64, &err), &err);
    CHECK(u64 == 0xfedcba9876543210ull);
    CHECK_OK(gguf_get_f32(f, "t.f32", &f32, &err), &err);
    CHECK(f32 == 0.15625f);
    CHECK_OK(gguf_get_f32(f, "t.i16", &f32, &err), &err);
    CHECK(f32 == -30000.0f);
    CHECK_OK(gguf_get_bool(f, "t.bool", &b, &err), &err);
    CHECK(b);
    CHECK_OK(gguf_get_str(f, "t.str", &s, &err), &err);
    CHECK(str_eq(s, "h\xc3\xa9llo"));
    CHECK_OK(gguf_get_str(f, "t.empty", &s, &err), &err);
    CHECK_EQ_INT(s.len, 0);

    /* wrong type / missing: status and a message naming the file and key */
    CHECK_EQ_INT(gguf_get_str(f, "t.u32", &s, &err), GM_ERR_TYPE);
    CHECK(strstr(err.msg, "mem.gguf") && strstr(err.msg, "t.u32") && strstr(err.msg, "string"));
    CHECK_EQ_INT(gguf_get_u32(f, "t.missing", &u32, &err), GM_ERR_NOT_FOUND);
    CHECK(strstr(err.msg, "t.missing") != NULL);
    CHECK_EQ_INT(gguf_get_bool(f, "t.u8", &b, &err), GM_ERR_TYPE);
    CHECK_EQ_INT(gguf_get_f32(f, "t.str", &f32, &err), GM_ERR_TYPE);

    const gguf_value *arr;
    gguf_arr_iter it;
    gguf_value e;
    CHECK_OK(gguf_get_arr(f, "t.arr_i16", GGUF_VT_I16, &arr, &err), &err);
    CHECK_EQ_INT(arr->v.arr.n, 3);
    int16_t raw[3];
    memcpy(raw, arr->v.arr.data, 6);
    CHECK(raw[0] == -1 && raw[1] == 2 && raw[2] == -3);
    int64_t want16[3] = {-1, 2, -3}, k = 0;
    gguf_arr_iter_init(&it, arr);
    while (gguf_arr_iter_next(&it, &e)) { CHECK_EQ_INT(e.v.i, want16[k]); k++; }
    CHECK_EQ_INT(k, 3);
    CHECK_EQ_INT(gguf_get_arr(f, "t.arr_i16", GGUF_VT_U32, &arr, &err), GM_ERR_TYPE);
    CHECK_OK(gguf_get_arr(f, "t.arr_f64", -1, &arr, &err), &err);
    gguf_arr_iter_init(&it, arr);
    CHECK(gguf_arr_iter_next(&it, &e) && e.v.f == 1.5);
    CHECK(gguf_arr_iter_next(&it, &e) && e.v.f == -2.25);
    CHECK(!gguf_arr_iter_next(&it, &e));
    CHECK_OK(gguf_get_arr(f, "t.arr_bool", GGUF_VT_BOOL, &arr, &err), &err);
    uint64_t want_b[4] = {1, 0, 1, 1};
    k = 0;
    gguf_arr_iter_init(&it, arr);
    while (gguf_arr_iter_next(&it, &e)) { CHECK_EQ_INT(e.v.u, want_b[k]); k++; }
    CHECK_EQ_INT(k, 4);
    CHECK_OK(gguf_get_arr(f, "t.arr_empty", GGUF_VT_U32, &arr, &err), &err);
    gguf_arr_iter_init(&it, arr);
    CHECK(!gguf_arr_iter_next(&it, &e));

    CHECK_OK(gguf_get_arr(f, "t.arr_str", GGUF_VT_STRING, &arr, &err), &err);
    const char *want_s[3] = {"a", "", "three"};
    k = 0;
    gguf_arr_iter_init(&it, arr);
    while (gguf_arr_iter_next(&it, &e)) { CHECK(e.type == GGUF_VT_STRING && str_eq(e.v.str, want_s[k])); k++; }
    CHECK_EQ_INT(k, 3);

    CHECK_OK(gguf_get_arr(f, "t.nested", GGUF_VT_ARRAY, &arr, &err), &err);
    uint64_t want_n[3] = {2, 0, 1};
    uint32_t flat[3], nf = 0;
    k = 0;
    gguf_arr_iter_init(&it, arr);
    while (gguf_arr_iter_next(&it, &e)) {
        CHECK(e.type == GGUF_VT_ARRAY && e.v.arr.elem == GGUF_VT_U32 && e.v.arr.n == want_n[k]);
        gguf_arr_iter in;
        gguf_value x;
        gguf_arr_iter_init(&in, &e);
        while (gguf_arr_iter_next(&in, &x) && nf < 3) flat[nf++] = (uint32_t)x.v.u;
        k++;
    }
    CHECK_EQ_INT(k, 3);
    CHECK(nf == 3 && flat[0] == 1 && flat[1] == 2 && flat[2] == 3);

    CHECK_OK(gguf_get_arr(f, "t.nested_str", GGUF_VT_ARRAY, &arr, &err), &err);
    gguf_arr_iter_init(&it, arr);
    CHECK(gguf_arr_iter_next(&it, &e) && e.v.arr.n == 1);
    CHECK(gguf_arr_iter_next(&it, &e) && e.v.arr.n == 2);
    gguf_arr_iter in;
    gguf_value x;
    gguf_arr_iter_init(&in, &e);
    CHECK(gguf_arr_iter_next(&in, &x) && str_eq(x.v.str, "y"));
    CHECK(gguf_arr_iter_next(&in, &x) && str_eq(x.v.str, "z"));
    CHECK(!gguf_arr_iter_next(&it, &e));
    gguf_close(f);
    free(buf);
}

/* Tensor placement: pointers into the map, sizes from the trait table, custom alignment. */
TEST(tensors_and_alignment) {
    gw_writer *w = gw_new();
    gw_set_alignment(w, 64);
    float v[2 * 64];
    for (int i = 0; i < 128; i++) v[i] = (float)i * 0.25f - 10.0f;
    int64_t ne_a[2] = {64, 2}, ne_b[1] = {3}, ne_c[2] = {64, 2};
    CHECK(gw_add_tensor_f32(w, "a.f32", GM_TYPE_F32, 2, ne_a, v));
    CHECK(gw_add_tensor_f32(w, "b.f16", GM_TYPE_F16, 1, ne_b, v));
    CHECK(gw_add_tensor_f32(w, "c.q8_0", GM_TYPE_Q8_0, 2, ne_c, v));
    uint8_t *buf;
    size_t len;
    CHECK(gw_to_memory(w, &buf, &len));
    gw_free(w);
    gm_error err = {0};
    gguf_file *f = open_buf(buf, len, NULL, &err);
    CHECK_MSG(f != NULL, "%s", err.msg);
    if (!f) { free(buf); return; }
    CHECK_EQ_INT(f->alignment, 64);
    CHECK_EQ_INT(f->data_offset % 64, 0);
    const gguf_tensor *a = gguf_find_tensor(f, "a.f32"), *b = gguf_find_tensor(f, "b.f16"),
                      *c = gguf_find_tensor(f, "c.q8_0");
    CHECK(a && b && c);
    if (a && b && c) {
        CHECK_EQ_INT(a->n_dims, 2);
        CHECK(a->ne[0] == 64 && a->ne[1] == 2 && a->ne[2] == 1 && a->ne[3] == 1);
        CHECK_EQ_INT(a->nbytes, 512);
        CHECK_EQ_INT(b->nbytes, 6);
        CHECK_EQ_INT(c->nbytes, 2 * 2 * 34); /* 2 rows of 2 blocks */
        CHECK(a->data == buf + f->data_offset + a->offset);
        CHECK_EQ_INT(a->offset % 64, 0);
        CHECK_EQ_INT(b->offset % 64, 0);
        CHECK_EQ_INT(c->offset % 64, 0);
        CHECK(memcmp(a->data, v, 512) == 0);
        uint16_t h[3];
        memcpy(h, b->data, 6);
        for (int i = 0; i < 3; i++) CHECK(gm_fp16_to_fp32(h[i]) == v[i]); /* exact in f16 */
        uint8_t q[136];
        gm_type_traits_of(GM_TYPE_Q8_0)->quant_row(v, q, 64);
        gm_type_traits_of(GM_TYPE_Q8_0)->quant_row(v + 64, q + 68, 64);
        CHECK(memcmp(c->data, q, 136) == 0);
        CHECK(!a->hidden && !c->hidden);
    }
    CHECK(gguf_find_tensor(f, "zzz") == NULL);
    gguf_close(f);
    free(buf);
}

/* GGUF v2 is read like v3; v1 and later versions are refused with a clear status. */
TEST(versions) {
    for (uint32_t v = 1; v <= 4; v++) {
        gw_writer *w = gw_new();
        gw_set_version(w, v);
        gw_add_str(w, "general.architecture", "gemma3");
        uint8_t *buf;
        size_t len;
        gw_to_memory(w, &buf, &len);
        gw_free(w);
        gm_error err = {0};
        gguf_file *f = NULL;
        gm_status st = gguf_open_memory(buf, len, "v.gguf", NULL, &f, &err);
        if (v == 2 || v == 3) {
            CHECK_MSG(st == GM_OK, "v%u: %s", v, err.msg);
        } else {
            CHECK_EQ_INT(st, GM_ERR_UNSUPPORTED);
            CHECK(strstr(err.msg, "v.gguf") && strstr(err.msg, "version"));
        }
        gguf_close(f);
        free(buf);
    }
}

/* Every strict prefix of a valid file fails cleanly with a message naming the file. */
TEST(every_truncation_fails) {
    tm_options o;
    tm_options_default(&o, "gemma3");
    o.n_layers = 1;
    char path[512];
    snprintf(path, sizeof path, "%s/h1_trunc.gguf", GM_BUILD_DIR);
    char e[256];
    CHECK(tm_write_gguf(&o, path, e, sizeof e));
    size_t len;
    unsigned char *buf = test_read_file(path, &len);
    CHECK(buf != NULL);
    if (!buf) return;
    gm_error err;
    gguf_file *f = NULL;
    CHECK_OK(gguf_open_memory(buf, len, "t.gguf", NULL, &f, &err), &err);
    gguf_close(f);
    int bad = 0;
    for (size_t n = 0; n < len; n += (n < 20000 ? 1 : 97)) {
        err.msg[0] = 0;
        f = NULL;
        gm_status st = gguf_open_memory(buf, n, "t.gguf", NULL, &f, &err);
        if (st == GM_OK || !strstr(err.msg, "t.gguf")) bad++;
        gguf_close(f);
    }
    CHECK_EQ_INT(bad, 0);
    free(buf);
    remove(path);
}

TEST(mtp_tensors_hidden_unless_requested) {
    tm_options o;
    tm_options_default(&o, "gemma3");
    o.add_mtp = true;
    char path[512];
    snprintf(path, sizeof path, "%s/h1_mtp.gguf", GM_BUILD_DIR);
    char e[256];
    CHECK(tm_write_gguf(&o, path, e, sizeof e));
    gm_error err;
    gguf_file *f = NULL;
    CHECK_OK(gguf_open(path, NULL, &f, &err), &err);
    if (f) {
        CHECK(gguf_find_tensor(f, "blk.2.nextn.eh_proj.weight") == NULL);
        int hidden = 0;
        for (uint64_t i = 0; i < f->n_tensors; i++) hidden += f->tensors[i].hidden;
        CHECK_EQ_INT(hidden, 1);
        gguf_close(f);
    }
    gguf_open_options keep = {true};
    CHECK_OK(gguf_open(path, &keep, &f, &err), &err);
    if (f) {
        CHECK(gguf_find_tensor(f, "blk.2.nextn.eh_proj.weight") != NULL);
        gguf_close(f);
    }
    remove(path);
}

/* Integer and double tensors (EAGLE-3's d2t map is I64) are data: sized from their element width, with no type
 * traits (nothing reads them as weights). gw_add_tensor_raw checks its sizes with the reader's traits, so this
 * file is written with a float placeholder and the type id patched afterwards. */
TEST(data_tensors_accepted) {
    const int types[] = {GM_TYPE_I8, GM_TYPE_I16, GM_TYPE_I32, GM_TYPE_I64, GM_TYPE_F64};
    const int widths[] = {1, 2, 4, 8, 8};
    for (int k = 0; k < 5; k++) {
        gw_writer *w = gw_new();
        gw_add_str(w, "general.architecture", "eagle3");
        const int64_t ne[1] = {8 / widths[k] * 4}; /* 32 bytes */
        float v[8] = {0};
        uint8_t *buf = NULL;
        size_t len = 0;
        const int64_t ne_f[1] = {8};
        CHECK(gw_add_tensor_f32(w, "d2t", GM_TYPE_F32, 1, ne_f, v) && gw_to_memory(w, &buf, &len));
        gw_free(w);
        if (!buf) continue;
        /* the tensor info ends with: u32 type, u64 offset; its dims before: one u64 = 8 */
        uint8_t *p = NULL;
        for (size_t i = 0; i + 3 < len; i++)
            if (!memcmp(buf + i, "d2t", 3)) {
                p = buf + i + 3;
                break;
            }
        CHECK(p != NULL);
        if (p) {
            memcpy(p + 4, &(uint64_t){(uint64_t)ne[0]}, 8); /* n_dims (u32) then dim 0 */
            memcpy(p + 12, &(uint32_t){(uint32_t)types[k]}, 4);
            gm_error err = {0};
            gguf_file *f = open_buf(buf, len, NULL, &err);
            CHECK_MSG(f != NULL, "%s: %s", gm_type_name(types[k]), err.msg);
            const gguf_tensor *t = f ? gguf_find_tensor(f, "d2t") : NULL;
            CHECK(t && t->type == types[k] && t->nbytes == 32 && gm_type_traits_of(t->type) == NULL);
            gguf_close(f);
        }
        free(buf);
    }
}

TEST(open_errors_name_the_file) {
    gm_error err = {0};
    gguf_file *f = NULL;
    CHECK_EQ_INT(gguf_open("/nonexistent/x.gguf", NULL, &f, &err), GM_ERR_IO);
    CHECK(strstr(err.msg, "/nonexistent/x.gguf") != NULL);
    CHECK_EQ_INT(gguf_open(GM_TEST_DATA, NULL, &f, &err), GM_ERR_IO); /* a folder */
    const char junk[] = "this is not a gguf file at all, just text";
    CHECK_EQ_INT(gguf_open_memory(junk, sizeof junk, "junk.bin", NULL, &f, &err), GM_ERR_FORMAT);
    CHECK(strstr(err.msg, "junk.bin") && strstr(err.msg, "GGUF"));
    CHECK(f == NULL);
}

/* The real model, when installed: structure as documented for Gemma 3 270M. */
TEST(default_model) {
    gm_error err = {0};
    gguf_file *f = NULL;
    if (!test_have_default_model(__func__)) return;
    CHECK_OK(gguf_open(GM_DEFAULT_MODEL, NULL, &f, &err), &err);
    if (!f) return;
    CHECK_EQ_INT(f->n_tensors, 236);
    uint32_t n = 0;
    CHECK_OK(gguf_get_u32(f, "gemma3.block_count", &n, &err), &err);
    CHECK_EQ_INT(n, 18);
    const gguf_tensor *t = gguf_find_tensor(f, "token_embd.weight");
    CHECK(t && t->type == GM_TYPE_Q8_0 && t->ne[0] == 640 && t->ne[1] == 262144);
    const gguf_value *arr;
    CHECK_OK(gguf_get_arr(f, "tokenizer.ggml.tokens", GGUF_VT_STRING, &arr, &err), &err);
    gguf_arr_iter it;
    gguf_value e;
    int64_t i = 0;
    bool eot = false;
    gguf_arr_iter_init(&it, arr);
    while (gguf_arr_iter_next(&it, &e)) {
        if (i == 106) eot = str_eq(e.v.str, "<end_of_turn>");
        i++;
    }
    CHECK_EQ_INT(i, 262144);
    CHECK(eot);
    gguf_close(f);
}

int main(void) {
    RUN(metadata_round_trip);
    RUN(tensors_and_alignment);
    RUN(versions);
    RUN(every_truncation_fails);
    RUN(mtp_tensors_hidden_unless_requested);
    RUN(data_tensors_accepted);
    RUN(open_errors_name_the_file);
    RUN(default_model);
    return test_summary();
}
