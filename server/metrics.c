/* server/metrics.c — what /metrics reports, in Prometheus text format (version 0.0.4). Updated by the
 * scheduler and the connection threads, under one lock. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/server.h"

enum { MAX_SERIES = 64, N_TTFT = 11, N_ITL = 11 };

static const double TTFT_BOUNDS[N_TTFT] = {0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30};
static const double ITL_BOUNDS[N_ITL] = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5};

typedef struct histogram {
    const double *bounds;
    int n;
    uint64_t count[16]; /* per bucket, not cumulative; the last is +Inf */
    uint64_t total;
    double sum;
} histogram;

struct srv_metrics {
    pthread_mutex_t mu;
    struct {
        char endpoint[32];
        int status;
        uint64_t n;
    } req[MAX_SERIES];
    int n_req;
    uint64_t prompt_tokens, cached_tokens, generated_tokens;
    uint64_t prefix_lookups, prefix_hits; /* finished requests; those that reused at least one cached token */
    int queued, active;
    int64_t preemptions;
    gm_spec_stats spec;
    gm_kv_stats kv;
    bool has_images;         /* the server has a vision encoder */
    srv_media_stats images;
    histogram ttft, itl;
};

srv_metrics *metrics_new(void) {
    srv_metrics *m = calloc(1, sizeof *m);
    if (!m) return NULL;
    pthread_mutex_init(&m->mu, NULL);
    m->ttft = (histogram){.bounds = TTFT_BOUNDS, .n = N_TTFT};
    m->itl = (histogram){.bounds = ITL_BOUNDS, .n = N_ITL};
    return m;
}

void metrics_free(srv_metrics *m) {
    if (!m) return;
    pthread_mutex_destroy(&m->mu);
    free(m);
}

void metrics_request(srv_metrics *m, const char *endpoint, int status) {
    pthread_mutex_lock(&m->mu);
    int i = 0;
    while (i < m->n_req && (m->req[i].status != status || strcmp(m->req[i].endpoint, endpoint))) i++;
    if (i == m->n_req && m->n_req < MAX_SERIES) {
        snprintf(m->req[i].endpoint, sizeof m->req[i].endpoint, "%s", endpoint);
        m->req[i].status = status;
        m->n_req++;
    }
    if (i < m->n_req) m->req[i].n++;
    pthread_mutex_unlock(&m->mu);
}

void metrics_tokens(srv_metrics *m, int prompt, int cached, int generated, bool looked_up) {
    pthread_mutex_lock(&m->mu);
    m->prompt_tokens += (uint64_t)prompt;
    m->cached_tokens += (uint64_t)cached;
    m->generated_tokens += (uint64_t)generated;
    m->prefix_lookups += looked_up;
    m->prefix_hits += cached > 0;
    pthread_mutex_unlock(&m->mu);
}

static void observe(histogram *h, double v) {
    int b = 0;
    while (b < h->n && v > h->bounds[b]) b++;
    h->count[b]++;
    h->total++;
    h->sum += v;
}

void metrics_ttft(srv_metrics *m, double s) {
    pthread_mutex_lock(&m->mu);
    observe(&m->ttft, s);
    pthread_mutex_unlock(&m->mu);
}

void metrics_itl(srv_metrics *m, double s) {
    pthread_mutex_lock(&m->mu);
    observe(&m->itl, s);
    pthread_mutex_unlock(&m->mu);
}

void metrics_speculative(srv_metrics *m, const gm_spec_stats *st) {
    pthread_mutex_lock(&m->mu);
    m->spec.passes += st->passes;
    m->spec.verify_passes += st->verify_passes;
    m->spec.drafted += st->drafted;
    m->spec.accepted += st->accepted;
    m->spec.tokens += st->tokens;
    pthread_mutex_unlock(&m->mu);
}

void metrics_state(srv_metrics *m, int queued, int active, int64_t preemptions, const gm_kv_stats *kv) {
    pthread_mutex_lock(&m->mu);
    m->preemptions = preemptions;
    m->queued = queued;
    m->active = active;
    m->kv = *kv;
    pthread_mutex_unlock(&m->mu);
}

typedef struct text {
    char *p;
    size_t n, cap;
    bool oom;
} text;

static void add(text *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void add(text *t, const char *fmt, ...) {
    if (t->oom) return;
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int k = vsnprintf(t->p ? t->p + t->n : NULL, t->p ? t->cap - t->n : 0, fmt, ap);
        va_end(ap);
        if (k < 0) { t->oom = true; return; }
        if (t->p && t->n + (size_t)k < t->cap) {
            t->n += (size_t)k;
            return;
        }
        size_t cap = (t->cap + (size_t)k + 1) * 2;
        char *p = realloc(t->p, cap);
        if (!p) { t->oom = true; return; }
        t->p = p;
        t->cap = cap;
    }
}

static void put_histogram(text *t, const char *name, const char *help, const histogram *h) {
    add(t, "# HELP %s %s\n# TYPE %s histogram\n", name, help, name);
    uint64_t cum = 0;
    for (int b = 0; b < h->n; b++) {
        cum += h->count[b];
        add(t, "%s_bucket{le=\"%g\"} %llu\n", name, h->bounds[b], (unsigned long long)cum);
    }
    add(t, "%s_bucket{le=\"+Inf\"} %llu\n%s_sum %.6f\n%s_count %llu\n", name, (unsigned long long)h->total, name,
        h->sum, name, (unsigned long long)h->total);
}

static void put_value(text *t, const char *name, const char *type, const char *help, double v) {
    add(t, "# HELP %s %s\n# TYPE %s %s\n%s %.17g\n", name, help, name, type, name, v);
}

