/* tests/support/hf_writer.h — the files of a Hugging Face folder for the test model builders (tiny_model,
 * tiny_gemma3n, tiny_gemma4): safetensors, JSON documents and the tokenizer files, one writer for all. */
#ifndef GM_TEST_HF_WRITER_H
#define GM_TEST_HF_WRITER_H

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct st_tensor {
    const char *name;
    const char *dtype; /* "F32", "F16", "BF16" */
    int nd;
    int64_t shape[4]; /* PyTorch order (outermost first) */
    const void *data;
    size_t nbytes;
} st_tensor;

/* path <- the header (JSON, padded with spaces to 8 bytes, as safetensors does) and the tensors' bytes in
 * order. False on any write error. */
bool st_write(const char *path, const st_tensor *t, int n);

/* path <- cJSON_Print(j); j is freed in every case. */
bool st_write_json(const char *path, cJSON *j);

/* dir/tokenizer.json (a Unigram model with byte fallback: tokens[i] with scores[i], spaces as U+2581, no
 * prefix space; the tokens with special[i] as special added tokens) and dir/tokenizer_config.json
 * (<bos> <eos> <unk> <pad>, BOS added, EOS not). */
bool hf_write_tokenizer(const char *dir, int n, const char *const *tokens, const double *scores, const bool *special,
                        int unk_id);

#endif
