/* tools/cmd_serve.c — `gemma serve`: options, then the server (server/). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/server.h"
#include "tools/cli_opts.h"
#include "tools/cli_util.h"
#include "tools/commands.h"

/* The API keys given: pointers into argv or lines of key files (owned). */
typedef struct key_list {
    const char **keys;
    char **owned;
    int n, n_owned;
} key_list;

static bool add_key(key_list *kl, srv_options *o, const char *k, bool own) {
    const char **p = realloc(kl->keys, (size_t)(kl->n + 1) * sizeof *p);
    char **q = own ? realloc(kl->owned, (size_t)(kl->n_owned + 1) * sizeof *q) : NULL;
    if (p) kl->keys = p;
    if (q) kl->owned = q;
    if (!p || (own && !q)) return false;
    kl->keys[kl->n++] = k;
    if (own) kl->owned[kl->n_owned++] = (char *)k;
    o->api_keys = kl->keys;
    o->n_api_keys = kl->n;
    return true;
}

static void free_keys(key_list *kl) {
    for (int i = 0; i < kl->n_owned; i++) free(kl->owned[i]);
    free(kl->owned);
    free(kl->keys);
}

/* One key per line, surrounding blanks trimmed; empty lines and lines starting with # are skipped. A
 * file without a key is an error: it would leave the server open. */
static bool read_key_file(key_list *kl, srv_options *o, const char *path) {
    FILE *f = fopen(path, "r");
    if (!f) return false;
    char line[4096];
    bool ok = true;
    int found = 0;
    while (ok && fgets(line, sizeof line, f)) {
        char *b = line, *e = line + strcspn(line, "\r\n");
        while (b < e && (*b == ' ' || *b == '\t')) b++;
        while (e > b && (e[-1] == ' ' || e[-1] == '\t')) e--;
        *e = 0;
        if (b == e || *b == '#') continue;
        char *k = strdup(b);
        ok = k && add_key(kl, o, k, true);
        if (!ok) free(k);
        found++;
    }
    fclose(f);
    return ok && found > 0;
}

/* The keys: $GEMMA_API_KEY, each --api-key, the lines of each --api-key-file. Returns CLI_GO or 2. */
static int gather_keys(const cli_args *a, srv_options *o, key_list *kl) {
    const char *env = getenv("GEMMA_API_KEY");
    if (env && *env && !add_key(kl, o, env, false)) return 2;
    for (int i = 0; i < a->api_keys.n; i++)
        if (!add_key(kl, o, a->api_keys.v[i], false)) return 2;
    for (int i = 0; i < a->api_key_files.n; i++)
        if (!read_key_file(kl, o, a->api_key_files.v[i])) {
            fprintf(stderr, "gemma serve: --api-key-file expects a readable file with at least one key, got '%s'\n",
                    a->api_key_files.v[i]);
            return 2;
        }
    return CLI_GO;
}

/* The combinations of options that do not go together. Returns CLI_GO or 2. */
static int check_combinations(const srv_options *o, bool eagle3) {
    const char *why = NULL;
    if (eagle3)
        why = "--eagle3 is not served yet (the server computes prompts without the states the head reads): use --mtp, "
              "--draft-model or --lookup";
    else if (!!o->lookup + !!o->draft_model_path + !!o->mtp_path > 1)
        why = "--lookup, --draft-model and --mtp are ways to propose tokens: give one";
    else if (o->draft_max && !o->lookup && !o->draft_model_path && !o->mtp_path)
        why = "--draft-max needs --lookup, --draft-model or --mtp";
    else if (o->media_path && !o->mmproj_path)
        why = "--media-path needs --mmproj (images need the model's vision encoder)";
    else if (o->prefix_scope_key && !o->n_api_keys)
        why = "--prefix-cache-scope key needs API keys (--api-key, --api-key-file)";
    if (!why) return CLI_GO;
    fprintf(stderr, "gemma serve: %s\n", why);
    return 2;
}

/* The server's options: the table filled most of a->srv; the options shared with other commands, the
 * keys and the derived limits here. */
static int server_options(const cli_args *a, srv_options *o, key_list *kl) {
    *o = a->srv;
    o->model_path = a->model;
    o->model_opts = gm_cli_model_options();
    o->threads = a->threads;
    o->n_ctx = a->n_ctx;
    o->kv_mem = a->kv_mem;
    o->kv_type = a->kv_type;
    o->backend = a->backend, o->device = a->device + 1, o->gpu_validate = a->gpu_validate;
    o->lookup = a->lookup;
    o->draft_model_path = a->draft_model;
    o->mtp_path = a->mtp_path;
    o->draft_max = a->draft_max;
    o->mmproj_path = a->mmproj;
    o->prefix_scope_key = !strcmp(a->prefix_scope, "key");
    o->image_max_pixels = a->image_max_pixels;
    o->max_body = (size_t)a->max_body; /* 0: srv_start derives it from the context */
    if (o->max_prompt < 0) o->max_prompt = o->n_ctx - 1;
    if (o->max_tokens < 0) o->max_tokens = o->n_ctx;
    const int rc = gather_keys(a, o, kl);
    return rc == CLI_GO ? check_combinations(o, a->eagle3_path != NULL) : rc;
}

int cmd_serve(int argc, char **argv) {
    cli_args a;
    int rc = cli_parse(CLI_SERVE, argc, argv, &a);
    if (rc != CLI_GO) return rc;
    srv_options o;
    key_list kl = {0};
    rc = server_options(&a, &o, &kl);
    if (rc == CLI_GO) rc = srv_run(&o);
    free_keys(&kl);
    cli_args_free(&a);
    return rc;
}
