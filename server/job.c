/* server/job.c — a request's shared state: made by its connection thread, filled by the scheduler,
 * freed when both have let go (refs). */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "server/server.h"

double srv_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

job *job_new(void) {
    job *j = calloc(1, sizeof *j);
    if (!j) return NULL;
    pthread_mutex_init(&j->mu, NULL);
    pthread_condattr_t ca; /* waits time out on the monotonic clock: a clock step must not stall them */
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&j->cv, &ca);
    pthread_condattr_destroy(&ca);
    j->refs = 1;
    j->conn_fd = -1;
    j->smp = gm_sampling_default();
    return j;
}

static void job_free(job *j) {
    for (int i = 0; i < j->n_stop; i++) free(j->stop[i]);
    for (int i = 0; i < SRV_MAX_N; i++) {
        /* the scheduler frees sequences and detok streams before it lets go */
        free(j->ch[i].text);
        free(j->ch[i].lp);
    }
    free(j->prompt);
    free(j->out);
    pthread_mutex_destroy(&j->mu);
    pthread_cond_destroy(&j->cv);
    free(j);
}

void job_release(job *j) {
    if (!j) return;
    pthread_mutex_lock(&j->mu);
    const int left = --j->refs;
    pthread_mutex_unlock(&j->mu);
    if (left == 0) job_free(j);
}

/* Call with j->mu held, or before the job is shared. */
void job_fail(job *j, int http, const char *type, const char *code, const char *fmt, ...) {
    j->err_http = http;
    snprintf(j->err_type, sizeof j->err_type, "%s", type);
    snprintf(j->err_code, sizeof j->err_code, "%s", code ? code : "");
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(j->err_msg, sizeof j->err_msg, fmt, ap);
    va_end(ap);
}

bool job_out(job *j, const char *s, size_t n) {
    if (j->out_len + n > j->out_cap) {
        size_t cap = (j->out_len + n) * 2 + 256;
        char *p = realloc(j->out, cap);
        if (!p) return false;
        j->out = p;
        j->out_cap = cap;
    }
    memcpy(j->out + j->out_len, s, n);
    j->out_len += n;
    return true;
}
