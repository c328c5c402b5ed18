/* server/ollama_models.c — Ollama's model endpoints, from the facts of the one model served (read once
 * when it opens): /api/version, /api/tags, /api/show (details, model_info, capabilities), /api/ps; and
 * /api/embed, Ollama's shape around srv_embeddings. */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <time.h>

#include "core/siphash.h"
#include "server/server.h"
#include "gemma_chat.h"

static char *print_free(cJSON *o) {
    char *s = o ? cJSON_PrintUnformatted(o) : NULL;
    cJSON_Delete(o);
    return s;
}

static bool bad(srv_error *e, const char *fmt, const char *field) { return srq_bad(e, fmt, field); }

static bool oom(srv_error *e) {
    srv_error_set(e, 500, "server_error", NULL, "out of memory");
    return false;
}

static int64_t ns(double seconds) { return seconds > 0 ? (int64_t)llround(seconds * 1e9) : 0; }

/* The version /api/version reports: clients gate features on it (capabilities in /api/show came with
 * 0.6.4; VS Code's provider wants a numeric x.y.z), and this API follows Ollama's of that release. */
#define OLLAMA_VERSION "0.12.0"

/* ---------------------------------------------------------------- the model's facts */

/* Ollama's way of writing a parameter count: "268.10M", "4.3B". */
static void human_number(int64_t n, char *out, size_t len) {
    const double x = (double)n;
    if (x >= 1e9) snprintf(out, len, x / 1e9 == floor(x / 1e9) ? "%.0fB" : "%.1fB", x / 1e9);
    else if (x >= 1e6) snprintf(out, len, x / 1e6 == floor(x / 1e6) ? "%.0fM" : "%.2fM", x / 1e6);
    else if (x >= 1e3) snprintf(out, len, "%.0fK", x / 1e3);
    else snprintf(out, len, "%lld", (long long)n);
}

/* The quantization a file name states ("...-q4_k_m.gguf"), as Ollama names file types; "" when none. */
static void quant_of_name(const char *path, char *out, size_t n) {
    static const char *const names[] = {"q4_k_m", "q4_k_s", "q5_k_m", "q5_k_s", "q3_k_m", "q3_k_s", "q3_k_l",
                                        "iq4_xs", "iq4_nl", "q2_k",   "q6_k",   "q4_0",   "q4_1",   "q5_0",
                                        "q5_1",   "q8_0",   "bf16",   "f16",    "f32"};
    const char *b = strrchr(path, '/');
    b = b ? b + 1 : path;
    out[0] = 0;
    for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
        const size_t l = strlen(names[i]);
        for (const char *p = b; (p = strcasestr(p, names[i])); p++) {
            const char before = p > b ? p[-1] : '-', after = p[l];
            if ((before == '-' || before == '_' || before == '.') &&
                (after == '-' || after == '_' || after == '.' || !after)) {
                for (size_t k = 0; k <= l && k < n; k++)
                    out[k] = (char)(k < l && p[k] >= 'a' && p[k] <= 'z' ? p[k] - 32 : p[k]);
                if (l < n) out[l] = 0;
                return;
            }
        }
    }
}

/* Parameters and the weights' most common type (by bytes, in the blocks) from the model's description. */
static void describe_facts(ollama_facts *f, const char *path) {
    char *buf = NULL;
    size_t len = 0;
    FILE *mem = open_memstream(&buf, &len);
    if (!mem) return;
    gm_error err = {0};
    gm_model_describe(path, true, false, mem, &err);
    fclose(mem);
    cJSON *d = cJSON_ParseWithLength(buf ? buf : "", len);
    free(buf);
    const cJSON *t, *tensors = cJSON_GetObjectItemCaseSensitive(d, "tensors");
    cJSON *bytes_by_type = cJSON_CreateObject();
    cJSON_ArrayForEach(t, tensors) {
        double n = 1;
        const cJSON *dim, *shape = cJSON_GetObjectItemCaseSensitive(t, "shape");
        cJSON_ArrayForEach(dim, shape) n *= cJSON_IsNumber(dim) ? dim->valuedouble : 1;
        f->n_params += (int64_t)n;
        const cJSON *name = cJSON_GetObjectItemCaseSensitive(t, "name"),
                    *type = cJSON_GetObjectItemCaseSensitive(t, "type");
        const cJSON *b = cJSON_GetObjectItemCaseSensitive(t, "bytes");
        if (!cJSON_IsString(name) || strncmp(name->valuestring, "blk.", 4) || !cJSON_IsString(type) ||
            !cJSON_IsNumber(b))
            continue;
        cJSON *have = cJSON_GetObjectItemCaseSensitive(bytes_by_type, type->valuestring);
        if (have) cJSON_SetNumberValue(have, have->valuedouble + b->valuedouble);
        else cJSON_AddNumberToObject(bytes_by_type, type->valuestring, b->valuedouble);
    }
    const cJSON *best = NULL, *k;
    cJSON_ArrayForEach(k, bytes_by_type) if (!best || k->valuedouble > best->valuedouble) best = k;
    if (!f->quantization[0] && best) snprintf(f->quantization, sizeof f->quantization, "%s", best->string);
    cJSON_Delete(bytes_by_type);
    cJSON_Delete(d);
}

