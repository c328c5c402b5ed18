/* tests/support/safetensors_writer.c — see safetensors_writer.h */
#include "safetensors_writer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

bool st_write(const char *path, const st_tensor *t, int n) {
    cJSON *h = cJSON_CreateObject();
    cJSON_AddStringToObject(cJSON_AddObjectToObject(h, "__metadata__"), "format", "pt");
    size_t off = 0;
    for (int i = 0; i < n; i++) {
        cJSON *e = cJSON_AddObjectToObject(h, t[i].name);
        cJSON_AddStringToObject(e, "dtype", t[i].dtype);
        cJSON *shape = cJSON_AddArrayToObject(e, "shape");
        for (int d = 0; d < t[i].nd; d++) cJSON_AddItemToArray(shape, cJSON_CreateNumber((double)t[i].shape[d]));
        cJSON *offs = cJSON_AddArrayToObject(e, "data_offsets");
        cJSON_AddItemToArray(offs, cJSON_CreateNumber((double)off));
        cJSON_AddItemToArray(offs, cJSON_CreateNumber((double)(off + t[i].nbytes)));
        off += t[i].nbytes;
    }
    char *js = cJSON_PrintUnformatted(h);
    cJSON_Delete(h);
    if (!js) return false;
    const size_t jn = strlen(js), padded = (jn + 7) / 8 * 8;
    const uint64_t n64 = padded;
    FILE *f = fopen(path, "wb");
    bool ok = f && fwrite(&n64, 8, 1, f) == 1 && fwrite(js, 1, jn, f) == jn;
    for (size_t i = jn; ok && i < padded; i++) ok = fputc(' ', f) != EOF;
    for (int i = 0; ok && i < n; i++) ok = fwrite(t[i].data, 1, t[i].nbytes, f) == t[i].nbytes;
    if (f && fclose(f) != 0) ok = false;
    free(js);
    return ok;
}

bool st_write_json(const char *path, cJSON *j) {
    char *text = cJSON_Print(j);
    cJSON_Delete(j);
    FILE *f = text ? fopen(path, "wb") : NULL;
    bool ok = f && fputs(text, f) >= 0;
    if (f && fclose(f) != 0) ok = false;
    free(text);
    return ok;
}
