/* tools/cmd_run.c — `gemma run` (one prompt, streamed continuation) and `gemma chat` (interactive
 * multi-turn chat over stdin, the KV cache reused across turns). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gemma.h"
#include "gemma_chat.h"
#include "gemma_grammar.h"
#include "gemma_vision.h"
#include "gemma_generator.h"
#include "core/error.h"
#include "tools/cli_media.h"
#include "tools/cli_opts.h"
#include "tools/cli_util.h"
#include "tools/commands.h"

/* ---------------------------------------------------------------- options */

/* The options' values are cli_args (tools/cli_opts.c); these are the combinations that do not go together. */
typedef cli_args run_args;

/* The first rule a breaks, or NULL. */
static const char *bad_combination(const run_args *a) {
    const int n_images = a->images.n;
    if (a->n_ctx == 1) /* 0 = the model's; 1 holds no prompt and no generated token */
        return "-c 1 leaves no room for a prompt and a generated token; use 0 (the model's context) or at least 2";
    if (!!a->grammar_file + !!a->schema_file + a->json > 1)
        return "--grammar-file, --json-schema and --json are three constraints: give one";
    const bool drafter = a->lookup || a->draft_model || a->mtp_path || a->eagle3_path;
    if (!!a->lookup + !!a->draft_model + !!a->mtp_path + !!a->eagle3_path > 1)
        return "--lookup, --draft-model, --mtp and --eagle3 are ways to propose tokens: give one";
    if (a->naive && drafter)
        return "--naive recomputes every token; it does not combine with speculation";
    if (n_images && !a->mmproj) return "--image needs the model's vision encoder: --mmproj PATH";
    if (n_images && (a->naive || a->truncate || a->no_bos))
        return "--image does not combine with --naive, --truncate or --no-bos";
    if (a->draft_max && !drafter) return "--draft-max needs --lookup, --draft-model, --mtp or --eagle3";
    return NULL;
}

/* cli_parse, then the checks only run and chat make. Returns CLI_GO, or the exit status (a freed). */
static int parse_args(int argc, char **argv, bool chat, run_args *a) {
    const char *cmd = chat ? "chat" : "run";
    int rc = cli_parse(chat ? CLI_CHAT : CLI_RUN, argc, argv, a);
    if (rc != CLI_GO) return rc;
    const char *why = bad_combination(a);
    gm_error err = {0};
    if (!why && gm_sampling_validate(&a->s, &err) != GM_OK) why = err.msg;
    if (why) {
        fprintf(stderr, "gemma %s: %s\n", cmd, why);
        cli_args_free(a);
        return 2;
    }
    if (a->images.n) a->chat = true; /* an image is part of a user turn */
    return CLI_GO;
}

/* ---------------------------------------------------------------- shared set-up */

typedef struct session {
    gm_threadpool *pool;   /* the CPU backend's: shared by the generator, the draft engine and the encoder */
    gm_model *m, *dm;      /* dm, de: the draft model and its engine (--draft-model) */
    gm_engine *de;
    gm_model *am;          /* am, mtp: the assistant and its drafter over the generator's engine (--mtp) */
    gm_mtp *mtp;
    gm_model *hm;          /* hm, e3: the EAGLE-3 head and its drafter over the generator's engine (--eagle3) */
    gm_eagle3 *e3;
    gm_generator *g;
    const gm_tokenizer *tok;
    double load_s;
    gm_gvocab *gv;         /* --grammar-file / --json-schema / --json */
    gm_grammar *gr;
    gm_grammar_ctx *gc;
    gm_matcher *gm;
    cli_media media;       /* --mmproj */
} session;

static void close_session(session *s);

/* --lookup / --draft-model: the generator's speculative decoding; the draft model gets its own engine
 * with the same threads and context (capped at its own). */