void ollama_facts_init(ollama_facts *f, const char *path, const char *id, const gm_model *m, int n_ctx, bool vision) {
    *f = (ollama_facts){.id = id, .n_ctx = n_ctx, .vision = vision};
    snprintf(f->name, sizeof f->name, strchr(id, ':') ? "%s" : "%s:latest", id);
    f->cfg = gm_model_config(m);
    snprintf(f->family, sizeof f->family, "%s", f->cfg->arch);
    f->embedding = f->cfg->is_embedding;
    f->completion = !f->embedding;
    const gm_tool_format tf = gm_tokenizer_tool_format(gm_model_tokenizer(m));
    f->tools = f->completion && tf != GM_TOOLS_NONE;
    f->thinking = f->completion && tf == GM_TOOLS_GEMMA4;
    struct stat st;
    time_t mtime = time(NULL);
    if (!stat(path, &st)) {
        f->size = S_ISREG(st.st_mode) ? (int64_t)st.st_size : 0;
        mtime = st.st_mtime;
    }
    struct tm tm;
    gmtime_r(&mtime, &tm);
    strftime(f->modified_at, sizeof f->modified_at, "%Y-%m-%dT%H:%M:%SZ", &tm);
    /* an identity of the file, not a hash of its bytes (gigabytes are not read to name them) */
    for (int part = 0; part < 4; part++) {
        const uint64_t key[2] = {0x6f6c6c616d61ULL + (uint64_t)part, 0x67656d6d612e63ULL};
        gm_sip s = gm_sip_begin(key);
        for (const char *p = path; *p; p++) gm_sip_word(&s, (unsigned char)*p);
        gm_sip_word(&s, (uint64_t)f->size);
        gm_sip_word(&s, (uint64_t)mtime);
        snprintf(f->digest + 16 * part, 17, "%016llx", (unsigned long long)gm_sip_end(&s));
    }
    quant_of_name(path, f->quantization, sizeof f->quantization);
    describe_facts(f, path);
    human_number(f->n_params, f->parameter_size, sizeof f->parameter_size);
}

static cJSON *details_json(const ollama_facts *f) {
    cJSON *d = cJSON_CreateObject();
    cJSON_AddStringToObject(d, "parent_model", "");
    cJSON_AddStringToObject(d, "format", "gguf");
    cJSON_AddStringToObject(d, "family", f->family);
    cJSON_AddItemToArray(cJSON_AddArrayToObject(d, "families"), cJSON_CreateString(f->family));
    cJSON_AddStringToObject(d, "parameter_size", f->parameter_size);
    cJSON_AddStringToObject(d, "quantization_level", f->quantization);
    return d;
}

static cJSON *model_entry(const ollama_facts *f) {
    cJSON *m = cJSON_CreateObject();
    cJSON_AddStringToObject(m, "name", f->name);
    cJSON_AddStringToObject(m, "model", f->name);
    cJSON_AddNumberToObject(m, "size", (double)f->size);
    cJSON_AddStringToObject(m, "digest", f->digest);
    cJSON_AddItemToObject(m, "details", details_json(f));
    return m;
}

char *ollama_version(void) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "version", OLLAMA_VERSION);
    return print_free(o);
}

