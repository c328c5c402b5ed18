/* fuzz/fuzz_tok_common.h — what fuzz_spm_model and fuzz_tokenizer_json check on every tokenizer a
 * loader accepts from arbitrary bytes: the ids it reports are in range (or -1), and a fixed text
 * (ASCII, spaces, a control text, multi-byte and invalid UTF-8) encodes to in-range ids that
 * decode without error, both through gm_detokenize and the streaming decoder. Encoding may fail
 * only with GM_ERR_UNSUPPORTED (a byte the vocabulary cannot express: no byte piece, no <unk>). */
#ifndef GM_FUZZ_TOK_COMMON_H
#define GM_FUZZ_TOK_COMMON_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "text/tokenizer.h"
#include "gemma_chat.h"

static const char FT_TEXT[] = "Hello world, <start_of_turn>user\n caf\xc3\xa9  \xe6\x97\xa5\xe6\x9c\xac "
                              "\xf0\x9f\x98\x80<bos>\xff\xc3 \xe2\x96\x81x\n\n";

static void ft_abort(const char *loader, const char *what, const char *msg) {
    fprintf(stderr, "%s: property violated: %s (%s)\n", loader, what, msg ? msg : "");
    abort();
}

static void ft_exercise(const char *loader, const gm_tokenizer *tok) {
    int32_t nv = gm_tokenizer_n_vocab(tok);
    int32_t special[5] = {gm_tokenizer_bos(tok), gm_tokenizer_eos(tok), gm_tokenizer_eot(tok),
                          gm_tokenizer_unk(tok), gm_tokenizer_pad(tok)};
    for (int i = 0; i < 5; i++)
        if (special[i] < -1 || special[i] >= nv) ft_abort(loader, "special id out of range", NULL);
    for (int ps = 0; ps < 2; ps++) {
        int32_t *ids = NULL;
        size_t n = 0;
        gm_error err = {0};
        gm_status st = gm_tokenize(tok, FT_TEXT, sizeof FT_TEXT - 1, true, ps, &ids, &n, &err);
        if (st == GM_ERR_UNSUPPORTED) continue;
        if (st) ft_abort(loader, "tokenize failed", err.msg);
        for (size_t i = 0; i < n; i++)
            if (ids[i] < 0 || ids[i] >= nv) ft_abort(loader, "id out of range", NULL);
        char *out = NULL;
        size_t len = 0;
        if (gm_detokenize(tok, ids, n, ps, &out, &len, &err)) ft_abort(loader, "detokenize failed", err.msg);
        gm_detok_stream *s = NULL;
        if (gm_detok_stream_new(tok, ps, &s, &err)) ft_abort(loader, "stream_new failed", err.msg);
        size_t at = 0;
        for (size_t i = 0; i < n; i++) {
            const char *t;
            size_t l;
            if (gm_detok_stream_push(s, ids[i], &t, &l, &err)) ft_abort(loader, "stream push failed", err.msg);
            if (at + l > len || memcmp(out + at, t, l)) ft_abort(loader, "stream differs from detokenize", NULL);
            at += l;
        }
        const char *t;
        size_t l;
        gm_detok_stream_flush(s, &t, &l);
        if (at + l != len || memcmp(out + at, t, l)) ft_abort(loader, "stream flush differs", NULL);
        gm_detok_stream_free(s);
        free(out);
        free(ids);
    }
    /* every piece is reachable by its id; an out-of-range id is an error, not a crash */
    const char *p;
    size_t l;
    gm_error err = {0};
    if (gm_token_to_piece(tok, nv, false, &p, &l, &err) != GM_ERR_ARG) ft_abort(loader, "id n_vocab accepted", NULL);
    for (int32_t id = 0; id < nv && id < 4096; id++)
        if (!gm_token_text(tok, id, &l) || gm_token_to_piece(tok, id, id & 1, &p, &l, &err))
            ft_abort(loader, "piece of a valid id", err.msg);
    (void)gm_tokenizer_chat_format(tok);
}

#endif