static gm_status open_speculation(const run_args *a, session *s, gm_error *err) {
    if (!a->lookup && !a->draft_model && !a->mtp_path && !a->eagle3_path) return GM_OK;
    gm_spec_options so = {.kind = a->lookup ? GM_SPEC_LOOKUP : a->mtp_path ? GM_SPEC_MTP
                                  : a->eagle3_path ? GM_SPEC_EAGLE3 : GM_SPEC_DRAFT,
                          .k_max = a->draft_max};
    if (a->eagle3_path) {
        const gm_model_options mo = gm_cli_model_options();
        gm_status st = gm_model_open(a->eagle3_path, &mo, &s->hm, err);
        if (!st) st = gm_eagle3_new(gm_generator_engine(s->g), s->hm, 0, &s->e3, err);
        if (st) return st;
        so.eagle3 = s->e3;
    }
    if (a->mtp_path) {
        const gm_model_options mo = gm_cli_model_options();
        gm_status st = gm_model_open(a->mtp_path, &mo, &s->am, err);
        if (!st) st = gm_mtp_new(gm_generator_engine(s->g), s->am, NULL, &s->mtp, err);
        if (st) return st;
        so.mtp = s->mtp;
    }
    if (a->draft_model) {
        const gm_model_options mo = gm_cli_model_options();
        gm_status st = gm_model_open(a->draft_model, &mo, &s->dm, err);
        if (st) return st;
        const int dctx = gm_model_config(s->dm)->context_length, n_ctx = gm_generator_n_ctx(s->g);
        const gm_engine_options eo = {.n_threads = a->threads, .n_ctx = n_ctx < dctx ? n_ctx : dctx,
                                      .kv_type = a->kv_type, .pool = s->pool};
        if ((st = gm_engine_new(s->dm, &eo, &s->de, err))) return st;
        so.draft = s->de;
    }
    return gm_generator_set_speculative(s->g, &so, err);
}

/* The constraint of --grammar-file / --json-schema / --json on the generated tokens (grammar/, include/gemma.h). */
static gm_status open_grammar(const run_args *a, session *s, gm_error *err) {
    const char *path = a->grammar_file ? a->grammar_file : a->schema_file;
    if (!path && !a->json) return GM_OK;
    size_t len = 0;
    char *text = path ? cli_read_file(path, &len) : NULL;
    if (path && !text) {
        err->code = GM_ERR_IO;
        snprintf(err->msg, sizeof err->msg, "cannot read %s: %s", path, strerror(errno));
        return GM_ERR_IO;
    }
    static const char any_object[] = "{\"type\": \"object\"}";
    gm_status st = a->grammar_file ? gm_grammar_from_gbnf(text, len, &s->gr, err)
                   : gm_grammar_from_json_schema(text ? text : any_object, text ? len : sizeof any_object - 1, NULL,
                                                 &s->gr, err);
    free(text);
    if (!st) st = gm_gvocab_from_tokenizer(gm_model_tokenizer(s->m), NULL, &s->gv, err);
    if (!st) st = gm_grammar_ctx_new(s->gr, s->gv, &s->gc, err);
    if (!st) st = gm_matcher_new(s->gc, &s->gm, err);
    if (!st) st = gm_seq_set_grammar(gm_generator_seq(s->g), s->gm, err);
    return st;
}

/* The model, its vision encoder (--mmproj) and the generator. */
static gm_status open_generator(const run_args *a, session *s, gm_error *err) {
    const gm_model_options mo = gm_cli_model_options();
    gm_status st = gm_model_open(a->model, &mo, &s->m, err);
    /* one pool for every engine and the encoder (the reference backend runs on the calling thread alone) */
    if (!st && a->backend == GM_BACKEND_CPU) st = gm_threadpool_new(a->threads, &s->pool, err);
    if (!st && a->mmproj) st = cli_media_open(a->mmproj, s->pool, a->threads, s->m, &s->media, err);
    if (st) return st;
    const int image_rows = s->media.v ? gm_vision_n_tokens(s->media.v) : 0;
    const gm_generator_options go = {.n_threads = a->threads, .n_ctx = a->n_ctx, .ignore_stop = a->ignore_eos,
                                     .kv_mem = a->kv_mem, .kv_type = a->kv_type, .backend = a->backend,
                                     .device = a->device + 1, .gpu_validate = a->gpu_validate, .pool = s->pool, .n_batch = image_rows > 512 ? image_rows : 0}; /* an image in one call */
    return gm_generator_new(s->m, &go, &s->g, err);
}

static int open_session(const run_args *a, const char *cmd, session *s) {
    gm_error err = {0};
    memset(s, 0, sizeof *s);
    const double t0 = cli_now_s();
    const char *what = "";
    gm_status st = open_generator(a, s, &err);
    if (!st && (st = open_speculation(a, s, &err)) && a->draft_model && !s->de) what = "draft model: ";
    else if (st && a->mtp_path && !s->am) what = "--mtp: ";
    else if (st && a->eagle3_path && !s->hm) what = "--eagle3: ";
    if (!st) st = open_grammar(a, s, &err);
    if (st) {
        fprintf(stderr, "gemma %s: %s%s\n", cmd, what, err.msg);
        close_session(s);
        return 1;
    }
    s->tok = gm_model_tokenizer(s->m);
    s->load_s = cli_now_s() - t0;
    if (a->backend != GM_BACKEND_CPU) /* what --backend vulkan / auto chose */
        fprintf(stderr, "gemma %s: backend %s\n", cmd, gm_engine_backend_name(gm_generator_engine(s->g)));
    if (a->verbose)
        fprintf(stderr, "gemma %s: %s: %s, %d layers, d=%d, context %d, %d threads\n", cmd, a->model,
                gm_model_config(s->m)->arch, gm_model_config(s->m)->n_layers, gm_model_config(s->m)->d_model,
                gm_generator_n_ctx(s->g), a->threads > 0 ? a->threads : gm_physical_cores());
    return 0;
}