char *ollama_tags(const ollama_facts *f) {
    cJSON *o = cJSON_CreateObject(), *m = model_entry(f);
    cJSON_AddStringToObject(m, "modified_at", f->modified_at);
    cJSON_AddItemToArray(cJSON_AddArrayToObject(o, "models"), m);
    return print_free(o);
}

/* The one model is always loaded: it never expires; it sits in memory, not on a GPU. */
char *ollama_ps(const ollama_facts *f) {
    cJSON *o = cJSON_CreateObject(), *m = model_entry(f);
    cJSON_AddStringToObject(m, "expires_at", "9999-12-31T23:59:59Z");
    cJSON_AddNumberToObject(m, "size_vram", 0);
    cJSON_AddNumberToObject(m, "context_length", f->n_ctx);
    cJSON_AddItemToArray(cJSON_AddArrayToObject(o, "models"), m);
    return print_free(o);
}

/* model_info's keys as GGUF names them; the context length is the server's (what a request may use). */
static cJSON *model_info(const ollama_facts *f) {
    const gm_config *c = f->cfg;
    cJSON *mi = cJSON_CreateObject();
    char k[96];
    cJSON_AddStringToObject(mi, "general.architecture", f->family);
    cJSON_AddNumberToObject(mi, "general.parameter_count", (double)f->n_params);
#define KEY(suffix, value)                                                                                             \
    (snprintf(k, sizeof k, "%s." suffix, f->family), cJSON_AddNumberToObject(mi, k, (double)(value)))
    KEY("context_length", f->n_ctx);
    KEY("embedding_length", f->embedding ? c->embedding_dim : c->d_model);
    KEY("block_count", c->n_layers);
    KEY("feed_forward_length", c->d_ff);
    KEY("attention.head_count", c->n_heads);
    KEY("attention.head_count_kv", c->n_kv_heads);
    KEY("attention.key_length", c->head_dim);
    KEY("attention.value_length", c->head_dim);
    if (c->sliding_window) KEY("attention.sliding_window", c->sliding_window);
    KEY("vocab_size", c->n_vocab);
#undef KEY
    return mi;
}

char *ollama_show(const ollama_facts *f, const char *body, size_t len, int *status) {
    srv_error e = {0};
    char echo[200];
    cJSON *root = cJSON_ParseWithLength(body ? body : "", len);
    static const char *const known[] = {"model", "name", "verbose"};
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(root, "name");
    if (cJSON_IsObject(root) && !cJSON_GetObjectItemCaseSensitive(root, "model") && cJSON_IsString(name))
        cJSON_AddStringToObject(root, "model", name->valuestring); /* the older field name */
    const bool ok = (cJSON_IsObject(root) || bad(&e, "the body must be a JSON %s", "object")) &&
                    srq_known(root, NULL, known, 3, &e) && ollama_model_ok(root, f->id, echo, sizeof echo, &e);
    cJSON_Delete(root);
    if (!ok) {
        *status = e.status;
        return ollama_error_json(&e);
    }
    cJSON *o = cJSON_CreateObject();
    char modelfile[400];
    snprintf(modelfile, sizeof modelfile, "# served by gemma.c (gemma serve)\nFROM %s\n", f->id);
    cJSON_AddStringToObject(o, "modelfile", modelfile);
    cJSON_AddStringToObject(o, "parameters", f->completion ? "temperature 1\ntop_k 64\ntop_p 0.95" : "");
    cJSON_AddStringToObject(o, "template", f->completion ? "{{ gemma chat format }}" : "");
    cJSON_AddItemToObject(o, "details", details_json(f));
    cJSON_AddItemToObject(o, "model_info", model_info(f));
    cJSON *caps = cJSON_AddArrayToObject(o, "capabilities");
    const struct {
        bool on;
        const char *name;
    } cap[] = {{f->completion, "completion"},
               {f->tools, "tools"},
               {f->vision, "vision"},
               {f->embedding, "embedding"},
               {f->thinking, "thinking"}};
    for (size_t i = 0; i < sizeof cap / sizeof *cap; i++)
        if (cap[i].on) cJSON_AddItemToArray(caps, cJSON_CreateString(cap[i].name));
    cJSON_AddStringToObject(o, "modified_at", f->modified_at);
    *status = 200;
    return print_free(o);
}

