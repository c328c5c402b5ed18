/* fuzz/fuzz_gguf.c — libFuzzer harness for the GGUF reader: gguf_open_memory on arbitrary bytes,
 * then, when a file opens, every getter, every array (nested ones recursively) and every
 * tensor's bytes (first row dequantized), so the sanitizers see each access the engine can make. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "formats/gguf.h"
#include "quant/quant.h"

static volatile uint64_t g_sink;

static void walk(const gguf_value *v, int depth) {
    if (v->type == GGUF_VT_STRING && v->v.str.len) g_sink += (uint8_t)v->v.str.ptr[v->v.str.len - 1];
    if (v->type != GGUF_VT_ARRAY) {
        g_sink += v->v.u;
        return;
    }
    gguf_arr_iter it;
    gguf_value e;
    gguf_arr_iter_init(&it, v);
    uint64_t n = 0;
    while (gguf_arr_iter_next(&it, &e)) {
        walk(&e, depth + 1);
        n++;
    }
    if (n != v->v.arr.n) abort(); /* documented: next() never fails on a file that opened */
}

static void exercise_getters(const gguf_file *f, const char *key) {
    gm_error err;
    uint32_t u32;
    int32_t i32;
    uint64_t u64;
    float f32;
    bool b;
    gguf_str s;
    const gguf_value *arr;
    if (!gguf_get_u32(f, key, &u32, &err)) g_sink += u32;
    if (!gguf_get_i32(f, key, &i32, &err)) g_sink += (uint32_t)i32;
    if (!gguf_get_u64(f, key, &u64, &err)) g_sink += u64;
    if (!gguf_get_f32(f, key, &f32, &err)) g_sink += (uint64_t)(f32 == f32);
    if (!gguf_get_bool(f, key, &b, &err)) g_sink += b;
    if (!gguf_get_str(f, key, &s, &err) && s.len) g_sink += (uint8_t)s.ptr[0];
    if (!gguf_get_arr(f, key, -1, &arr, &err)) walk(arr, 0);
}

static void exercise_tensor(const gguf_file *f, const gguf_tensor *t) {
    if (!t->hidden && gguf_find_tensor(f, t->name) != t) abort();
    const uint8_t *p = t->data;
    g_sink += p[0] + p[t->nbytes - 1];
    const gm_type_traits *tr = gm_type_traits_of(t->type);
    if (!tr || t->ne[0] > (1 << 16)) return;
    float *row = malloc((size_t)t->ne[0] * sizeof *row);
    if (!row) return;
    tr->dequant_row(t->data, row, t->ne[0]);
    g_sink += (uint64_t)(row[0] == row[0]);
    free(row);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    gguf_file *f = NULL;
    gm_error err = {0};
    gguf_open_options opt = {size & 1}; /* exercise both MTP settings */
    if (gguf_open_memory(data, size, "fuzz.gguf", &opt, &f, &err) != GM_OK) {
        if (!err.msg[0] || !strstr(err.msg, "fuzz.gguf")) abort(); /* errors must name the file */
        return 0;
    }
    for (uint64_t i = 0; i < f->n_kv; i++) {
        if (gguf_find(f, f->kv[i].key) != &f->kv[i]) abort();
        exercise_getters(f, f->kv[i].key);
    }
    exercise_getters(f, "no.such.key");
    for (uint64_t i = 0; i < f->n_tensors; i++) exercise_tensor(f, &f->tensors[i]);
    gguf_close(f);
    return 0;
}