static void close_session(session *s) {
    cli_media_close(&s->media);
    gm_generator_free(s->g); /* frees the speculative state, whose draft sequence lives in s->de */
    gm_matcher_free(s->gm);  /* after the sequence that borrowed it */
    gm_grammar_ctx_free(s->gc);
    gm_grammar_free(s->gr);
    gm_gvocab_free(s->gv);
    gm_engine_free(s->de);
    gm_model_free(s->dm);
    gm_mtp_free(s->mtp); /* after the generator, whose speculation drafted with it */
    gm_model_free(s->am);
    gm_eagle3_free(s->e3);
    gm_model_free(s->hm);
    gm_model_free(s->m);
    gm_threadpool_free(s->pool); /* after everything that ran on it */
}

/* -v: the speculative counters so far. */
static void print_spec_stats(const session *s, const run_args *a, const char *cmd) {
    gm_spec_stats ss;
    gm_spec_get_stats(gm_generator_speculative(s->g), &ss);
    if (!gm_generator_speculative(s->g)) return;
    fprintf(stderr, "gemma %s: speculative (%s): %lld passes (%lld verifying proposals), %lld proposed, %lld accepted "
                    "(%.1f%%), %.2f tokens per pass\n", cmd,
            a->lookup ? "lookup" : a->mtp_path ? "mtp assistant" : a->eagle3_path ? "eagle3 head" : "draft model",
            (long long)ss.passes,
            (long long)ss.verify_passes, (long long)ss.drafted, (long long)ss.accepted,
            ss.drafted ? 100.0 * (double)ss.accepted / (double)ss.drafted : 0.0,
            ss.passes ? (double)ss.tokens / (double)ss.passes : 0.0);
    if (ss.refused) /* under a grammar: lookup tokens the grammar refused, cut before the verify pass */
        fprintf(stderr, "gemma %s: grammar: %lld proposed tokens refused before verification\n", cmd,
                (long long)ss.refused);
    if (a->draft_model || a->mtp_path || a->eagle3_path)
        fprintf(stderr, "gemma %s: %s: %lld forward calls\n", cmd,
                a->mtp_path ? "mtp assistant" : a->eagle3_path ? "eagle3 head" : "draft model", (long long)ss.draft_evals);
}

/* Streams each token's text to stdout as it is generated. */
typedef struct streamer {
    gm_detok_stream *ds;
    int n;
    double t_first;
    char *reply;     /* chat: the reply text (stop tokens excluded) */
    size_t len, cap;
    bool failed;     /* out of memory, a detokenizer error or a write error: exit 1 */
    bool out_failed; /* stdout refused a write: stop generating */
} streamer;

/* A write error on stdout (full disk, closed stdout, the reader gone) marks the stream failed and
 * stops the generation at this token; main() reports it (cli_stdout_finish). */
static void stream_text(streamer *st, const char *text, size_t len) {
    if (!len || st->out_failed) return;
    if (fwrite(text, 1, len, stdout) != len || !cli_stdout_flush()) {
        st->failed = st->out_failed = true;
        return;
    }
    if (st->len + len + 1 > st->cap) {
        size_t cap = (st->len + len + 1) * 2;
        char *r = realloc(st->reply, cap);
        if (!r) { st->failed = true; return; }
        st->reply = r;
        st->cap = cap;
    }
    memcpy(st->reply + st->len, text, len);
    st->len += len;
    st->reply[st->len] = 0;
}

static bool on_token(int32_t tok, void *user) {
    streamer *st = user;
    if (st->n++ == 0) st->t_first = cli_now_s();
    const char *text;
    size_t len;
    gm_error err = {0};
    if (gm_detok_stream_push(st->ds, tok, &text, &len, &err) != GM_OK) {
        fprintf(stderr, "\ngemma: %s\n", err.msg);
        st->failed = true;
        return false;
    }
    stream_text(st, text, len);
    return !st->out_failed;
}

static void stream_flush(streamer *st) {
    const char *text;
    size_t len;
    gm_detok_stream_flush(st->ds, &text, &len);
    stream_text(st, text, len);
}

