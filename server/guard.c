/* server/guard.c — what keeps one client from locking the others out: connection limits, a deadline
 * for receiving a request, the Host check against DNS rebinding, and a bound on requests parsed at once.
 *
 * libmicrohttpd runs a thread per connection and its own timeout is for inactivity only, so a client
 * that trickles a header byte every few seconds would hold a thread forever, and at the daemon's
 * connection limit it stops accepting (new clients hang in the kernel's backlog). So MHD gets a hard
 * limit above ours; we count the connections ourselves (answering 503 above --max-conns) and a reaper
 * thread shuts the socket of every connection that has not delivered its whole request within
 * --request-timeout seconds (from its first byte, or from the end of the previous response on a
 * kept-alive connection). The socket is shut down, not closed: MHD still owns the descriptor, and it
 * reports the connection closed (guard_notify) before it closes it, under the same lock the reaper
 * holds, so the reaper never touches a descriptor number that was reused. */
#include <arpa/inet.h>
#include <ctype.h>
#include <microhttpd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>

#include "server/server.h"

typedef enum { PH_REQUEST, PH_HANDLING } phase;

typedef struct conn {
    int fd;
    phase ph;
    double since;       /* when the request being received began */
    struct conn *prev, *next;
} conn;

struct srv_guard {
    const srv_options *o;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    conn *head;
    int open;               /* connections MHD has accepted and not yet closed */
    bool stop;
    pthread_t reaper;
    bool reaper_started;
    /* parsing / tokenizing requests at once (their memory is a multiple of the body) */
    pthread_mutex_t parse_mu;
    pthread_cond_t parse_cv;
    int parsing, parse_max;
};

static void *reaper_main(void *arg) {
    srv_guard *g = arg;
    pthread_mutex_lock(&g->mu);
    while (!g->stop) {
        const double now = srv_now();
        for (conn *c = g->head; c; c = c->next)
            if (c->ph == PH_REQUEST && c->fd >= 0 && now - c->since > g->o->request_timeout) {
                shutdown(c->fd, SHUT_RDWR); /* MHD's read fails; it closes and reports the connection */
                c->fd = -1;
            }
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        ts.tv_nsec += 200 * 1000 * 1000;
        if (ts.tv_nsec >= 1000000000L) ts.tv_sec++, ts.tv_nsec -= 1000000000L;
        pthread_cond_timedwait(&g->cv, &g->mu, &ts);
    }
    pthread_mutex_unlock(&g->mu);
    return NULL;
}

srv_guard *guard_new(const srv_options *o) {
    srv_guard *g = calloc(1, sizeof *g);
    if (!g) return NULL;
    g->o = o;
    pthread_mutex_init(&g->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&g->cv, &ca);
    pthread_condattr_destroy(&ca);
    pthread_mutex_init(&g->parse_mu, NULL);
    pthread_cond_init(&g->parse_cv, NULL);
    g->parse_max = o->threads > 2 ? o->threads : 2;
    if (o->request_timeout > 0) {
        if (pthread_create(&g->reaper, NULL, reaper_main, g)) {
            guard_free(g);
            return NULL;
        }
        g->reaper_started = true;
    }
    return g;
}

void guard_free(srv_guard *g) {
    if (!g) return;
    pthread_mutex_lock(&g->mu);
    g->stop = true;
    pthread_cond_broadcast(&g->cv);
    pthread_mutex_unlock(&g->mu);
    if (g->reaper_started) pthread_join(g->reaper, NULL);
    while (g->head) { /* only when MHD was stopped without reporting every close */
        conn *c = g->head;
        g->head = c->next;
        free(c);
    }
    pthread_mutex_destroy(&g->mu);
    pthread_cond_destroy(&g->cv);
    pthread_mutex_destroy(&g->parse_mu);
    pthread_cond_destroy(&g->parse_cv);
    free(g);
}

/* MHD_OPTION_NOTIFY_CONNECTION: a connection opened or closed. */
void guard_notify(void *cls, struct MHD_Connection *mc, void **socket_context, enum MHD_ConnectionNotificationCode toe) {
    srv_guard *g = cls;
    if (toe == MHD_CONNECTION_NOTIFY_STARTED) {
        conn *c = calloc(1, sizeof *c);
        const union MHD_ConnectionInfo *ci = MHD_get_connection_info(mc, MHD_CONNECTION_INFO_CONNECTION_FD);
        pthread_mutex_lock(&g->mu);
        g->open++;
        if (c) {
            c->fd = ci ? ci->connect_fd : -1;
            c->since = srv_now();
            c->next = g->head;
            if (g->head) g->head->prev = c;
            g->head = c;
        }
        pthread_mutex_unlock(&g->mu);
        *socket_context = c;
        return;
    }
    conn *c = *socket_context;
    pthread_mutex_lock(&g->mu);
    g->open--;
    if (c) {
        if (c->prev) c->prev->next = c->next;
        else g->head = c->next;
        if (c->next) c->next->prev = c->prev;
    }
    pthread_mutex_unlock(&g->mu);
    free(c);
    *socket_context = NULL;
}

