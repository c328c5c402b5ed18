/* fuzz/fuzz_safetensors.c — libFuzzer harness for the safetensors reader: st_open_memory on
 * arbitrary bytes, then every tensor's lookup, type check and first / last data byte. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "formats/safetensors.h"

static volatile uint64_t g_sink;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    st_file *f = NULL;
    gm_error err = {0};
    if (st_open_memory(data, size, "fuzz.safetensors", &f, &err) != GM_OK) {
        if (!err.msg[0] || !strstr(err.msg, "fuzz.safetensors")) abort(); /* errors must name the file */
        return 0;
    }
    for (uint64_t i = 0; i < f->n_tensors; i++) {
        const st_tensor *t = &f->tensors[i];
        if (st_find(f, t->name) != t) abort();
        int type;
        if (st_tensor_type(t, f->path, &type, &err) == GM_OK) g_sink += (uint64_t)type;
        if ((uint64_t)st_dtype_size(t->dtype) == 0) abort();
        if (t->nbytes) {
            const uint8_t *p = t->data;
            g_sink += p[0] + p[t->nbytes - 1];
        }
    }
    st_close(f);
    return 0;
}