/* The speculative path: the generator hands out the tokens of each verify pass one by one. */
static gm_status generate_spec(session *s, int n, const run_args *a, streamer *st, double t0, double *t_prefill,
                               double *t_gen, int *n_gen, gm_error *err) {
    int ctx_used;
    gm_generator_tokens(s->g, &ctx_used);
    const int room = gm_generator_n_ctx(s->g) - ctx_used;
    const bool clipped = n > room;
    gm_status rc = gm_generator_generate_cached_with(s->g, clipped ? room : n, &a->s, on_token, st, n_gen, err);
    if (rc) return rc;
    const double t1 = cli_now_s();
    *t_prefill = *n_gen ? st->t_first - t0 : t1 - t0;
    *t_gen = *n_gen ? t1 - st->t_first : 0;
    if (clipped && *n_gen == room)
        fprintf(stderr, "\ngemma: the context is full (%d tokens); stopping\n", gm_generator_n_ctx(s->g));
    return GM_OK;
}

/* Generates up to n tokens after the history, streaming them. The first token's time (prefill +
 * first sample) is reported separately from the rest. */
static gm_status generate_stream(session *s, const run_args *a, int n, streamer *st, double *t_prefill,
                                 double *t_gen, int *n_gen, gm_error *err) {
    *n_gen = 0;
    *t_prefill = *t_gen = 0;
    if (n <= 0) return GM_OK;
    const double t0 = cli_now_s();
    if (gm_generator_speculative(s->g)) return generate_spec(s, n, a, st, t0, t_prefill, t_gen, n_gen, err);
    int32_t t;
    gm_status rc = a->naive ? gm_generator_step(s->g, &a->s, &t, err) : gm_generator_step_cached(s->g, &a->s, &t, err);
    if (rc) return rc;
    *t_prefill = cli_now_s() - t0;
    *n_gen = 1;
    bool go = on_token(t, st) && (a->ignore_eos || !gm_generator_is_stop(s->g, t));
    const double t1 = cli_now_s();
    for (int i = 1; go && i < n; i++) {
        int ctx_used;
        gm_generator_tokens(s->g, &ctx_used);
        if (ctx_used >= gm_generator_n_ctx(s->g)) {
            fprintf(stderr, "\ngemma: the context is full (%d tokens); stopping\n", ctx_used);
            break;
        }
        rc = a->naive ? gm_generator_step(s->g, &a->s, &t, err) : gm_generator_step_cached(s->g, &a->s, &t, err);
        if (rc) return rc;
        (*n_gen)++;
        go = on_token(t, st) && (a->ignore_eos || !gm_generator_is_stop(s->g, t));
    }
    *t_gen = cli_now_s() - t1;
    return GM_OK;
}

/* ---------------------------------------------------------------- gemma run */

/* -v: the ids fed to the model (the first and last 32 of a longer prompt), to stderr. */
static void print_ids(const char *what, const int32_t *ids, size_t n) {
    fprintf(stderr, "gemma %s (%zu):", what, n);
    for (size_t i = 0; i < n; i++) {
        if (n > 64 && i == 32) {
            fprintf(stderr, " ... (%zu more) ...", n - 64);
            i = n - 32;
        }
        fprintf(stderr, " %d", (int)ids[i]);
    }
    fputc('\n', stderr);
}

/* The marker llama.cpp's tools use for where an image goes in a prompt. */
static const char MEDIA_MARKER[] = "<__media__>";

/* text without its <__media__> markers, each image's byte offset in it into at: every image at 0 when there
 * are none, else one marker per image. */
static gm_status place_images(char *text, int n_images, size_t *at, gm_error *err) {
    const size_t mlen = sizeof MEDIA_MARKER - 1;
    int k = 0;
    char *w = text;
    for (const char *r = text; *r;) {
        if (!strncmp(r, MEDIA_MARKER, mlen)) {
            if (k < n_images) at[k] = (size_t)(w - text);
            k++;
            r += mlen;
        } else {
            *w++ = *r++;
        }
    }
    *w = 0;
    if (k == 0)
        for (int i = 0; i < n_images; i++) at[i] = 0;
    else if (k != n_images)
        return gm_fail(err, GM_ERR_ARG, "the prompt has %d %s markers for %d images: give one per image, or none "
                       "(the images then come first)", k, MEDIA_MARKER, n_images);
    return GM_OK;
}

/* The prompt's token ids: raw text, or one chat turn rendered by the model's template, with the index where
 * each image's rows go in image_pos (a->images.n of them). */
