/* formats/safetensors.c — safetensors reader (see safetensors.h). */
#include "formats/safetensors.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/error.h"
#include "formats/mmap.h"

#define ST_MAX_HEADER (100ull * 1000 * 1000) /* the format's own reference reader's limit */
#define ST_MAX_INDEX (100ll * 1000 * 1000)
#define ST_MAX_JSON_INT 9007199254740992.0   /* 2^53: larger integers are not exact in JSON */

typedef struct st_impl {
    st_file pub;
    gm_mmap map; /* owned (st_open); empty for st_open_memory */
} st_impl;

static st_impl *st_impl_of(st_file *f) { return (st_impl *)((char *)f - offsetof(st_impl, pub)); }

bool st_file_backed(const st_file *f) { return f && st_impl_of((st_file *)f)->map.data != NULL; }

/* ------------------------------------------------------------------ dtypes */

static const struct {
    const char *name;
    int size;
    int type; /* gm_type or -1 */
} k_dtypes[] = {
    {"F64", 8, -1},     {"F32", 4, GM_TYPE_F32}, {"F16", 2, GM_TYPE_F16}, {"BF16", 2, GM_TYPE_BF16},
    {"I64", 8, -1},     {"U64", 8, -1},          {"I32", 4, -1},          {"U32", 4, -1},
    {"I16", 2, -1},     {"U16", 2, -1},          {"I8", 1, -1},           {"U8", 1, -1},
    {"BOOL", 1, -1},    {"F8_E4M3", 1, -1},      {"F8_E5M2", 1, -1},
};

static int dtype_index(const char *dtype) {
    for (size_t i = 0; i < sizeof k_dtypes / sizeof k_dtypes[0]; i++)
        if (!strcmp(k_dtypes[i].name, dtype)) return (int)i;
    return -1;
}

int st_dtype_size(const char *dtype) {
    int i = dtype ? dtype_index(dtype) : -1;
    return i < 0 ? 0 : k_dtypes[i].size;
}

gm_status st_tensor_type(const st_tensor *t, const char *file, int *type, gm_error *err) {
    if (t->type < 0)
        return gm_fail(err, GM_ERR_UNSUPPORTED,
                       "%s: tensor '%s' has dtype %s; only F32, F16 and BF16 tensors are supported",
                       file, t->name, t->dtype);
    *type = t->type;
    return GM_OK;
}

/* ------------------------------------------------------------------ header entries */

/* A JSON number that is a non-negative integer exactly representable as a double. */
static bool json_uint(const cJSON *j, uint64_t *out) {
    if (!cJSON_IsNumber(j)) return false;
    double v = j->valuedouble;
    if (!(v >= 0.0) || v > ST_MAX_JSON_INT || floor(v) != v) return false;
    *out = (uint64_t)v;
    return true;
}

static gm_status parse_shape(const char *file, st_tensor *t, const cJSON *shape, uint64_t *numel,
                             gm_error *err) {
    if (!cJSON_IsArray(shape))
        return gm_fail(err, GM_ERR_FORMAT, "%s: tensor '%s': \"shape\" is missing or not an array", file,
                       t->name);
    int n = cJSON_GetArraySize(shape);
    if (n > ST_MAX_DIMS)
        return gm_fail(err, GM_ERR_FORMAT, "%s: tensor '%s' has %d dimensions (at most %d supported)", file,
                       t->name, n, ST_MAX_DIMS);
    t->n_dims = n;
    uint64_t total = 1;
    bool zero = false;
    int d = 0;
    for (const cJSON *e = shape->child; e; e = e->next, d++) {
        uint64_t v;
        if (!json_uint(e, &v))
            return gm_fail(err, GM_ERR_FORMAT, "%s: tensor '%s': shape[%d] is not a non-negative integer",
                           file, t->name, d);
        t->shape[d] = (int64_t)v;
        if (v == 0) zero = true;
        else if (total > UINT64_MAX / v) /* huge shape: reported as the overflow it is */
            return gm_fail(err, GM_ERR_FORMAT, "%s: tensor '%s': element count overflows", file, t->name);
        else total *= v;
    }
    *numel = zero ? 0 : total;
    return GM_OK;
}

