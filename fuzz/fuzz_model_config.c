/* fuzz/fuzz_model_config.c — libFuzzer harness for the model layer over GGUF: gm_source (name
 * lookup) and gm_config_load (metadata rules, token search, tensor presence and shape checks) on
 * arbitrary GGUF images; seeds are tiny valid models so mutations reach the config rules. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "model/source.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    gm_source *s = NULL;
    gm_error err = {0};
    if (gm_source_open_gguf_memory(data, size, "fuzz.gguf", size & 1, &s, &err) != GM_OK) {
        if (!strstr(err.msg, "fuzz.gguf")) abort();
        return 0;
    }
    for (int64_t i = 0; i < gm_source_n_tensors(s); i++)
        if (gm_source_tensor(s, gm_source_tensor_at(s, i)->name) != gm_source_tensor_at(s, i)) abort();
    gm_config c;
    memset(&err, 0, sizeof err);
    if (gm_config_load(s, &c, &err) == GM_OK) {
        /* a config that loads is usable: positive sizes, ids inside the vocabulary */
        if (c.d_model <= 0 || c.n_layers <= 0 || c.n_heads <= 0 || c.n_kv_heads <= 0 || c.head_dim <= 0 ||
            c.n_heads % c.n_kv_heads != 0 || c.n_vocab <= 0 || c.eos_id >= c.n_vocab || c.bos_id >= c.n_vocab ||
            !(c.norm_eps > 0) || !isfinite(c.query_scale))
            abort();
        /* an embedding model has a pooled vector whose projections chain from and back to d_model */
        if (c.is_embedding && (c.embedding_dim <= 0 || (c.dense_2_out && c.dense_2_in != c.d_model) ||
                               (c.dense_3_out && c.dense_3_out != c.d_model)))
            abort();
    } else if (!strstr(err.msg, "fuzz.gguf")) {
        abort();
    }
    gm_source_close(s);
    return 0;
}