static gm_status prompt_ids(const session *s, const run_args *a, const char *text, size_t len, int32_t **ids,
                            size_t *n, size_t *image_pos, gm_error *err) {
    if (!a->chat)
        return gm_tokenize(s->tok, text, len, !a->no_bos && gm_tokenizer_add_bos(s->tok), true, ids, n, err);
    /* the turn's text is a C string: a NUL would cut it short without a word */
    if (memchr(text, 0, len)) {
        if (err) {
            err->code = GM_ERR_ARG;
            snprintf(err->msg, sizeof err->msg, "the prompt holds a NUL byte; a chat turn cannot carry it");
        }
        return GM_ERR_ARG;
    }
    char *copy = strndup(text, len);
    if (!copy) return GM_ERR_NOMEM;
    size_t at[CLI_MAX_IMAGES];
    gm_status st = place_images(copy, a->images.n, at, err);
    gm_chat_message msg = {.role = "user", .content = copy, .image_at = at, .n_images = (size_t)a->images.n};
    const gm_chat_options co = {.add_generation_prompt = true, .image_pos = image_pos, .n_image_pos = (size_t)a->images.n};
    /* the user's text is encoded as text: "<end_of_turn>" in it cannot end the turn */
    if (!st) st = gm_chat_tokenize(s->tok, &msg, 1, &co, ids, n, err);
    free(copy);
    return st;
}

/* The prompt's text: -p, or the file of -f (*text malloc'd). Returns 0, or the exit status after a message. */
static int read_prompt(const run_args *a, char **text, size_t *len) {
    if ((a->prompt != NULL) == (a->file != NULL)) {
        fprintf(stderr, "gemma run: give exactly one of -p PROMPT or -f FILE (see --help)\n");
        return 2;
    }
    *text = a->file ? cli_read_file(a->file, len) : strdup(a->prompt);
    if (!*text) {
        fprintf(stderr, "gemma run: cannot read the prompt file %s: %s\n", a->file ? a->file : "-", strerror(errno));
        return 1;
    }
    if (!a->file) *len = strlen(*text);
    if (*len == 0) {
        fprintf(stderr, "gemma run: the prompt is empty\n");
        return 2;
    }
    return 0;
}

/* The images of --image, encoded, and where their rows go in the prompt. */
typedef struct run_images {
    gm_vision_rows rows[CLI_MAX_IMAGES];
    size_t pos[CLI_MAX_IMAGES]; /* token index (prompt_ids) */
    gm_prompt_span spans[CLI_MAX_IMAGES];
    int64_t n_rows;             /* all of them together */
} run_images;

static gm_status load_images(session *s, const run_args *a, run_images *im, gm_error *err) {
    const double t0 = cli_now_s();
    for (int i = 0; i < a->images.n; i++) {
        const gm_status st = cli_media_load(&s->media, a->images.v[i], &im->rows[i], err);
        if (st) return st;
        im->n_rows += im->rows[i].n_rows;
    }
    if (a->images.n && a->verbose)
        fprintf(stderr, "gemma run: %d image%s encoded in %.0f ms (%lld rows)\n", a->images.n,
                a->images.n > 1 ? "s" : "", (cli_now_s() - t0) * 1e3, (long long)im->n_rows);
    return GM_OK;
}

/* --truncate: the last tokens of a prompt that fills the context, leaving room for the generation (at least
 * one token); a leading <bos> stays in front of them (the model expects it at position 0). */
static void truncate_prompt(const session *s, const run_args *a, int32_t *ids, size_t n_ids, int n_ctx,
                            const int32_t **use, size_t *n_use) {
    int room = a->n_predict < n_ctx / 2 ? a->n_predict : n_ctx / 2;
    if (room < 1) room = 1;
    *n_use = (size_t)(n_ctx - room);
    const int32_t bos = gm_tokenizer_bos(s->tok);
    const bool keep_bos = bos >= 0 && ids[0] == bos; /* n_use >= 1: n_ctx >= 2 (parse_args) */
    if (keep_bos) {
        memmove(ids + 1, ids + (n_ids - (*n_use - 1)), (*n_use - 1) * sizeof *ids);
        *use = ids;
    } else {
        *use = ids + (n_ids - *n_use);
    }
    fprintf(stderr, "gemma run: prompt truncated from %zu to %zu tokens (%sthe last %zu)\n", n_ids, *n_use,
            keep_bos ? "<bos> and " : "", keep_bos ? *n_use - 1 : *n_use);
}

/* The ids the generator gets (*use, *n_use): all of them, or cut by --truncate. False after a message when
 * the prompt does not fit the context. */
static bool fit_prompt(const session *s, const run_args *a, int32_t *ids, size_t n_ids, int64_t n_rows,
                       const int32_t **use, size_t *n_use) {
    const int n_ctx = gm_generator_n_ctx(s->g);
    if (a->images.n && n_ids + (size_t)n_rows >= (size_t)n_ctx) {
        fprintf(stderr, "gemma run: the prompt has %zu tokens and %lld image rows but the context holds %d (with room "
                        "for one more to generate); use -c to enlarge it\n", n_ids, (long long)n_rows, n_ctx);
        return false;
    }
    *use = ids;
    *n_use = n_ids;
    if (n_ids < (size_t)n_ctx) return true;
    if (!a->truncate) {
        fprintf(stderr, "gemma run: the prompt has %zu tokens but the context holds %d (with room for one more "
                        "to generate); use -c to enlarge it or --truncate to keep the last tokens\n", n_ids, n_ctx);
        return false;
    }
    truncate_prompt(s, a, ids, n_ids, n_ctx, use, n_use);
    return true;
}