static gm_status parse_entry(const char *file, const cJSON *j, uint64_t data_size, st_tensor *t,
                             gm_error *err) {
    if (!cJSON_IsObject(j))
        return gm_fail(err, GM_ERR_FORMAT, "%s: header entry '%s' is not an object", file, t->name);
    const cJSON *dt = cJSON_GetObjectItemCaseSensitive(j, "dtype");
    if (!cJSON_IsString(dt))
        return gm_fail(err, GM_ERR_FORMAT, "%s: tensor '%s': \"dtype\" is missing or not a string", file,
                       t->name);
    int di = dtype_index(dt->valuestring);
    if (di < 0)
        return gm_fail(err, GM_ERR_UNSUPPORTED, "%s: tensor '%s' has unknown dtype \"%.16s\"", file, t->name,
                       dt->valuestring);
    snprintf(t->dtype, sizeof t->dtype, "%s", k_dtypes[di].name);
    t->type = k_dtypes[di].type;
    uint64_t numel = 0;
    gm_status st = parse_shape(file, t, cJSON_GetObjectItemCaseSensitive(j, "shape"), &numel, err);
    if (st) return st;
    const cJSON *offs = cJSON_GetObjectItemCaseSensitive(j, "data_offsets");
    if (!cJSON_IsArray(offs) || cJSON_GetArraySize(offs) != 2 || !json_uint(offs->child, &t->begin) ||
        !json_uint(offs->child->next, &t->end))
        return gm_fail(err, GM_ERR_FORMAT, "%s: tensor '%s': \"data_offsets\" must be [begin, end] integers",
                       file, t->name);
    if (t->begin > t->end || t->end > data_size)
        return gm_fail(err, GM_ERR_FORMAT, "%s: tensor '%s': data_offsets [%llu, %llu) outside the data "
                       "section (%llu bytes)", file, t->name, (unsigned long long)t->begin,
                       (unsigned long long)t->end, (unsigned long long)data_size);
    uint64_t es = (uint64_t)k_dtypes[di].size;
    if (numel > UINT64_MAX / es || numel * es != t->end - t->begin)
        return gm_fail(err, GM_ERR_FORMAT, "%s: tensor '%s': shape and dtype %s need %llu%s bytes but "
                       "data_offsets span %llu", file, t->name, t->dtype,
                       (unsigned long long)(numel > UINT64_MAX / es ? UINT64_MAX : numel * es),
                       numel > UINT64_MAX / es ? "+" : "", (unsigned long long)(t->end - t->begin));
    t->nbytes = t->end - t->begin;
    return GM_OK;
}

static int cmp_tensor_name(const void *a, const void *b) {
    return strcmp(((const st_tensor *)a)->name, ((const st_tensor *)b)->name);
}

static int cmp_tensor_begin(const void *a, const void *b) {
    const st_tensor *x = *(const st_tensor *const *)a, *y = *(const st_tensor *const *)b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    return x->end < y->end ? -1 : x->end > y->end;
}

/* Duplicate names (cJSON keeps both) and overlapping byte ranges. */
static gm_status check_layout(st_file *f, gm_error *err) {
    if (f->n_tensors < 2) return GM_OK;
    qsort(f->tensors, (size_t)f->n_tensors, sizeof *f->tensors, cmp_tensor_name);
    for (uint64_t i = 1; i < f->n_tensors; i++)
        if (!strcmp(f->tensors[i - 1].name, f->tensors[i].name))
            return gm_fail(err, GM_ERR_FORMAT, "%s: duplicate tensor name '%s'", f->path, f->tensors[i].name);
    const st_tensor **by = malloc((size_t)f->n_tensors * sizeof *by);
    if (!by) return gm_fail(err, GM_ERR_NOMEM, "%s: out of memory", f->path);
    for (uint64_t i = 0; i < f->n_tensors; i++) by[i] = &f->tensors[i];
    qsort(by, (size_t)f->n_tensors, sizeof *by, cmp_tensor_begin);
    gm_status st = GM_OK;
    for (uint64_t i = 1; i < f->n_tensors && !st; i++)
        if (by[i - 1]->end > by[i]->begin)
            st = gm_fail(err, GM_ERR_FORMAT, "%s: tensors '%s' [%llu, %llu) and '%s' [%llu, %llu) overlap",
                         f->path, by[i - 1]->name, (unsigned long long)by[i - 1]->begin,
                         (unsigned long long)by[i - 1]->end, by[i]->name, (unsigned long long)by[i]->begin,
                         (unsigned long long)by[i]->end);
    free(by);
    return st;
}

