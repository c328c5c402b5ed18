/* tests/test_bad_files.c — every file and folder in tests/data/bad/ (made by
 * tests/gen/make_bad_files.py) must be refused: a non-OK status and a message that names the file.
 *   *.gguf         gguf_open, from disk and from memory; files that parse must then fail in
 *                  gm_source_open + gm_config_load (unsupported architecture, missing tensors, ...)
 *   *.safetensors  st_open, st_open_memory and st_set_open
 *   folders        gm_source_open + gm_config_load (HF folders: missing shard, bad config, ...)
 * Run under the sanitizer build this also proves no crash, leak or out-of-bounds read. */
#include <dirent.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "formats/gguf.h"
#include "formats/safetensors.h"
#include "model/source.h"
#include "support/test.h"

static bool ends_with(const char *s, const char *suf) {
    size_t n = strlen(s), k = strlen(suf);
    return n >= k && !strcmp(s + n - k, suf);
}

/* The status must be an error and the message must name `name`. */
static bool refused(gm_status st, const gm_error *err, const char *name, const char *what, const char *file) {
    bool ok = st != GM_OK && err->msg[0] && strstr(err->msg, name);
    CHECK_MSG(ok, "%s via %s: status %d, message \"%s\"", file, what, (int)st, err->msg);
    return ok;
}

/* Opens as a model: source then config; returns the first failing status. */
static gm_status open_model(const char *path, gm_error *err) {
    gm_source *s = NULL;
    gm_status st = gm_source_open(path, false, &s, err);
    if (st == GM_OK) {
        gm_config c;
        st = gm_config_load(s, &c, err);
        gm_source_close(s);
    }
    return st;
}

static void check_gguf(const char *path, const char *name) {
    gm_error err = {0};
    gguf_file *f = NULL;
    gm_status st = gguf_open(path, NULL, &f, &err);
    if (st == GM_OK) { /* well-formed GGUF: the model layer must refuse it */
        gguf_close(f);
        memset(&err, 0, sizeof err);
        refused(open_model(path, &err), &err, name, "source+config", name);
        return;
    }
    refused(st, &err, name, "gguf_open", name);
    size_t len = 0;
    unsigned char *buf = test_read_file(path, &len);
    if (!buf) return;
    memset(&err, 0, sizeof err);
    st = gguf_open_memory(buf, len, name, NULL, &f, &err);
    refused(st, &err, name, "gguf_open_memory", name);
    if (st == GM_OK) gguf_close(f);
    memset(&err, 0, sizeof err);
    refused(open_model(path, &err), &err, name, "gm_source_open", name);
    free(buf);
}

static void check_safetensors(const char *path, const char *name) {
    gm_error err = {0};
    st_file *f = NULL;
    gm_status st = st_open(path, &f, &err);
    refused(st, &err, name, "st_open", name);
    if (st == GM_OK) st_close(f);
    size_t len = 0;
    unsigned char *buf = test_read_file(path, &len);
    if (buf) {
        memset(&err, 0, sizeof err);
        st = st_open_memory(buf, len, name, &f, &err);
        refused(st, &err, name, "st_open_memory", name);
        if (st == GM_OK) st_close(f);
        free(buf);
    }
    st_set *s = NULL;
    memset(&err, 0, sizeof err);
    st = st_set_open(path, &s, &err);
    refused(st, &err, name, "st_set_open", name);
    if (st == GM_OK) st_set_close(s);
}

static void check_folder(const char *path, const char *name) {
    gm_error err = {0};
    refused(open_model(path, &err), &err, name, "source+config", name);
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

TEST(every_bad_file_is_refused) {
    const char *dir = test_data_path("bad");
    char root[4096];
    snprintf(root, sizeof root, "%s", dir);
    DIR *d = opendir(root);
    CHECK_MSG(d != NULL, "cannot open %s", root);
    if (!d) return;
    char *names[512];
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) && n < 512)
        if (e->d_name[0] != '.') names[n++] = strdup(e->d_name);
    closedir(d);
    qsort(names, (size_t)n, sizeof *names, cmp_str);
    int n_gguf = 0, n_st = 0, n_dir = 0;
    for (int i = 0; i < n; i++) {
        char path[8192];
        snprintf(path, sizeof path, "%s/%s", root, names[i]);
        struct stat st;
        if (stat(path, &st) != 0) continue;
        if (S_ISDIR(st.st_mode)) { check_folder(path, names[i]); n_dir++; }
        else if (ends_with(names[i], ".gguf")) { check_gguf(path, names[i]); n_gguf++; }
        else if (ends_with(names[i], ".safetensors")) { check_safetensors(path, names[i]); n_st++; }
        else CHECK_MSG(false, "unexpected file %s in tests/data/bad", names[i]);
        free(names[i]);
    }
    fprintf(stderr, "  %d GGUF files, %d safetensors files, %d folders\n", n_gguf, n_st, n_dir);
    CHECK(n_gguf >= 40 && n_st >= 15 && n_dir >= 8);
}

int main(void) {
    RUN(every_bad_file_is_refused);
    return test_summary();
}