/* Prefills the prompt and its images, streams the continuation and reports the
 * speeds on stderr. Returns the exit status. */
static int generate_run(session *s, const run_args *a, const int32_t *ids, size_t n_ids, const run_images *im) {
    gm_error err = {0};
    streamer st = {0};
    double t_pp, t_tg;
    int n_gen, status = 1;
    const size_t n_pos = n_ids + (size_t)im->n_rows;
    if (gm_generator_prefill_spans(s->g, ids, (int)n_ids, im->spans, a->images.n, &err) != GM_OK ||
        gm_detok_stream_new(s->tok, false, &st.ds, &err) != GM_OK) {
        fprintf(stderr, "gemma run: %s\n", err.msg);
        goto out;
    }
    if (generate_stream(s, a, a->n_predict, &st, &t_pp, &t_tg, &n_gen, &err) != GM_OK) {
        fprintf(stderr, "\ngemma run: %s\n", err.msg);
        goto out;
    }
    stream_flush(&st);
    if (st.out_failed || fputc('\n', stdout) == EOF || !cli_stdout_flush()) goto out; /* main() reports it */
    fprintf(stderr, "\nload: %.0f ms | prompt: %zu tokens, %.1f tokens/s | generation: %d tokens, %.1f tokens/s%s\n",
            s->load_s * 1e3, n_pos, t_pp > 0 ? (double)n_pos / t_pp : 0.0, n_gen,
            (n_gen > 1 && t_tg > 0) ? (n_gen - 1) / t_tg : 0.0, a->naive ? " (naive)" : "");
    if (a->verbose) print_spec_stats(s, a, "run");
    status = st.failed ? 1 : 0;
out:
    gm_detok_stream_free(st.ds);
    free(st.reply);
    return status;
}

/* The prompt text through the model: its images, its ids, the context check, the generation. */
static int run_prompt(session *s, const run_args *a, const char *text, size_t len) {
    gm_error err = {0};
    run_images im = {0};
    int32_t *ids = NULL;
    size_t n_ids = 0, n_use = 0;
    const int32_t *use = NULL;
    int status = 1;
    if (load_images(s, a, &im, &err) != GM_OK || prompt_ids(s, a, text, len, &ids, &n_ids, im.pos, &err) != GM_OK) {
        fprintf(stderr, "gemma run: %s\n", err.msg);
    } else if (fit_prompt(s, a, ids, n_ids, im.n_rows, &use, &n_use)) {
        for (int i = 0; i < a->images.n; i++)
            im.spans[i] = (gm_prompt_span){.at = im.pos[i], .span = cli_media_span(&s->media, &im.rows[i])};
        if (a->verbose) print_ids("run: prompt ids", use, n_use);
        status = generate_run(s, a, use, n_use, &im);
    }
    for (int i = 0; i < a->images.n; i++) gm_vision_rows_free(&im.rows[i]);
    free(ids);
    return status;
}

int cmd_run(int argc, char **argv) {
    run_args a;
    int rc = parse_args(argc, argv, false, &a);
    if (rc != CLI_GO) return rc;
    char *text = NULL;
    size_t len = 0;
    session s;
    rc = read_prompt(&a, &text, &len);
    if (rc == 0) rc = open_session(&a, "run", &s);
    if (rc == 0) {
        rc = run_prompt(&s, &a, text, len);
        close_session(&s);
    }
    free(text);
    cli_args_free(&a);
    return rc;
}

/* ---------------------------------------------------------------- gemma chat */

/* A message's images: their rows stay for the whole conversation (a later turn may need them again). */
typedef struct msg_images {
    gm_vision_rows rows[CLI_MAX_IMAGES];
    size_t at[CLI_MAX_IMAGES]; /* all 0: the images come before the text */
    int n;
} msg_images;

typedef struct convo {
    gm_chat_message *msgs;
    char **owned;
    msg_images *imgs;
    size_t n, cap;
    msg_images pending; /* /image: for the next user turn */
} convo;

static void images_free(msg_images *m) {
    for (int i = 0; i < m->n; i++) gm_vision_rows_free(&m->rows[i]);
    m->n = 0;
}