static conn *conn_of(struct MHD_Connection *mc) {
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(mc, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    return ci ? ci->socket_context : NULL;
}

/* The whole request is in: it is being answered, which has no deadline (MHD's inactivity timeout still
 * drops a client that stops reading). */
void guard_request_received(srv_guard *g, struct MHD_Connection *mc) {
    conn *c = conn_of(mc);
    if (!c) return;
    pthread_mutex_lock(&g->mu);
    c->ph = PH_HANDLING;
    pthread_mutex_unlock(&g->mu);
}

/* The response is done: a kept-alive connection has --request-timeout for its next request. */
void guard_request_done(srv_guard *g, struct MHD_Connection *mc) {
    conn *c = conn_of(mc);
    if (!c) return;
    pthread_mutex_lock(&g->mu);
    c->ph = PH_REQUEST;
    c->since = srv_now();
    pthread_mutex_unlock(&g->mu);
}

int guard_open(srv_guard *g) {
    pthread_mutex_lock(&g->mu);
    const int n = g->open;
    pthread_mutex_unlock(&g->mu);
    return n;
}

void guard_parse_enter(srv_guard *g) {
    pthread_mutex_lock(&g->parse_mu);
    while (g->parsing >= g->parse_max) pthread_cond_wait(&g->parse_cv, &g->parse_mu);
    g->parsing++;
    pthread_mutex_unlock(&g->parse_mu);
}

void guard_parse_leave(srv_guard *g) {
    pthread_mutex_lock(&g->parse_mu);
    g->parsing--;
    pthread_cond_signal(&g->parse_cv);
    pthread_mutex_unlock(&g->parse_mu);
}

/* ---------------------------------------------------------------- the Host check */

bool srv_is_loopback_host(const char *h, size_t n) {
    char buf[256];
    if (n == 0 || n >= sizeof buf) return false;
    memcpy(buf, h, n);
    buf[n] = 0;
    if (!strcasecmp(buf, "localhost")) return true;
    if (n > 10 && !strcasecmp(buf + n - 10, ".localhost")) return true; /* RFC 6761: always loopback */
    struct in_addr a4;
    if (inet_pton(AF_INET, buf, &a4) == 1) return (ntohl(a4.s_addr) >> 24) == 127;
    struct in6_addr a6;
    if (inet_pton(AF_INET6, buf, &a6) == 1) return IN6_IS_ADDR_LOOPBACK(&a6);
    return false;
}

/* The host part of a Host header ("name", "name:port", "[v6]", "[v6]:port"); false when malformed. */
static bool host_part(const char *v, const char **h, size_t *n) {
    if (*v == '[') {
        const char *e = strchr(v, ']');
        if (!e || (e[1] && e[1] != ':')) return false;
        *h = v + 1, *n = (size_t)(e - v - 1);
        return true;
    }
    const char *colon = strchr(v, ':');
    *h = v;
    *n = colon ? (size_t)(colon - v) : strlen(v);
    return *n > 0;
}

static bool in_list(const char *list, const char *h, size_t n) {
    for (const char *p = list; p && *p;) {
        const char *e = strchr(p, ',');
        const size_t l = e ? (size_t)(e - p) : strlen(p);
        if ((l == 1 && *p == '*') || (l == n && !strncasecmp(p, h, n))) return true;
        p = e ? e + 1 : NULL;
    }
    return false;
}

/* Whether a request naming this Host may be served. A page on evil.example whose DNS name is rebound to
 * 127.0.0.1 reaches a loopback server with Host: evil.example; checking Host is what stops it. Applied
 * when the server listens on loopback without an API key, or when --allowed-hosts is given. A request
 * without Host (HTTP/1.0) passes: browsers always send one. */
bool guard_host_ok(const srv_options *o, bool loopback_bind, const char *host) {
    const bool check = (loopback_bind && !o->n_api_keys) || o->allowed_hosts;
    if (!check || !host) return true;
    const char *h;
    size_t n;
    if (!host_part(host, &h, &n)) return false;
    return srv_is_loopback_host(h, n) || in_list(o->allowed_hosts, h, n);
}
