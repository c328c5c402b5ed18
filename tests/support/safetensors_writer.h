/* tests/support/safetensors_writer.h — writes safetensors files and JSON documents for the test model
 * builders (tiny_model, tiny_gemma3n, tiny_gemma4): one writer instead of one per builder. */
#ifndef GM_TEST_SAFETENSORS_WRITER_H
#define GM_TEST_SAFETENSORS_WRITER_H

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

#endif