/* Appends a message; a user message takes the pending images. */
static bool convo_add(convo *c, const char *role, const char *content) {
    if (c->n == c->cap) {
        size_t cap = c->cap ? c->cap * 2 : 8;
        gm_chat_message *m = realloc(c->msgs, cap * sizeof *m);
        if (!m) return false;
        c->msgs = m;
        char **o = realloc(c->owned, cap * sizeof *o);
        if (!o) return false;
        c->owned = o;
        msg_images *im = realloc(c->imgs, cap * sizeof *im);
        if (!im) return false;
        c->imgs = im;
        c->cap = cap;
    }
    char *copy = strdup(content);
    if (!copy) return false;
    c->owned[c->n] = copy;
    c->imgs[c->n] = (msg_images){0};
    if (!strcmp(role, "user")) {
        c->imgs[c->n] = c->pending;
        c->pending = (msg_images){0};
    }
    c->msgs[c->n] = (gm_chat_message){.role = role, .content = copy, .image_at = c->imgs[c->n].at,
                                      .n_images = (size_t)c->imgs[c->n].n};
    c->n++;
    return true;
}

/* Drops the last message (a turn that failed); its images go back to pending. */
static void convo_drop_last(convo *c) {
    c->n--;
    free(c->owned[c->n]);
    if (c->imgs[c->n].n) c->pending = c->imgs[c->n];
}

static void convo_clear(convo *c, const char *system) {
    for (size_t i = 0; i < c->n; i++) {
        free(c->owned[i]);
        images_free(&c->imgs[i]);
    }
    images_free(&c->pending);
    c->n = 0;
    if (system && *system) convo_add(c, "system", system);
}

static void convo_free(convo *c) {
    convo_clear(c, NULL);
    free(c->msgs);
    free(c->owned);
    free(c->imgs);
}

/* The spans of every image of the conversation, at the positions the chat tokenizer reported. */
static int convo_spans(const session *s, const convo *c, const size_t *image_pos, gm_prompt_span *out) {
    int k = 0;
    for (size_t i = 0; i < c->n; i++)
        for (int j = 0; j < c->imgs[i].n; j++, k++)
            out[k] = (gm_prompt_span){.at = image_pos[k], .span = cli_media_span(&s->media, &c->imgs[i].rows[j])};
    return k;
}

/* The conversation as the chat template renders it: its ids, and its images' spans at their positions. */
typedef struct rendered {
    int32_t *ids;
    size_t n, n_images, rows; /* rows: the images' rows, all of them */
    size_t *image_pos;
    gm_prompt_span *spans;
    int n_spans;
} rendered;

static void rendered_free(rendered *r) {
    free(r->ids);
    free(r->image_pos);
    free(r->spans);
}

/* Renders c into r. Returns -1 when it fits the context; else the turn's status (its user message dropped):
 * 0 after the notice that the conversation no longer fits, 1 after an error. */
static int render(const session *s, convo *c, rendered *r) {
    gm_error err = {0};
    for (size_t i = 0; i < c->n; i++) {
        r->n_images += (size_t)c->imgs[i].n;
        for (int j = 0; j < c->imgs[i].n; j++) r->rows += (size_t)c->imgs[i].rows[j].n_rows;
    }
    r->image_pos = malloc((r->n_images ? r->n_images : 1) * sizeof *r->image_pos);
    r->spans = malloc((r->n_images ? r->n_images : 1) * sizeof *r->spans);
    const gm_chat_options co = {.add_generation_prompt = true, .image_pos = r->image_pos, .n_image_pos = r->n_images};
    int rc = -1;
    if (!r->image_pos || !r->spans) {
        rc = 1;
    } else if (gm_chat_tokenize(s->tok, c->msgs, c->n, &co, &r->ids, &r->n, &err) != GM_OK) {
        fprintf(stderr, "gemma chat: %s\n", err.msg);
        rc = 1;
    } else if (r->n + r->rows >= (size_t)gm_generator_n_ctx(s->g)) {
        fprintf(stderr, "gemma chat: the conversation (%zu tokens) no longer fits the context (%d); /reset to start over\n",
                r->n + r->rows, gm_generator_n_ctx(s->g));
        rc = 0;
    }
    if (rc >= 0) convo_drop_last(c);
    else r->n_spans = convo_spans(s, c, r->image_pos, r->spans);
    return rc;
}

/* Prefills the rendered conversation (only the part the cache lacks is computed), streams the reply and
 * records it. Returns the turn's status. */