void metrics_images(srv_metrics *m, const srv_media_stats *st) {
    pthread_mutex_lock(&m->mu);
    m->has_images = true;
    m->images = *st;
    pthread_mutex_unlock(&m->mu);
}

/* A Prometheus label value: backslash, quote and newline escaped. */
static void put_label(char *out, size_t cap, const char *v) {
    size_t k = 0;
    for (const char *p = v; *p && k + 3 < cap; p++) {
        if (*p == '\\' || *p == '"') out[k++] = '\\', out[k++] = *p;
        else if (*p == '\n') out[k++] = '\\', out[k++] = 'n';
        else out[k++] = *p;
    }
    out[k] = 0;
}

char *metrics_render(srv_metrics *m, const char *model, const char *replica, const char *state) {
    text t = {0};
    pthread_mutex_lock(&m->mu);
    add(&t, "# HELP gemma_requests_total HTTP requests by endpoint and status.\n# TYPE gemma_requests_total counter\n");
    for (int i = 0; i < m->n_req; i++)
        add(&t, "gemma_requests_total{endpoint=\"%s\",status=\"%d\"} %llu\n", m->req[i].endpoint, m->req[i].status,
            (unsigned long long)m->req[i].n);
    put_value(&t, "gemma_prompt_tokens_total", "counter", "Prompt tokens of finished completions.", (double)m->prompt_tokens);
    put_value(&t, "gemma_prompt_tokens_cached_total", "counter",
              "Prompt tokens served from the prefix cache instead of computed.", (double)m->cached_tokens);
    put_value(&t, "gemma_generation_tokens_total", "counter", "Tokens generated.", (double)m->generated_tokens);
    put_value(&t, "gemma_requests_queued", "gauge", "Requests waiting for a slot.", m->queued);
    put_value(&t, "gemma_sequences_active", "gauge", "Sequences being computed or generating.", m->active);
    put_value(&t, "gemma_kv_blocks_used", "gauge", "KV blocks held by live sequences.", (double)m->kv.blocks_live);
    put_value(&t, "gemma_kv_blocks_cached", "gauge", "KV blocks held only by the prefix cache (evictable).",
              (double)m->kv.blocks_cached);
    put_value(&t, "gemma_kv_blocks_free", "gauge", "KV blocks that still fit the budget.", (double)m->kv.blocks_free);
    put_value(&t, "gemma_kv_bytes_used", "gauge", "Bytes of KV storage in use (live and cached).", (double)m->kv.bytes_used);
    put_value(&t, "gemma_kv_bytes_budget", "gauge", "The KV budget (--kv-mem).", (double)m->kv.bytes_budget);
    put_value(&t, "gemma_kv_evictions_total", "counter", "Cached KV blocks evicted.", (double)m->kv.evictions);
    put_value(&t, "gemma_prefix_cache_lookups_total", "counter",
              "Finished completions whose prompt was looked up in the prefix cache.", (double)m->prefix_lookups);
    put_value(&t, "gemma_prefix_cache_hits_total", "counter",
              "Finished completions that reused at least one cached prompt token (see also "
              "gemma_prompt_tokens_cached_total, gemma_kv_evictions_total).", (double)m->prefix_hits);
    put_value(&t, "gemma_preemptions_total", "counter",
              "Requests sent back to the queue mid-prompt because the KV budget was full.", (double)m->preemptions);
    put_value(&t, "gemma_spec_passes_total", "counter", "Speculative steps' target passes (finished requests).",
              (double)m->spec.passes);
    put_value(&t, "gemma_spec_drafted_total", "counter", "Tokens proposed by the drafter.", (double)m->spec.drafted);
    put_value(&t, "gemma_spec_accepted_total", "counter", "Proposed tokens the target accepted.", (double)m->spec.accepted);
    put_value(&t, "gemma_spec_tokens_total", "counter", "Tokens made by speculative steps (tokens / passes: per pass).",
              (double)m->spec.tokens);
    if (m->has_images) {
        put_value(&t, "gemma_images_encoded_total", "counter", "Images run through the vision encoder.",
                  (double)m->images.encoded);
        put_value(&t, "gemma_image_cache_hits_total", "counter", "Images whose rows came from the encoder cache.",
                  (double)m->images.cache_hits);
        put_value(&t, "gemma_image_encode_seconds_total", "counter", "Time spent encoding images.",
                  m->images.encode_seconds);
    }
    put_histogram(&t, "gemma_time_to_first_token_seconds", "From request to its first token.", &m->ttft);
    put_histogram(&t, "gemma_inter_token_latency_seconds", "Between two tokens of one choice.", &m->itl);
    pthread_mutex_unlock(&m->mu);
    char label[512];
    put_label(label, sizeof label, model);
    add(&t, "# HELP gemma_model_info The model served.\n# TYPE gemma_model_info gauge\ngemma_model_info{model=\"%s\"} 1\n",
        label);
    put_label(label, sizeof label, replica);
    add(&t, "# HELP gemma_replica_info This replica's id (--replica-id; also X-Gemma-Replica, system_fingerprint).\n"
            "# TYPE gemma_replica_info gauge\ngemma_replica_info{replica=\"%s\"} 1\n", label);
    static const char *states[] = {"loading", "ready", "draining", "stopping"};
    add(&t, "# HELP gemma_server_state What /health says: 1 for the current state.\n# TYPE gemma_server_state gauge\n");
    for (size_t i = 0; i < sizeof states / sizeof *states; i++)
        add(&t, "gemma_server_state{state=\"%s\"} %d\n", states[i], !strcmp(states[i], state));
    if (t.oom) {
        free(t.p);
        return NULL;
    }
    return t.p;
}