/* Room for one more tensor; the table grows with the entries actually parsed, so a header of
 * millions of junk entries fails at the first one without a large allocation. */
static gm_status reserve_one(st_file *f, uint64_t *cap, gm_error *err) {
    if (f->n_tensors < *cap) return GM_OK;
    uint64_t ncap = *cap ? *cap * 2 : 64;
    st_tensor *p = realloc(f->tensors, (size_t)ncap * sizeof *p);
    if (!p) return gm_fail(err, GM_ERR_NOMEM, "%s: out of memory", f->path);
    memset(p + *cap, 0, (size_t)(ncap - *cap) * sizeof *p);
    f->tensors = p;
    *cap = ncap;
    return GM_OK;
}

static gm_status parse_entries(st_file *f, const cJSON *root, gm_error *err) {
    uint64_t cap = 0, data_size = f->size - f->data_offset;
    for (const cJSON *j = root->child; j; j = j->next) {
        if (!j->string)
            return gm_fail(err, GM_ERR_FORMAT, "%s: header entry without a name", f->path);
        if (!strcmp(j->string, "__metadata__")) {
            if (!cJSON_IsObject(j))
                return gm_fail(err, GM_ERR_FORMAT, "%s: \"__metadata__\" is not an object", f->path);
            f->has_metadata = true;
            continue;
        }
        if (!j->string[0]) return gm_fail(err, GM_ERR_FORMAT, "%s: tensor with an empty name", f->path);
        gm_status st = reserve_one(f, &cap, err);
        if (st) return st;
        st_tensor *t = &f->tensors[f->n_tensors];
        t->name = strdup(j->string);
        if (!t->name) return gm_fail(err, GM_ERR_NOMEM, "%s: out of memory", f->path);
        f->n_tensors++;
        st = parse_entry(f->path, j, data_size, t, err);
        if (st) return st;
        t->data = f->map + f->data_offset + t->begin;
    }
    return check_layout(f, err);
}

/* ------------------------------------------------------------------ header */

static gm_status parse_header(st_file *f, gm_error *err) {
    if (f->size < 8)
        return gm_fail(err, GM_ERR_FORMAT, "%s: truncated: %llu bytes, too short for a safetensors header",
                       f->path, (unsigned long long)f->size);
    uint64_t n;
    memcpy(&n, f->map, 8);
    if (n > f->size - 8)
        return gm_fail(err, GM_ERR_FORMAT, "%s: header length %llu is larger than the file (%llu bytes): "
                       "truncated or not a safetensors file", f->path, (unsigned long long)n,
                       (unsigned long long)f->size);
    if (n > ST_MAX_HEADER)
        return gm_fail(err, GM_ERR_FORMAT, "%s: header length %llu exceeds the %llu-byte limit", f->path,
                       (unsigned long long)n, (unsigned long long)ST_MAX_HEADER);
    if (n < 2 || f->map[8] != '{')
        return gm_fail(err, GM_ERR_FORMAT, "%s: header is not a JSON object (not a safetensors file?)", f->path);
    f->header_len = n;
    f->data_offset = 8 + n;
    const char *js = (const char *)f->map + 8, *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(js, (size_t)n, &end, 0);
    if (!root || !cJSON_IsObject(root)) {
        cJSON_Delete(root);
        return gm_fail(err, GM_ERR_FORMAT, "%s: header is not valid JSON", f->path);
    }
    /* Only padding (spaces) may follow the JSON object inside the header. */
    for (const char *p = end; p && p < js + n; p++) {
        if (*p != ' ' && *p != '\t' && *p != '\n' && *p != '\r' && *p != 0) {
            cJSON_Delete(root);
            return gm_fail(err, GM_ERR_FORMAT, "%s: unexpected bytes after the JSON header", f->path);
        }
    }
    gm_status st = parse_entries(f, root, err);
    cJSON_Delete(root);
    return st;
}