static int reply(session *s, const run_args *a, convo *c, const rendered *r) {
    gm_error err = {0};
    streamer st = {0};
    double t_pp, t_tg;
    int n_gen, rc = 1;
    const size_t n = r->n + r->rows; /* positions, for the report below */
    run_args ra = *a;
    ra.ignore_eos = false;
    if (gm_generator_prefill_spans(s->g, r->ids, (int)r->n, r->spans, r->n_spans, &err) != GM_OK ||
        gm_detok_stream_new(s->tok, false, &st.ds, &err) != GM_OK) {
        fprintf(stderr, "gemma chat: %s\n", err.msg);
        goto out;
    }
    const int reused = gm_generator_n_cached(s->g);
    if (generate_stream(s, &ra, a->n_predict, &st, &t_pp, &t_tg, &n_gen, &err) != GM_OK) {
        fprintf(stderr, "\ngemma chat: %s\n", err.msg);
        goto out;
    }
    stream_flush(&st);
    if (st.out_failed || fputc('\n', stdout) == EOF || !cli_stdout_flush()) goto out; /* main() reports it */
    if (a->verbose)
        fprintf(stderr, "[%zu prompt tokens (%d reused from the cache, %zu computed) in %.0f ms, %d generated, %.1f tokens/s]\n",
                n, reused, n - (size_t)reused, t_pp * 1e3, n_gen, (n_gen > 1 && t_tg > 0) ? (n_gen - 1) / t_tg : 0.0);
    if (a->verbose) print_spec_stats(s, a, "chat");
    rc = convo_add(c, "model", st.reply ? st.reply : "") ? 0 : 1;
out:
    gm_detok_stream_free(st.ds);
    free(st.reply);
    return rc;
}

/* One turn: render the whole conversation, prefill it, stream the reply and record it. */
static int chat_turn(session *s, const run_args *a, convo *c, const char *user) {
    if (!convo_add(c, "user", user)) return 1;
    rendered r = {0};
    int rc = render(s, c, &r);
    if (rc < 0) rc = reply(s, a, c, &r);
    rendered_free(&r);
    return rc;
}

/* /image PATH: encoded now (errors show at once), sent with the next user turn. */
static void attach_image(session *s, convo *c, const char *path) {
    while (*path == ' ') path++;
    gm_error err = {0};
    if (!s->media.v) {
        fprintf(stderr, "[/image needs the model's vision encoder: start gemma chat with --mmproj PATH]\n");
        return;
    }
    if (!*path) {
        fprintf(stderr, "[/image PATH: an image file (PNG, JPEG, WebP) for the next turn]\n");
        return;
    }
    if (c->pending.n == CLI_MAX_IMAGES) {
        fprintf(stderr, "[at most %d images per turn]\n", CLI_MAX_IMAGES);
        return;
    }
    gm_vision_rows r;
    const double t0 = cli_now_s();
    if (cli_media_load(&s->media, path, &r, &err) != GM_OK) {
        fprintf(stderr, "[%s]\n", err.msg);
        return;
    }
    c->pending.rows[c->pending.n] = r;
    c->pending.at[c->pending.n++] = 0;
    fprintf(stderr, "[image %dx%d attached to the next turn: %d rows, encoded in %.0f ms]\n", r.width, r.height,
            r.n_rows, (cli_now_s() - t0) * 1e3);
}

/* A line that is a command (/exit, /image, /reset) instead of a user turn: done (true) or not one (false);
 * *quit for /exit. */
static bool chat_command(session *s, const run_args *a, convo *c, const char *line, bool *quit) {
    if (!strcmp(line, "/exit") || !strcmp(line, "/quit")) return *quit = true;
    if (!strncmp(line, "/image", 6) && (line[6] == ' ' || line[6] == 0)) {
        attach_image(s, c, line + 6);
        return true;
    }
    if (strcmp(line, "/reset")) return false;
    convo_clear(c, a->system);
    gm_generator_reset(s->g);
    fprintf(stderr, "[conversation cleared]\n");
    return true;
}

/* User turns from stdin, one per line, until its end or /exit. Returns the exit status. */
static int chat_loop(session *s, const run_args *a) {
    convo c = {0};
    convo_clear(&c, a->system);
    const bool tty = isatty(0);
    char *line = NULL;
    size_t cap = 0;
    int status = 0;
    for (bool quit = false; !quit;) {
        if (tty) fprintf(stderr, "> ");
        ssize_t len = getline(&line, &cap, stdin);
        if (len < 0) break;
        while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r')) line[--len] = 0;
        if (len == 0 || chat_command(s, a, &c, line, &quit)) continue;
        if (chat_turn(s, a, &c, line)) {
            status = 1;
            break;
        }
    }
    free(line);
    convo_free(&c);
    return status;
}

int cmd_chat(int argc, char **argv) {
    run_args a;
    int rc = parse_args(argc, argv, true, &a);
    if (rc != CLI_GO) return rc;
    session s;
    rc = open_session(&a, "chat", &s);
    if (rc == 0) {
        rc = chat_loop(&s, &a);
        close_session(&s);
    }
    cli_args_free(&a);
    return rc;
}
