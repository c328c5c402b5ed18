/* server/session.h — what a request asks to generate and how each of its choices is getting on, in no
 * protocol's terms. An endpoint (openai.c) fills a gen_request from its wire format; the scheduler
 * feeds each choice's tokens to a gen_session, which turns them into text (incremental
 * detokenization), cuts at stop strings (holding back what may still become one), collects
 * log-probabilities and says why the choice ended. The endpoint renders the sessions back into its
 * wire format. Nothing here knows HTTP, JSON or the engine. */
#ifndef GM_SERVER_SESSION_H
#define GM_SERVER_SESSION_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gemma.h"
#include "gemma_chat.h"
#include "gemma_grammar.h"
#include "gemma_vision.h"

enum { SRV_MAX_N = 8, SRV_MAX_STOP = 16, SRV_MAX_STOP_LEN = 256, SRV_MAX_TOP_LOGPROBS = 20, SRV_MAX_EMBED_INPUTS = 2048 };

/* What a request's tools may do: not offered, offered, or a call required (any, or the named one). */
typedef enum { TOOLS_NONE = 0, TOOLS_AUTO, TOOLS_REQUIRED, TOOLS_NAMED } tool_mode;

/* A request, fixed before it is submitted. */
typedef struct gen_request {
    int32_t *prompt;        /* malloc'd: the prompts of every group, one after the other */
    int n_prompt;
    int n_groups;           /* prompts (a /v1/completions batch); 0 or 1: one */
    int group_end[SRV_MAX_N]; /* group g's prompt ends at prompt[group_end[g]] (n_groups > 1) */
    int n;                  /* choices: n / groups of them from each group's computed prompt (choice i of group i / (n / groups)) */
    gm_sampling smp;        /* choice i samples with seed + i; smp.logit_bias points at bias */
    gm_logit_bias *bias;    /* malloc'd: logit_bias */
    gm_grammar *grammar;    /* owned: response_format / json_schema / grammar / a tool-call grammar (NULL: unconstrained) */
    bool grammar_markers;   /* the grammar writes chat-format markers (a tool-call grammar): matched with them as text */
    gm_tool *tools;         /* malloc'd with their strings: the declared tools */
    int n_tools;
    tool_mode tool_mode;    /* NONE: replies are not read for calls (n_tools may still be > 0) */
    bool parallel_tool_calls;
    int max_tokens;         /* 0: up to the context */
    char *stop[SRV_MAX_STOP]; /* malloc'd, non-empty */
    int n_stop;
    bool logprobs;
    int top_logprobs;
    bool ignore_eos;        /* generate past the end-of-generation tokens (benchmarks) */
    bool speculative;       /* propose and verify several tokens per step (--lookup / --draft-model) */
    bool stream;            /* the client reads the choices while they grow */
    uint64_t prefix_scope;  /* the engine's prefix scope of its sequences (0: shared) */
    /* images (chat): image i's rows take positions [image_pos[i], + images[i].n_rows) of the prompt, which
     * holds their placeholder token there */
    gm_vision_rows *images; /* malloc'd with their rows */
    int *image_pos;
    int n_images;
    int32_t image_placeholder;
} gen_request;

void gen_request_init(gen_request *rq);
/* The prompt groups (>= 1), and where group g's prompt is. */
int gen_request_groups(const gen_request *rq);
void gen_request_group(const gen_request *rq, int g, const int32_t **prompt, int *n);
void gen_request_clear(gen_request *rq); /* frees the prompt and the stop strings */

/* Why a choice ended. */
typedef enum {
    GEN_RUNNING = 0,
    GEN_END_OF_TURN,        /* the model ended its text (an end-of-generation token) */
    GEN_STOP_STRING,        /* a stop string came: it and what follows are cut */
    GEN_MAX_TOKENS,         /* the request's max_tokens */
    GEN_CONTEXT_FULL,       /* the sequence reached the end of the context */
} gen_finish;

/* The choice ran out of room rather than ending its text. */
static inline bool gen_finish_is_length(gen_finish f) { return f == GEN_MAX_TOKENS || f == GEN_CONTEXT_FULL; }

/* One generated token's log-probabilities (log-softmax of the raw logits). */
typedef struct gen_logprob {
    int32_t id;
    float lp;
    int n_top;
    int32_t top_id[SRV_MAX_TOP_LOGPROBS];
    float top_lp[SRV_MAX_TOP_LOGPROBS];
    size_t text_end;        /* bytes of the choice's text once this token is decoded */
} gen_logprob;

/* One choice's progress. */
typedef struct gen_session {
    const gen_request *rq;
    const gm_tokenizer *tok;
    int n_vocab, n_ctx;
    gm_detok_stream *ds;
    char *text;             /* decoded so far (cut at the stop string once finished); NUL-terminated */
    size_t len, cap;
    size_t visible;         /* bytes no stop string can still claim */
    int n_gen;              /* tokens taken */
    gen_finish finish;
    const char *stop_matched; /* GEN_STOP_STRING: the stop string that ended it (one of rq->stop) */
    gen_logprob *lp;        /* one entry per token taken, when the request wants them */
    int n_lp, cap_lp;
    gm_tool_parser *tp;     /* the request declares tools: replies are read for calls (text holds the rest) */
    char (*call_id)[40];    /* an id for each call read ("call_" + 16 hex digits) */
    int n_call_ids;
} gen_session;

/* The tool calls read from the choice so far, each with its id in call_id (0 without tools). */
int gen_session_n_calls(const gen_session *g);

/* Ready to take the tokens of a choice of rq (which must outlive it). */
gm_status gen_session_start(gen_session *g, const gen_request *rq, const gm_tokenizer *tok, int n_vocab, int n_ctx,
                            gm_error *err);
/* A new token: its text, the stop strings, the limits. logits: the distribution it was drawn from when
 * the request wants log-probabilities (NULL otherwise); length: the choice's history up to and
 * including this token. Call only while g->finish is GEN_RUNNING. */
void gen_session_take(gen_session *g, int32_t token, const float *logits, int length);
/* The detokenizer is no longer needed (the text stays). */
void gen_session_close(gen_session *g);
void gen_session_free(gen_session *g);
/* How many log-probability entries belong to the first `upto` bytes of text: a token whose text starts
 * at or past upto (a stop string's, the end of turn) is not shown; a choice cut by its length shows all. */
int gen_session_lp_shown(const gen_session *g, size_t upto);

#endif