/* ---------------------------------------------------------------- /api/embed */

/* {model, input: string | [string], truncate?, dimensions?, options?, keep_alive?} through srv_embeddings,
 * whose answer is rewritten as Ollama's {model, embeddings, total_duration, load_duration,
 * prompt_eval_count}. Inputs longer than the context are refused whatever truncate says. */
char *ollama_embed(const srv_embed_ctx *x, const ollama_facts *f, const char *body, size_t len, int *status,
                   int *n_prompt) {
    const double t0 = srv_now();
    srv_error e = {0};
    char echo[200];
    cJSON *root = cJSON_ParseWithLength(body ? body : "", len);
    static const char *const known[] = {"model", "input", "truncate", "dimensions", "options", "keep_alive"};
    const cJSON *input = cJSON_GetObjectItemCaseSensitive(root, "input");
    const cJSON *dims = cJSON_GetObjectItemCaseSensitive(root, "dimensions");
    const cJSON *trunc = cJSON_GetObjectItemCaseSensitive(root, "truncate");
    const cJSON *opts = cJSON_GetObjectItemCaseSensitive(root, "options");
    bool ok = (cJSON_IsObject(root) || bad(&e, "the body must be a JSON %s", "object")) &&
              srq_known(root, NULL, known, sizeof known / sizeof *known, &e) &&
              ollama_model_ok(root, f->id, echo, sizeof echo, &e);
    if (ok && !(cJSON_IsString(input) || cJSON_IsArray(input)))
        ok = bad(&e, "'%s' must be a string or a list of strings", "input");
    const cJSON *it;
    if (ok && cJSON_IsArray(input))
        cJSON_ArrayForEach(it, input) if (ok && !cJSON_IsString(it))
            ok = bad(&e, "'%s' must be a string or a list of strings", "input");
    if (ok && trunc && !cJSON_IsNull(trunc) && !cJSON_IsBool(trunc))
        ok = bad(&e, "'%s' must be true or false", "truncate");
    if (ok && opts && !cJSON_IsNull(opts) && !cJSON_IsObject(opts)) ok = bad(&e, "'%s' must be an object", "options");
    char *inner = NULL;
    if (ok) { /* the same request in the OpenAI shape */
        cJSON *q = cJSON_CreateObject();
        cJSON_AddItemToObject(q, "input", cJSON_Duplicate(input, true));
        if (dims && !cJSON_IsNull(dims)) cJSON_AddItemToObject(q, "dimensions", cJSON_Duplicate(dims, true));
        inner = print_free(q);
        if (!inner) ok = oom(&e);
    }
    cJSON_Delete(root);
    if (!ok) {
        *status = e.status;
        return ollama_error_json(&e);
    }
    char *res = srv_embeddings(x, inner, strlen(inner), status, n_prompt);
    free(inner);
    cJSON *r = cJSON_Parse(res ? res : "");
    free(res);
    if (*status != 200) { /* the OpenAI error's message in Ollama's shape (499: nobody to answer) */
        const cJSON *er = cJSON_GetObjectItemCaseSensitive(r, "error");
        const cJSON *msg = cJSON_GetObjectItemCaseSensitive(er, "message");
        e = srv_error_of(*status, "", "", cJSON_IsString(msg) ? msg->valuestring : "embedding failed");
        cJSON_Delete(r);
        return ollama_error_json(&e);
    }
    cJSON *o = cJSON_CreateObject(), *list = cJSON_AddArrayToObject(o, "embeddings");
    cJSON_AddStringToObject(o, "model", echo);
    const cJSON *d, *data = cJSON_GetObjectItemCaseSensitive(r, "data");
    cJSON_ArrayForEach(d, data)
        cJSON_AddItemToArray(list, cJSON_DetachItemFromObjectCaseSensitive((cJSON *)d, "embedding"));
    cJSON_AddNumberToObject(o, "total_duration", (double)ns(srv_now() - t0));
    cJSON_AddNumberToObject(o, "load_duration", 0);
    cJSON_AddNumberToObject(o, "prompt_eval_count", *n_prompt);
    cJSON_Delete(r);
    return print_free(o);
}
