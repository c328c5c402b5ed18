/* tools/cmd_serve.c — `gemma serve`: options, then the server (server/). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/server.h"
#include "tools/cli_util.h"
#include "tools/commands.h"

static void usage(FILE *out) {
    fprintf(out,
            "usage: gemma serve [-m MODEL] [--host ADDR] [--port N] [options]\n"
            "An OpenAI-compatible HTTP server with continuous batching and a prefix cache; a chat page at /.\n"
            "Endpoints: POST /v1/chat/completions, POST /v1/completions (stream or not), GET /v1/models,\n"
            "GET /health, GET /metrics (Prometheus), POST /tokenize, POST /detokenize, GET / (chat page).\n"
            "With an embedding model (EmbeddingGemma): POST /v1/embeddings instead of the completions.\n"
            "\n"
            "  -m, --model PATH      model file or folder (default %s)\n"
            "  --alias NAME          the model id reported and echoed (default: the file name)\n"
            "  --host ADDR           address to listen on (default 127.0.0.1: this machine only;\n"
            "                        0.0.0.0 or :: opens it to the network — set --api-key then)\n"
            "  --port N              TCP port (default 8080; 0 = any free port, printed at start)\n"
            "  -t, --threads N       compute threads (default: physical cores)\n"
            "  -c, --ctx N           context per sequence, prompt + output (default 4096)\n"
            "  -np, --parallel N     sequences generating at once; a request with n = k takes k (default 4)\n"
            "  --queue N             requests waiting for a free slot; beyond that 429 (default 64)\n"
            "  --chunk N             prompt tokens computed per step beside the decode rows: smaller keeps\n"
            "                        streams smooth while a long prompt arrives (default 256)\n"
            "  --kv-mem MIB          KV cache budget, live sequences and prefix cache together\n"
            "                        (default: --parallel x --ctx positions of every layer)\n"
            "  --kv-type f32|f16     KV storage (default f32)\n"
            "  --no-prefix-cache     recompute every prompt (no reuse across requests)\n"
            "  --api-key KEY         require 'Authorization: Bearer KEY' (also $GEMMA_API_KEY); repeat it\n"
            "                        for several tenants' keys; /health and the page stay open\n"
            "  --api-key-file PATH   more keys, one per line\n"
            "  --prefix-cache-scope global|key\n"
            "                        key: a request only reuses prompt blocks computed for the same API\n"
            "                        key (tenants cannot see each other's prompts through cached_tokens\n"
            "                        or timing); default global\n"
            "  --allowed-hosts LIST  Host names accepted besides loopback ones (comma-separated; * for any).\n"
            "                        On loopback without a key only loopback names are served (403\n"
            "                        otherwise: a web page cannot reach it by rebinding its DNS name)\n"
            "  --max-conns N         open connections; requests beyond get 503 (default 512)\n"
            "  --max-conns-per-ip N  connections from one address, 0 = no limit (default 128; behind a\n"
            "                        proxy every client has the proxy's address: raise it or use 0)\n"
            "  --request-timeout S   seconds to receive a whole request, headers and body (default 10)\n"
            "                        (a kept-alive connection has as long for its next request)\n"
            "  --idle-timeout S      seconds a client may leave a response unread before it is dropped\n"
            "                        (default 60)\n"
            "  --cors ORIGIN         let pages from ORIGIN (or *) call the API from a browser (CORS);\n"
            "                        default: none, only the page served here\n"
            "  --max-body BYTES      largest request body (default: what the longest prompt the context\n"
            "                        holds can take as JSON, at least 1 MiB; larger: 413)\n"
            "  --max-prompt N        most prompt tokens a request may have (default: the context - 1)\n"
            "  --max-tokens N        largest max_tokens a request may ask (default: the context)\n"
            "  --quiet               no request log (nor libmicrohttpd's) on stderr\n"
            "  --replica-id ID       this server's name behind a load balancer: in /health, /metrics\n"
            "                        (gemma_replica_info), the X-Gemma-Replica header and\n"
            "                        system_fingerprint (default: host name:port)\n"
            "  --drain-timeout S     on SIGTERM, seconds running requests may take to finish while\n"
            "                        /health and new requests get 503 (default 30; 0: stop at once)\n"
            "  --lookup              speculative decoding by prompt lookup (n-grams of the history propose\n"
            "                        tokens; one pass verifies them; greedy output unchanged)\n"
            "  --draft-model PATH    speculative decoding with a smaller model of the same vocabulary\n"
            "  --draft-max K         most tokens proposed per pass, 1..%d (default 8; adapts below it)\n"
            "  --mmproj PATH         the model's vision encoder (a llama.cpp mmproj GGUF): chat messages may\n"
            "                        hold image_url parts (data:image/...;base64 URIs; remote URLs are refused)\n"
            "  --media-path DIR      also read file:// image URLs, only from files under DIR\n"
            "  --max-images N        images per request (default 8)\n"
            "  --image-max-pixels N  largest decoded image, in pixels (default 40000000)\n"
            "  --image-cache-mb N    recent images' encoder rows kept for repeats (default 256)\n"
            "                        A request may say \"speculative\": false (or true); requests with\n"
            "                        logprobs do not speculate.\n"
            "\n"
            "Request fields: messages | prompt, max_tokens, max_completion_tokens, temperature (default 1),\n"
            "top_p, top_k, min_p, presence_penalty, frequency_penalty, repeat_penalty, repeat_last_n, seed,\n"
            "stop (string or list), n (1..8), logprobs, top_logprobs, stream, stream_options.include_usage,\n"
            "ignore_eos (llama-server's: generate past the end of turn; for benchmarks).\n"
            "Chat message contents are text: control-token spellings in them cannot open or close a turn;\n"
            "/v1/completions prompts are raw (control-token texts are parsed, to write one's own template).\n"
            "GET /health: 200 {\"status\":\"ok\"} when ready; 503 with \"loading\" (the model opens while the\n"
            "port already answers), \"draining\" or \"stopping\".\n"
            "SIGTERM: drain (see --drain-timeout), then stop; SIGINT, or a second signal: stop now, ending\n"
            "open streams with an error event. Exit 0 either way.\n",
            gm_cli_default_model(), GM_SPEC_MAX_K);
}

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

/* -1: go on; otherwise the exit status */
static int parse_args(int argc, char **argv, srv_options *o, key_list *kl) {
    int max_body = 0;
    o->max_prompt = o->max_tokens = -1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        bool ok = true;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(a, "--no-prefix-cache")) {
            o->no_prefix_cache = true;
            continue;
        } else if (!strcmp(a, "--quiet")) {
            o->quiet = true;
            continue;
        } else if (!strcmp(a, "--lookup")) {
            o->lookup = true;
            continue;
        } else if (!v) {
            fprintf(stderr, "gemma serve: option %s needs a value (see --help)\n", a);
            return 2;
        } else if (!strcmp(a, "-m") || !strcmp(a, "--model")) {
            o->model_path = v;
        } else if (!strcmp(a, "--alias")) {
            ok = *v != 0;
            o->model_name = v;
        } else if (!strcmp(a, "--host")) {
            ok = *v != 0;
            o->host = v;
        } else if (!strcmp(a, "--port")) {
            ok = cli_parse_int(v, 0, 65535, &o->port);
        } else if (!strcmp(a, "-t") || !strcmp(a, "--threads")) {
            ok = cli_parse_int(v, 1, 1024, &o->threads);
        } else if (!strcmp(a, "-c") || !strcmp(a, "--ctx")) {
            ok = cli_parse_int(v, 16, 1 << 20, &o->n_ctx);
        } else if (!strcmp(a, "-np") || !strcmp(a, "--parallel")) {
            ok = cli_parse_int(v, 1, 64, &o->parallel);
        } else if (!strcmp(a, "--queue")) {
            ok = cli_parse_int(v, 0, 4096, &o->queue);
        } else if (!strcmp(a, "--chunk")) {
            ok = cli_parse_int(v, 1, 4096, &o->chunk);
        } else if (!strcmp(a, "--kv-mem")) {
            ok = cli_parse_mib(v, &o->kv_mem);
        } else if (!strcmp(a, "--kv-type")) {
            ok = cli_parse_kv_type(v, &o->kv_type);
        } else if (!strcmp(a, "--api-key")) {
            ok = *v != 0 && add_key(kl, o, v, false);
        } else if (!strcmp(a, "--api-key-file")) {
            ok = read_key_file(kl, o, v);
        } else if (!strcmp(a, "--prefix-cache-scope")) {
            ok = !strcmp(v, "global") || !strcmp(v, "key");
            o->prefix_scope_key = !strcmp(v, "key");
        } else if (!strcmp(a, "--allowed-hosts")) {
            ok = *v != 0;
            o->allowed_hosts = v;
        } else if (!strcmp(a, "--max-conns")) {
            ok = cli_parse_int(v, 1, 1 << 16, &o->max_conns);
        } else if (!strcmp(a, "--max-conns-per-ip")) {
            ok = cli_parse_int(v, 0, 1 << 16, &o->max_conns_per_ip);
        } else if (!strcmp(a, "--request-timeout")) {
            ok = cli_parse_int(v, 0, 3600, &o->request_timeout);
        } else if (!strcmp(a, "--idle-timeout")) {
            ok = cli_parse_int(v, 1, 3600, &o->idle_timeout);
        } else if (!strcmp(a, "--draft-model")) {
            o->draft_model_path = v;
        } else if (!strcmp(a, "--draft-max")) {
            ok = cli_parse_int(v, 1, GM_SPEC_MAX_K, &o->draft_max);
        } else if (!strcmp(a, "--cors")) {
            ok = *v != 0;
            o->cors = v;
        } else if (!strcmp(a, "--mmproj")) {
            o->mmproj_path = v;
        } else if (!strcmp(a, "--media-path")) {
            o->media_path = v;
        } else if (!strcmp(a, "--max-images")) {
            ok = cli_parse_int(v, 1, 64, &o->max_images);
        } else if (!strcmp(a, "--image-max-pixels")) {
            int px = 0;
            ok = cli_parse_int(v, 1, 1 << 30, &px);
            o->image_max_pixels = px;
        } else if (!strcmp(a, "--image-cache-mb")) {
            int mb = 0;
            ok = cli_parse_int(v, 0, 1 << 20, &mb);
            o->image_cache_bytes = (size_t)mb << 20;
        } else if (!strcmp(a, "--replica-id")) {
            ok = *v != 0 && strlen(v) < 100;
            o->replica_id = v;
        } else if (!strcmp(a, "--drain-timeout")) {
            ok = cli_parse_int(v, 0, 86400, &o->drain_timeout);
        } else if (!strcmp(a, "--max-body")) {
            ok = cli_parse_int(v, 1024, 1 << 30, &max_body);
        } else if (!strcmp(a, "--max-prompt")) {
            ok = cli_parse_int(v, 1, 1 << 20, &o->max_prompt);
        } else if (!strcmp(a, "--max-tokens")) {
            ok = cli_parse_int(v, 1, 1 << 20, &o->max_tokens);
        } else {
            fprintf(stderr, "gemma serve: unknown option %s (see --help)\n", a);
            return 2;
        }
        if (!ok) {
            fprintf(stderr, "gemma serve: invalid value '%s' for %s\n", v, a);
            return 2;
        }
        i++;
    }
    if (o->lookup && o->draft_model_path) {
        fprintf(stderr, "gemma serve: --lookup and --draft-model are two ways to propose tokens: give one\n");
        return 2;
    }
    if (o->draft_max && !o->lookup && !o->draft_model_path) {
        fprintf(stderr, "gemma serve: --draft-max needs --lookup or --draft-model\n");
        return 2;
    }
    if (o->media_path && !o->mmproj_path) {
        fprintf(stderr, "gemma serve: --media-path needs --mmproj (images need the model's vision encoder)\n");
        return 2;
    }
    if (o->prefix_scope_key && !o->n_api_keys) {
        fprintf(stderr, "gemma serve: --prefix-cache-scope key needs API keys (--api-key, --api-key-file)\n");
        return 2;
    }
    o->max_body = (size_t)max_body; /* 0: srv_start derives it from the context */
    if (o->max_prompt < 0) o->max_prompt = o->n_ctx - 1;
    if (o->max_tokens < 0) o->max_tokens = o->n_ctx;
    return -1;
}

int cmd_serve(int argc, char **argv) {
    srv_options o = {.model_path = gm_cli_default_model(), .host = "127.0.0.1", .port = 8080, .n_ctx = 4096,
                     .parallel = 4, .queue = 64, .chunk = 256, .max_conns = 512, .max_conns_per_ip = 128,
                     .request_timeout = 10, .idle_timeout = 60, .max_images = 8, .drain_timeout = 30,
                     .image_cache_bytes = (size_t)256 << 20};
    const char *key = getenv("GEMMA_API_KEY");
    o.model_opts = gm_cli_model_options();
    key_list kl = {0};
    if (key && *key) add_key(&kl, &o, key, false);
    int rc = parse_args(argc, argv, &o, &kl);
    if (rc < 0) rc = srv_run(&o);
    free_keys(&kl);
    return rc;
}