/* ------------------------------------------------------------------ open / close */

static gm_status open_common(st_impl *g, const char *name, st_file **out, gm_error *err) {
    g->pub.path = strdup(name);
    gm_status st = g->pub.path ? parse_header(&g->pub, err) : gm_fail(err, GM_ERR_NOMEM, "out of memory");
    if (st) {
        st_close(&g->pub);
        return st;
    }
    *out = &g->pub;
    return GM_OK;
}

gm_status st_open(const char *path, st_file **out, gm_error *err) {
    *out = NULL;
    if (!path) return gm_fail(err, GM_ERR_ARG, "st_open: path is NULL");
    st_impl *g = calloc(1, sizeof *g);
    if (!g) return gm_fail(err, GM_ERR_NOMEM, "%s: out of memory", path);
    gm_status st = gm_mmap_open(path, &g->map, err);
    if (st) {
        free(g);
        return st;
    }
    g->pub.map = g->map.data;
    g->pub.size = g->map.size;
    return open_common(g, path, out, err);
}

gm_status st_open_memory(const void *buf, uint64_t size, const char *name, st_file **out, gm_error *err) {
    *out = NULL;
    if (!name) name = "<memory>";
    if (!buf && size) return gm_fail(err, GM_ERR_ARG, "%s: buffer is NULL", name);
    st_impl *g = calloc(1, sizeof *g);
    if (!g) return gm_fail(err, GM_ERR_NOMEM, "%s: out of memory", name);
    g->pub.map = buf;
    g->pub.size = size;
    return open_common(g, name, out, err);
}

void st_close(st_file *f) {
    if (!f) return;
    for (uint64_t i = 0; i < f->n_tensors; i++) free(f->tensors[i].name);
    free(f->tensors);
    free(f->path);
    st_impl *g = st_impl_of(f);
    gm_mmap_close(&g->map);
    free(g);
}

const st_tensor *st_find(const st_file *f, const char *name) {
    if (!f || !name || !f->n_tensors) return NULL;
    st_tensor key = {0};
    key.name = (char *)name;
    return bsearch(&key, f->tensors, (size_t)f->n_tensors, sizeof *f->tensors, cmp_tensor_name);
}

/* ------------------------------------------------------------------ sets (folders, shards) */

