/* fuzz/fuzz_chat.c — libFuzzer harness for gm_chat_render (text/chat.c). The input is cut at NUL
 * bytes into up to 8 messages; each message's first byte picks its role (system, user, assistant,
 * model, tool, user) and the rest is its content. Byte 0 of the input also picks the vocabulary:
 * the in-memory Gemma-like one with no template, with a Gemma template, with an unrecognised
 * template, or one without turn tokens (fuzz/fuzz_vocab.h). Properties (abort() on violation):
 *  - the status is what the documented rules predict: GM_ERR_UNSUPPORTED without turn tokens,
 *    GM_ERR_ARG for no messages or roles that do not alternate user / other after an optional
 *    first system message, GM_OK otherwise;
 *  - on success the text starts with "<bos>", tokenizes (parse_special) to ids starting with BOS,
 *    with exactly one BOS when no content holds the text "<bos>", and add_bos=true changes
 *    nothing (never a second BOS); the rendering with the generation prompt is the one without
 *    plus "<start_of_turn>model\n";
 *  - a 0x02 byte in a user message's content places an image there (gm_chat_message.image_at, up to 4 per
 *    message): a vocabulary without <start_of_image> makes that GM_ERR_UNSUPPORTED; otherwise the text holds
 *    one <start_of_image><end_of_image> per image. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz/fuzz_vocab.h"
#include "gemma_chat.h"

#define MAX_MSGS 8
#define GEMMA_TMPL "{{ bos_token }}{% for m in messages %}<start_of_turn>{{ m.role }}\n{{ m.content | trim }}<end_of_turn>\n{% endfor %}"

static gm_tokenizer *g_toks[4];

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    g_toks[0] = fv_build(true, NULL);
    g_toks[1] = fv_build(true, GEMMA_TMPL);
    g_toks[2] = fv_build(true, "{{ messages }}");
    g_toks[3] = fv_build(false, NULL);
    return 0;
}

static void fail(const char *what) {
    fprintf(stderr, "fuzz_chat: property violated: %s\n", what);
    abort();
}

static const char *const ROLES[6] = {"system", "user", "assistant", "model", "tool", "user"};

static gm_status expected_status(const gm_tokenizer *tok, const gm_chat_message *m, size_t n) {
    if (gm_token_id(tok, "<start_of_turn>", 15) < 0) return GM_ERR_UNSUPPORTED;
    if (n == 0) return GM_ERR_ARG;
    size_t first = !strcmp(m[0].role, "system");
    for (size_t i = first; i < n; i++) {
        if (!strcmp(m[i].role, "user") != ((i - first) % 2 == 0)) return GM_ERR_ARG;
        /* a system message only first; a tool result only after an assistant message with tool calls (the
         * fuzzer writes none) */
        if (!strcmp(m[i].role, "system") || !strcmp(m[i].role, "tool")) return GM_ERR_ARG;
    }
    return GM_OK;
}

static void check_rendered(const gm_tokenizer *tok, const char *text, bool bos_in_content) {
    int32_t bos = gm_tokenizer_bos(tok);
    if (strncmp(text, "<bos>", 5)) fail("rendered text does not start with <bos>");
    int32_t *ids = NULL, *ids2 = NULL;
    size_t n = 0, n2 = 0;
    gm_error err = {0};
    if (gm_tokenize(tok, text, strlen(text), false, true, &ids, &n, &err)) fail("rendered text does not tokenize");
    if (gm_tokenize(tok, text, strlen(text), true, true, &ids2, &n2, &err)) fail("rendered text does not tokenize");
    if (n == 0 || ids[0] != bos) fail("tokens do not start with BOS");
    size_t nbos = 0;
    for (size_t i = 0; i < n; i++) nbos += ids[i] == bos;
    if (!bos_in_content && nbos != 1) fail("more than one BOS");
    if (n2 != n || memcmp(ids, ids2, n * sizeof *ids)) fail("add_bos added a second BOS");
    free(ids);
    free(ids2);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size == 0) return 0;
    const gm_tokenizer *tok = g_toks[data[0] & 3];
    /* split the rest at NULs into NUL-terminated messages */
    char *buf = malloc(size);
    memcpy(buf, data + 1, size - 1);
    buf[size - 1] = 0;
    gm_chat_message msgs[MAX_MSGS] = {0};
    size_t img_at[MAX_MSGS][4], n = 0, n_images = 0;
    bool bos_in_content = false;
    for (size_t at = 0; at < size - 1 && n < MAX_MSGS;) {
        char *seg = buf + at;
        size_t l = strlen(seg);
        msgs[n].role = ROLES[l ? (uint8_t)seg[0] % 6 : 1];
        msgs[n].content = l ? seg + 1 : seg;
        bos_in_content |= strstr(msgs[n].content, "<bos>") != NULL;
        for (const char *p = msgs[n].content; *p && msgs[n].n_images < 4 && !strcmp(msgs[n].role, "user"); p++)
            if (*p == 2) img_at[n][msgs[n].n_images++] = (size_t)(p - msgs[n].content);
        msgs[n].image_at = img_at[n];
        n_images += msgs[n].n_images;
        n++;
        at += l + 1;
    }
    gm_status want = expected_status(tok, msgs, n);
    if (want == GM_OK && n_images && gm_token_id(tok, "<start_of_image>", 16) < 0) want = GM_ERR_UNSUPPORTED;
    char *plain = NULL, *gen = NULL;
    gm_error err = {0};
    gm_status st = gm_chat_render(tok, msgs, n, &(gm_chat_options){.add_generation_prompt = false}, &plain, &err);
    if (st != want) {
        fprintf(stderr, "status %d, expected %d: %s\n", st, want, err.msg);
        fail("unexpected status");
    }
    gm_status st2 = gm_chat_render(tok, msgs, n, &(gm_chat_options){.add_generation_prompt = true}, &gen, &err);
    if (st2 != st) fail("generation prompt changed the status");
    if (st == GM_OK) {
        check_rendered(tok, plain, bos_in_content);
        size_t pairs = 0;
        for (const char *p = plain; (p = strstr(p, "<start_of_image><end_of_image>")); p++) pairs++;
        if (pairs < n_images) fail("an image lost its markers");
        check_rendered(tok, gen, bos_in_content);
        size_t lp = strlen(plain);
        if (strncmp(gen, plain, lp) || strcmp(gen + lp, "<start_of_turn>model\n"))
            fail("generation prompt is not a suffix <start_of_turn>model\\n");
    } else if (plain || gen || !err.msg[0]) {
        fail("failure with an output or without a message");
    }
    free(plain);
    free(gen);
    free(buf);
    return 0;
}