static bool is_dir(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

static bool is_file(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

static char *join(const char *dir, const char *name) {
    size_t n = strlen(dir) + strlen(name) + 2;
    char *p = malloc(n);
    if (p) snprintf(p, n, "%s/%s", dir, name);
    return p;
}

/* Reads a small text file whole (NUL-terminated). */
static gm_status read_text(const char *path, long long max, char **out, gm_error *err) {
    gm_mmap m;
    gm_status st = gm_mmap_open(path, &m, err);
    if (st) return st;
    if ((long long)m.size > max) {
        gm_mmap_close(&m);
        return gm_fail(err, GM_ERR_FORMAT, "%s: %llu bytes, larger than the %lld-byte limit", path,
                       (unsigned long long)m.size, max);
    }
    char *p = malloc((size_t)m.size + 1);
    if (!p) {
        gm_mmap_close(&m);
        return gm_fail(err, GM_ERR_NOMEM, "%s: out of memory", path);
    }
    memcpy(p, m.data, (size_t)m.size);
    p[m.size] = 0;
    gm_mmap_close(&m);
    *out = p;
    return GM_OK;
}

static gm_status add_file(st_set *s, const char *name, gm_error *err) {
    for (int i = 0; i < s->n_files; i++)
        if (!strcmp(strrchr(s->files[i]->path, '/') + 1, name)) return GM_OK;
    char *path = join(s->dir, name);
    if (!path) return gm_fail(err, GM_ERR_NOMEM, "out of memory");
    st_file **nf = realloc(s->files, (size_t)(s->n_files + 1) * sizeof *nf);
    if (!nf) {
        free(path);
        return gm_fail(err, GM_ERR_NOMEM, "%s: out of memory", s->dir);
    }
    s->files = nf;
    gm_status st = st_open(path, &s->files[s->n_files], err);
    free(path);
    if (st) return st;
    for (uint64_t i = 0; i < s->files[s->n_files]->n_tensors; i++) s->files[s->n_files]->tensors[i].shard = s->n_files;
    s->n_files++;
    return GM_OK;
}

/* A shard name from an index: a plain file name inside the folder. */
static bool safe_shard_name(const char *n) {
    return n[0] && n[0] != '.' && !strchr(n, '/') && !strchr(n, '\\');
}

static gm_status open_index(st_set *s, const char *index_path, cJSON **wm_out, gm_error *err) {
    char *text = NULL;
    gm_status st = read_text(index_path, ST_MAX_INDEX, &text, err);
    if (st) return st;
    cJSON *root = cJSON_Parse(text);
    free(text);
    const cJSON *wm = root ? cJSON_GetObjectItemCaseSensitive(root, "weight_map") : NULL;
    if (!cJSON_IsObject(wm)) {
        cJSON_Delete(root);
        return gm_fail(err, GM_ERR_FORMAT, "%s: %s", index_path,
                       root ? "no \"weight_map\" object" : "not valid JSON");
    }
    for (const cJSON *e = wm->child; e; e = e->next) {
        if (!cJSON_IsString(e) || !safe_shard_name(e->valuestring)) {
            st = gm_fail(err, GM_ERR_FORMAT, "%s: weight_map entry '%s' is not a plain file name", index_path,
                         e->string ? e->string : "");
            cJSON_Delete(root);
            return st;
        }
        if ((st = add_file(s, e->valuestring, err))) {
            cJSON_Delete(root);
            return gm_fail_prefix(err, "%s: shard listed in the index: ", index_path), st;
        }
    }
    *wm_out = root;
    return GM_OK;
}

/* Every tensor the index assigns to a shard must be in that shard. */
static gm_status check_index(const st_set *s, const char *index_path, const cJSON *root, gm_error *err) {
    const cJSON *wm = cJSON_GetObjectItemCaseSensitive(root, "weight_map");
    for (const cJSON *e = wm->child; e; e = e->next) {
        const st_tensor *t = st_set_find(s, e->string);
        if (!t || strcmp(strrchr(s->files[t->shard]->path, '/') + 1, e->valuestring) != 0)
            return gm_fail(err, GM_ERR_FORMAT, "%s: tensor '%s' is assigned to %s but that shard does not "
                           "hold it", index_path, e->string, e->valuestring);
    }
    return GM_OK;
}

static int cmp_tensor_ptr_name(const void *a, const void *b) {
    return strcmp((*(const st_tensor *const *)a)->name, (*(const st_tensor *const *)b)->name);
}

static gm_status build_index(st_set *s, gm_error *err) {
    uint64_t n = 0;
    for (int i = 0; i < s->n_files; i++) n += s->files[i]->n_tensors;
    s->tensors = malloc((size_t)(n ? n : 1) * sizeof *s->tensors);
    if (!s->tensors) return gm_fail(err, GM_ERR_NOMEM, "%s: out of memory", s->dir);
    for (int i = 0; i < s->n_files; i++)
        for (uint64_t k = 0; k < s->files[i]->n_tensors; k++) s->tensors[s->n_tensors++] = &s->files[i]->tensors[k];
    qsort(s->tensors, (size_t)n, sizeof *s->tensors, cmp_tensor_ptr_name);
    for (uint64_t i = 1; i < n; i++)
        if (!strcmp(s->tensors[i - 1]->name, s->tensors[i]->name))
            return gm_fail(err, GM_ERR_FORMAT, "%s: tensor '%s' appears in both %s and %s", s->dir,
                           s->tensors[i]->name, s->files[s->tensors[i - 1]->shard]->path,
                           s->files[s->tensors[i]->shard]->path);
    return GM_OK;
}

/* A folder without an index: model.safetensors, else its only .safetensors file. */
static gm_status pick_single(const char *dir, char **name, gm_error *err) {
    char *p = join(dir, "model.safetensors");
    bool found = p && is_file(p);
    free(p);
    if (found) return (*name = strdup("model.safetensors")) ? GM_OK : gm_fail(err, GM_ERR_NOMEM, "out of memory");
    DIR *d = opendir(dir);
    if (!d) return gm_fail(err, GM_ERR_IO, "%s: cannot list folder: %s", dir, strerror(errno));
    int count = 0;
    struct dirent *e;
    *name = NULL;
    while ((e = readdir(d))) {
        size_t n = strlen(e->d_name);
        if (n > 12 && !strcmp(e->d_name + n - 12, ".safetensors")) {
            count++;
            free(*name);
            *name = strdup(e->d_name);
        }
    }
    closedir(d);
    if (count == 1 && *name) return GM_OK;
    free(*name);
    *name = NULL;
    if (count == 0) return gm_fail(err, GM_ERR_NOT_FOUND, "%s: no .safetensors file in the folder", dir);
    return gm_fail(err, GM_ERR_FORMAT, "%s: %d .safetensors files but no model.safetensors.index.json", dir,
                   count);
}

static gm_status set_open_files(st_set *s, const char *path, gm_error *err) {
    gm_status st;
    if (!is_dir(path)) {
        const char *slash = strrchr(path, '/');
        s->dir = slash ? strndup(path, (size_t)(slash - path)) : strdup(".");
        if (!s->dir) return gm_fail(err, GM_ERR_NOMEM, "out of memory");
        return add_file(s, slash ? slash + 1 : path, err);
    }
    s->dir = strdup(path);
    if (!s->dir) return gm_fail(err, GM_ERR_NOMEM, "out of memory");
    char *index = join(path, "model.safetensors.index.json");
    if (!index) return gm_fail(err, GM_ERR_NOMEM, "out of memory");
    if (is_file(index)) {
        cJSON *root = NULL;
        st = open_index(s, index, &root, err);
        if (!st && !(st = build_index(s, err))) st = check_index(s, index, root, err);
        cJSON_Delete(root);
        free(index);
        return st;
    }
    free(index);
    char *name;
    if ((st = pick_single(path, &name, err))) return st;
    st = add_file(s, name, err);
    free(name);
    return st;
}

gm_status st_set_open(const char *path, st_set **out, gm_error *err) {
    *out = NULL;
    if (!path) return gm_fail(err, GM_ERR_ARG, "st_set_open: path is NULL");
    st_set *s = calloc(1, sizeof *s);
    if (!s) return gm_fail(err, GM_ERR_NOMEM, "%s: out of memory", path);
    gm_status st = set_open_files(s, path, err);
    if (!st && !s->tensors) st = build_index(s, err);
    if (st) {
        st_set_close(s);
        return st;
    }
    *out = s;
    return GM_OK;
}

void st_set_close(st_set *s) {
    if (!s) return;
    for (int i = 0; i < s->n_files; i++) st_close(s->files[i]);
    free(s->files);
    free(s->tensors);
    free(s->dir);
    free(s);
}

const st_tensor *st_set_find(const st_set *s, const char *name) {
    if (!s || !name || !s->tensors) return NULL;
    st_tensor key = {0};
    key.name = (char *)name;
    const st_tensor *kp = &key;
    const st_tensor *const *r = bsearch(&kp, s->tensors, (size_t)s->n_tensors, sizeof *s->tensors, cmp_tensor_ptr_name);
    return r ? *r : NULL;
}

const char *st_set_file_of(const st_set *s, const st_tensor *t) {
    if (!s || !t || t->shard < 0 || t->shard >= s->n_files) return NULL;
    return s->files[t->shard]->path;
}
