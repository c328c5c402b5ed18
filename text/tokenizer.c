/* text/tokenizer.c — vocabulary, llama.cpp-compatible SPM encoding, decoding, streaming.
 *
 * Encoding reproduces llama.cpp's llm_tokenizer_spm (src/llama-vocab.cpp) id for id:
 *  1. special-token partition: control / unknown (only with parse_special) and user-defined
 *     (always, unless a marker: see below) token texts are cut out of the text as atomic tokens,
 *     longest text first;
 *  2. each remaining raw fragment: ' ' -> U+2581 (plus a leading one when add_space_prefix and
 *     the previous fragment was special), split into characters by the lead byte's length,
 *     then repeatedly merge the adjacent pair whose concatenation is a vocabulary piece with the
 *     highest score (ties: leftmost) using a priority queue;
 *  3. every final symbol that is not a piece becomes one <0xXX> byte token per byte. (llama.cpp's
 *     "resegment" also consults a table of merges, but merged symbols are always pieces, so for
 *     a symbol that is not a piece the table never has an entry: the byte fallback is all that
 *     remains.)
 * Piece lookups go through an open-addressing hash table; special tokens through a byte trie.
 *
 * Markers (issue 23: no forged turns, whatever the file says). The chat format's turn, channel and
 * tool-call tokens, BOS / EOS / PAD / end of turn and every CONTROL token are "markers": text encoded
 * without parse_special never yields one, however the file types it. The partition skips them, the
 * merges never build one and a final symbol that is one falls back to bytes, so a content spelling
 * "<start_of_turn>" stays "<", "start", ... even in a file that calls it USER_DEFINED or NORMAL. With
 * parse_special a marker's text becomes the marker whatever its type. Here we leave llama.cpp, which
 * matches USER_DEFINED tokens in plain text and lets merges reach any piece; for files whose markers
 * are CONTROL, and reached by no merge, the ids are the same (the default model's are). */
#include "text/tokenizer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"

#define GM_MAX_VOCAB (1 << 24)
#define GM_MAX_TEXT ((size_t)1 << 30) /* one call encodes at most 1 GiB */

typedef struct trie_node {
    int32_t child;   /* first child, -1 = none */
    int32_t sibling; /* next sibling, -1 = none */
    int32_t token;   /* id whose piece ends here, -1 = none */
    uint8_t byte;
} trie_node;

struct gm_tokenizer {
    char *name;
    int32_t n_vocab;
    char *arena; /* raw pieces, each NUL-terminated */
    uint64_t *off;
    uint32_t *len;
    float *scores;
    uint8_t *types;
    uint8_t *marker; /* 1 = plain text must never yield this id (see the top of the file) */
    char *dec_arena; /* decoded pieces (non-special rendering) */
    uint64_t *dec_off;
    uint32_t *dec_len;
    int32_t *table; /* piece hash -> id, -1 = empty slot */
    uint64_t table_mask;
    int32_t byte_id[256];
    int32_t bos, eos, eot, unk, pad;
    bool add_bos, add_space_prefix;
    size_t max_token_bytes; /* gm_tokenizer_max_token_bytes */
    char *chat_template;
    /* special tokens */
    trie_node *trie;
    int32_t n_trie, cap_trie;
    bool starts[256];     /* byte begins some special piece */
    uint32_t *spec_lens;  /* distinct special piece lengths, descending */
    int32_t n_spec_lens;
    int32_t *len_index;   /* length -> index in spec_lens (or -1), for lengths <= max_spec_len */
    uint32_t max_spec_len;
};

/* ------------------------------------------------------------------ hashing */

static uint64_t hash_bytes(const char *s, size_t n) {
    uint64_t h = 0xcbf29ce484222325ull ^ (uint64_t)n;
    for (size_t i = 0; i < n; i++) h = (h ^ (uint8_t)s[i]) * 0x100000001b3ull;
    return h ^ (h >> 29);
}

static int32_t lookup(const gm_tokenizer *t, const char *s, size_t n) {
    uint64_t i = hash_bytes(s, n) & t->table_mask;
    for (;;) {
        int32_t id = t->table[i];
        if (id < 0) return -1;
        if (t->len[id] == n && memcmp(t->arena + t->off[id], s, n) == 0) return id;
        i = (i + 1) & t->table_mask;
    }
}

/* ------------------------------------------------------------------ building */

static bool is_special_type(int type) {
    return type == GM_TOKEN_CONTROL || type == GM_TOKEN_USER_DEFINED || type == GM_TOKEN_UNKNOWN;
}

bool gm_token_is_marker(const gm_tokenizer *t, int32_t id) {
    return t && id >= 0 && id < t->n_vocab && t->marker[id];
}

/* Cut out of the text by the special partition (with parse_special, or always: see matchable). */
static bool in_trie(const gm_tokenizer *t, int32_t id) {
    return is_special_type(t->types[id]) || t->marker[id];
}

static gm_status copy_pieces(gm_tokenizer *t, const gm_vocab_spec *s, gm_error *err) {
    uint64_t total = 0;
    for (int32_t i = 0; i < s->n; i++) {
        if (!s->pieces[i] && s->piece_lens[i])
            return gm_fail(err, GM_ERR_ARG, "%s: piece %d is NULL", t->name, i);
        uint32_t l = s->piece_lens[i] ? s->piece_lens[i] : 24; /* room for "[EMPTY_n]" */
        total += (uint64_t)l + 1;
    }
    if (total > ((uint64_t)1 << 32))
        return gm_fail(err, GM_ERR_NOMEM, "%s: vocabulary text is %llu bytes (absurd)", t->name,
                       (unsigned long long)total);
    t->arena = malloc(total);
    t->off = malloc(sizeof *t->off * (size_t)s->n);
    t->len = malloc(sizeof *t->len * (size_t)s->n);
    if (!t->arena || !t->off || !t->len)
        return gm_fail(err, GM_ERR_NOMEM, "%s: out of memory for the vocabulary", t->name);
    uint64_t at = 0;
    for (int32_t i = 0; i < s->n; i++) {
        t->off[i] = at;
        if (s->piece_lens[i] == 0) {
            /* llama.cpp renames empty pieces so every piece stays distinct and non-empty */
            int w = snprintf(t->arena + at, 24, "[EMPTY_%d]", i);
            t->len[i] = (uint32_t)w;
        } else {
            memcpy(t->arena + at, s->pieces[i], s->piece_lens[i]);
            t->len[i] = s->piece_lens[i];
        }
        at += t->len[i];
        t->arena[at++] = 0;
    }
    return GM_OK;
}

static gm_status build_table(gm_tokenizer *t, gm_error *err) {
    uint64_t size = 16;
    while (size < (uint64_t)t->n_vocab * 2) size <<= 1;
    t->table = malloc(sizeof *t->table * size);
    if (!t->table) return gm_fail(err, GM_ERR_NOMEM, "%s: out of memory for the piece table", t->name);
    memset(t->table, 0xff, sizeof *t->table * size);
    t->table_mask = size - 1;
    for (int32_t id = 0; id < t->n_vocab; id++) {
        const char *p = t->arena + t->off[id];
        uint64_t i = hash_bytes(p, t->len[id]) & t->table_mask;
        while (t->table[i] >= 0) {
            int32_t o = t->table[i];
            if (t->len[o] == t->len[id] && memcmp(t->arena + t->off[o], p, t->len[id]) == 0)
                return gm_fail(err, GM_ERR_FORMAT, "%s: duplicate piece '%.*s' has ids %d and %d",
                               t->name, (int)(t->len[id] > 64 ? 64 : t->len[id]), p, o, id);
            i = (i + 1) & t->table_mask;
        }
        t->table[i] = id;
    }
    return GM_OK;
}

static int hexval(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
}

/* The byte of a well-formed "<0xXX>" piece, or -1. */
static int piece_byte(const char *p, uint32_t n) {
    if (n != 6 || p[0] != '<' || p[1] != '0' || p[2] != 'x' || p[5] != '>') return -1;
    int hi = hexval(p[3]), lo = hexval(p[4]);
    return (hi < 0 || lo < 0) ? -1 : hi * 16 + lo;
}

static void find_byte_ids(gm_tokenizer *t) {
    static const char hex[] = "0123456789ABCDEF";
    for (int b = 0; b < 256; b++) {
        char buf[6] = {'<', '0', 'x', hex[b >> 4], hex[b & 15], '>'};
        int32_t id = lookup(t, buf, 6);
        if (id < 0) {
            /* llama.cpp's second choice: the byte itself as a piece */
            char one = (char)b;
            id = lookup(t, &one, 1);
        }
        t->byte_id[b] = id;
    }
}

/* What a token decodes to when special tokens are not rendered. */
static size_t decoded_piece(const gm_tokenizer *t, int32_t id, char *out) {
    const char *p = t->arena + t->off[id];
    uint32_t n = t->len[id];
    switch (t->types[id]) {
    case GM_TOKEN_NORMAL: {
        size_t k = 0;
        for (uint32_t i = 0; i < n; i++) {
            if (i + 2 < n && (uint8_t)p[i] == 0xE2 && (uint8_t)p[i + 1] == 0x96 && (uint8_t)p[i + 2] == 0x81) {
                out[k++] = ' ';
                i += 2;
            } else {
                out[k++] = p[i];
            }
        }
        return k;
    }
    case GM_TOKEN_USER_DEFINED:
        memcpy(out, p, n);
        return n;
    case GM_TOKEN_BYTE: {
        int b = piece_byte(p, n);
        if (b < 0) { memcpy(out, p, n); return n; } /* malformed byte piece: its text */
        out[0] = (char)b;
        return 1;
    }
    default: /* control, unknown (rendered only on request), unused, undefined: nothing */
        return 0;
    }
}

static gm_status build_decoded(gm_tokenizer *t, gm_error *err) {
    uint64_t total = 0;
    for (int32_t i = 0; i < t->n_vocab; i++) total += t->len[i];
    t->dec_arena = malloc(total + 1);
    t->dec_off = malloc(sizeof *t->dec_off * (size_t)t->n_vocab);
    t->dec_len = malloc(sizeof *t->dec_len * (size_t)t->n_vocab);
    if (!t->dec_arena || !t->dec_off || !t->dec_len)
        return gm_fail(err, GM_ERR_NOMEM, "%s: out of memory for decoded pieces", t->name);
    uint64_t at = 0;
    for (int32_t i = 0; i < t->n_vocab; i++) {
        t->dec_off[i] = at;
        t->dec_len[i] = (uint32_t)decoded_piece(t, i, t->dec_arena + at);
        at += t->dec_len[i];
    }
    return GM_OK;
}

static int32_t trie_child(const gm_tokenizer *t, int32_t node, uint8_t b) {
    for (int32_t c = t->trie[node].child; c >= 0; c = t->trie[c].sibling)
        if (t->trie[c].byte == b) return c;
    return -1;
}

static gm_status trie_insert(gm_tokenizer *t, int32_t id, gm_error *err) {
    const uint8_t *p = (const uint8_t *)t->arena + t->off[id];
    int32_t node = 0;
    for (uint32_t i = 0; i < t->len[id]; i++) {
        int32_t c = trie_child(t, node, p[i]);
        if (c < 0) {
            if (t->n_trie == t->cap_trie) {
                int32_t cap = t->cap_trie * 2;
                trie_node *nt = realloc(t->trie, sizeof *nt * (size_t)cap);
                if (!nt) return gm_fail(err, GM_ERR_NOMEM, "%s: out of memory for the special-token trie", t->name);
                t->trie = nt;
                t->cap_trie = cap;
            }
            c = t->n_trie++;
            t->trie[c] = (trie_node){.child = -1, .sibling = t->trie[node].child, .token = -1, .byte = p[i]};
            t->trie[node].child = c;
        }
        node = c;
    }
    t->trie[node].token = id;
    return GM_OK;
}

static int cmp_u32_desc(const void *a, const void *b) {
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? 1 : x > y ? -1 : 0;
}

static gm_status build_specials(gm_tokenizer *t, gm_error *err) {
    t->cap_trie = 1024;
    t->trie = malloc(sizeof *t->trie * (size_t)t->cap_trie);
    if (!t->trie) return gm_fail(err, GM_ERR_NOMEM, "%s: out of memory", t->name);
    t->trie[0] = (trie_node){.child = -1, .sibling = -1, .token = -1, .byte = 0};
    t->n_trie = 1;
    int32_t n_spec = 0;
    for (int32_t id = 0; id < t->n_vocab; id++) {
        if (!in_trie(t, id)) continue;
        gm_status st = trie_insert(t, id, err);
        if (st) return st;
        t->starts[(uint8_t)t->arena[t->off[id]]] = true;
        if (t->len[id] > t->max_spec_len) t->max_spec_len = t->len[id];
        n_spec++;
    }
    t->len_index = malloc(sizeof *t->len_index * (t->max_spec_len + 1));
    t->spec_lens = malloc(sizeof *t->spec_lens * (size_t)(n_spec > 0 ? n_spec : 1));
    if (!t->len_index || !t->spec_lens) return gm_fail(err, GM_ERR_NOMEM, "%s: out of memory", t->name);
    for (uint32_t l = 0; l <= t->max_spec_len; l++) t->len_index[l] = -1;
    for (int32_t id = 0; id < t->n_vocab; id++) {
        if (!in_trie(t, id) || t->len_index[t->len[id]] >= 0) continue;
        t->len_index[t->len[id]] = 0;
        t->spec_lens[t->n_spec_lens++] = t->len[id];
    }
    qsort(t->spec_lens, (size_t)t->n_spec_lens, sizeof *t->spec_lens, cmp_u32_desc);
    for (int32_t k = 0; k < t->n_spec_lens; k++) t->len_index[t->spec_lens[k]] = k;
    return GM_OK;
}

/* llama.cpp recognises end-of-generation and fill-in-the-middle tokens by their text and forces
 * them to CONTROL whatever the file says (Gemma 3 has one such: the HTML tag "</s>", id 212, which
 * the file calls user-defined). The type decides how text is split and decoded, so we do the same;
 * unlike llama.cpp we do not stop generation on them (gm_token_is_eog: <eos>, <end_of_turn> or Gemma 4's <turn|>). */
static const char *const FORCED_CONTROL[] = {
    "<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>", "<|flush|>", "<|calls|>",
    "<end_of_turn>", "<|endoftext|>", "</s>", "<|eom_id|>", "<EOT>", "_<EOT>", "[EOT]", "[EOS]",
    "<|end_of_text|>", "<end_of_utterance>", "<eos>", "<turn|>", "<|tool_response>",
    ("<\xef\xbd\x9c" "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>"), "[e~[",
    "<|fim_prefix|>", "<fim-prefix>", "<fim_prefix>", "<PRE>", "\xe2\x96\x81<PRE>", "<|code_prefix|>", "<|prefix|>",
    "<|fim_suffix|>", "<fim-suffix>", "<fim_suffix>", "<SUF>", "\xe2\x96\x81<SUF>", "<|code_suffix|>", "<|suffix|>",
    "<|fim_middle|>", "<fim-middle>", "<fim_middle>", "<MID>", "\xe2\x96\x81<MID>", "<|code_middle|>", "<|middle|>",
    "<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]", "<|fim_repo|>", "<|repo_name|>", "<fim-repo>",
    "<REPO>", "<reponame>", "<|file_sep|>",
};
/* ... and these are always user-defined (gpt-oss). */
static const char *const FORCED_USER[] = {"<|channel|>", "<|message|>", "<|start|>", "<|constrain|>"};

static void force_types(gm_tokenizer *t) {
    for (size_t i = 0; i < sizeof FORCED_CONTROL / sizeof *FORCED_CONTROL; i++) {
        int32_t id = lookup(t, FORCED_CONTROL[i], strlen(FORCED_CONTROL[i]));
        if (id >= 0) t->types[id] = GM_TOKEN_CONTROL;
    }
    for (size_t i = 0; i < sizeof FORCED_USER / sizeof *FORCED_USER; i++) {
        int32_t id = lookup(t, FORCED_USER[i], strlen(FORCED_USER[i]));
        if (id >= 0) t->types[id] = GM_TOKEN_USER_DEFINED;
    }
}

/* The chat formats' own tokens, markers whatever their type: Gemma 1-3's turns; Gemma 4's turns,
 * thought channel, thinking switch and tool declarations / calls / responses / string delimiter;
 * FunctionGemma's function declarations / calls / responses and string escape. */
static const char *const MARKER_PIECES[] = {
    "<start_of_turn>", "<end_of_turn>",
    "<|turn>", "<turn|>", "<|channel>", "<channel|>", "<|think|>",
    "<|tool>", "<tool|>", "<|tool_call>", "<tool_call|>", "<|tool_response>", "<tool_response|>", "<|\"|>",
    "<start_function_declaration>", "<end_function_declaration>", "<start_function_call>",
    "<end_function_call>", "<start_function_response>", "<end_function_response>", "<escape>",
};

size_t gm_marker_pieces(const char *const **out) {
    *out = MARKER_PIECES;
    return sizeof MARKER_PIECES / sizeof *MARKER_PIECES;
}

static void mark(gm_tokenizer *t, int32_t id) {
    if (id >= 0) t->marker[id] = 1;
}

/* After the types are final (force_types): every CONTROL token, the special ids and the named pieces. */
static void find_markers(gm_tokenizer *t) {
    for (int32_t id = 0; id < t->n_vocab; id++)
        if (t->types[id] == GM_TOKEN_CONTROL) mark(t, id);
    mark(t, t->bos);
    mark(t, t->eos);
    mark(t, t->pad);
    mark(t, t->eot);
    for (size_t i = 0; i < sizeof MARKER_PIECES / sizeof *MARKER_PIECES; i++)
        mark(t, lookup(t, MARKER_PIECES[i], strlen(MARKER_PIECES[i])));
}

/* The most text bytes one token can stand for. The text a token covers is never longer than its
 * piece: special pieces are cut out as their own text, SPM symbols are pieces of the normalized
 * text (which only grows: ' ' -> U+2581 is 3 bytes, the dummy prefix adds one), byte and <unk>
 * fallbacks cover one byte each. So the longest piece (renamed empty ones included) bounds them all. */
static size_t longest_piece(const gm_tokenizer *t) {
    size_t k = 1;
    for (int32_t id = 0; id < t->n_vocab; id++)
        if (t->len[id] > k) k = t->len[id];
    return k;
}

static int32_t valid_id(const gm_tokenizer *t, int32_t id) {
    return (id >= 0 && id < t->n_vocab) ? id : -1;
}

gm_status gm_tokenizer_build(const gm_vocab_spec *s, const char *name, gm_tokenizer **out,
                             gm_error *err) {
    if (!out) return gm_fail(err, GM_ERR_ARG, "gm_tokenizer_build: out is NULL");
    *out = NULL;
    if (!name) name = "vocabulary";
    if (!s || !s->pieces || !s->piece_lens)
        return gm_fail(err, GM_ERR_ARG, "%s: no pieces given", name);
    if (s->n <= 0 || s->n > GM_MAX_VOCAB)
        return gm_fail(err, GM_ERR_FORMAT, "%s: vocabulary size %d is out of range (1..%d)", name,
                       s->n, GM_MAX_VOCAB);
    gm_tokenizer *t = calloc(1, sizeof *t);
    if (!t) return gm_fail(err, GM_ERR_NOMEM, "%s: out of memory", name);
    t->name = strdup(name);
    t->n_vocab = s->n;
    t->scores = malloc(sizeof *t->scores * (size_t)s->n);
    t->types = malloc((size_t)s->n);
    t->marker = calloc((size_t)s->n, 1);
    t->chat_template = malloc(s->chat_template_len + 1);
    gm_status st = GM_OK;
    if (!t->name || !t->scores || !t->types || !t->marker || !t->chat_template) {
        st = gm_fail(err, GM_ERR_NOMEM, "%s: out of memory", name);
        goto fail;
    }
    if (s->chat_template && s->chat_template_len) memcpy(t->chat_template, s->chat_template, s->chat_template_len);
    t->chat_template[s->chat_template && s->chat_template_len ? s->chat_template_len : 0] = 0;
    for (int32_t i = 0; i < s->n; i++) {
        t->scores[i] = s->scores ? s->scores[i] : 0.0f;
        int ty = s->types ? s->types[i] : GM_TOKEN_NORMAL;
        t->types[i] = (uint8_t)((ty >= 0 && ty <= GM_TOKEN_BYTE) ? ty : GM_TOKEN_UNDEFINED);
    }
    if ((st = copy_pieces(t, s, err)) || (st = build_table(t, err))) goto fail;
    t->bos = valid_id(t, s->bos_id);
    t->eos = valid_id(t, s->eos_id);
    t->unk = valid_id(t, s->unk_id);
    t->pad = valid_id(t, s->pad_id);
    t->eot = s->eot_id >= 0 ? valid_id(t, s->eot_id) : lookup(t, "<end_of_turn>", 13);
    if (t->eot < 0 && s->eot_id < 0) t->eot = lookup(t, "<turn|>", 7); /* Gemma 4's end of turn */
    /* like llama.cpp: an end-of-turn token is a control token whatever the file says */
    if (t->eot >= 0) t->types[t->eot] = GM_TOKEN_CONTROL;
    force_types(t);
    t->add_bos = s->add_bos;
    t->add_space_prefix = s->add_space_prefix;
    if (t->add_bos && t->bos < 0) {
        st = gm_fail(err, GM_ERR_FORMAT, "%s: add_bos_token is true but there is no valid BOS id (%d)",
                     name, s->bos_id);
        goto fail;
    }
    find_byte_ids(t);
    find_markers(t);
    t->max_token_bytes = longest_piece(t);
    if ((st = build_decoded(t, err)) || (st = build_specials(t, err))) goto fail;
    *out = t;
    return GM_OK;
fail:
    gm_tokenizer_free(t);
    return st;
}

void gm_tokenizer_free(gm_tokenizer *t) {
    if (!t) return;
    free(t->name);
    free(t->arena);
    free(t->off);
    free(t->len);
    free(t->scores);
    free(t->types);
    free(t->marker);
    free(t->dec_arena);
    free(t->dec_off);
    free(t->dec_len);
    free(t->table);
    free(t->chat_template);
    free(t->trie);
    free(t->spec_lens);
    free(t->len_index);
    free(t);
}

/* ------------------------------------------------------------------ queries */

int32_t gm_tokenizer_n_vocab(const gm_tokenizer *t) { return t ? t->n_vocab : 0; }
int32_t gm_tokenizer_bos(const gm_tokenizer *t) { return t ? t->bos : -1; }
int32_t gm_tokenizer_eos(const gm_tokenizer *t) { return t ? t->eos : -1; }
int32_t gm_tokenizer_eot(const gm_tokenizer *t) { return t ? t->eot : -1; }
int32_t gm_tokenizer_unk(const gm_tokenizer *t) { return t ? t->unk : -1; }
int32_t gm_tokenizer_pad(const gm_tokenizer *t) { return t ? t->pad : -1; }
bool gm_tokenizer_add_bos(const gm_tokenizer *t) { return t && t->add_bos; }
size_t gm_tokenizer_max_token_bytes(const gm_tokenizer *t) { return t ? t->max_token_bytes : 0; }
const char *gm_tokenizer_chat_template(const gm_tokenizer *t) { return t ? t->chat_template : ""; }

gm_token_type gm_token_get_type(const gm_tokenizer *t, int32_t id) {
    if (!t || id < 0 || id >= t->n_vocab) return GM_TOKEN_UNDEFINED;
    return (gm_token_type)t->types[id];
}

bool gm_token_is_control(const gm_tokenizer *t, int32_t id) {
    return gm_token_get_type(t, id) == GM_TOKEN_CONTROL;
}

bool gm_token_is_eog(const gm_tokenizer *t, int32_t id) {
    return t && id >= 0 && (id == t->eos || id == t->eot);
}

size_t gm_tokenizer_stop_ids(const gm_tokenizer *t, int32_t out[4]) {
    size_t n = 0;
    if (!t) return 0;
    if (t->eos >= 0) out[n++] = t->eos;
    if (t->eot >= 0 && t->eot != t->eos) out[n++] = t->eot;
    return n;
}

int32_t gm_token_id(const gm_tokenizer *t, const char *text, size_t len) {
    if (!t || (!text && len)) return -1;
    return lookup(t, text ? text : "", len);
}

const char *gm_token_text(const gm_tokenizer *t, int32_t id, size_t *len) {
    if (!t || id < 0 || id >= t->n_vocab) {
        if (len) *len = 0;
        return NULL;
    }
    if (len) *len = t->len[id];
    return t->arena + t->off[id];
}

/* ------------------------------------------------------------------ growable id list */

typedef struct idvec {
    int32_t *v;
    size_t n, cap;
} idvec;

static bool idvec_push(idvec *o, int32_t id) {
    if (o->n == o->cap) {
        size_t cap = o->cap ? o->cap * 2 : 64;
        int32_t *nv = realloc(o->v, cap * sizeof *nv);
        if (!nv) return false;
        o->v = nv;
        o->cap = cap;
    }
    o->v[o->n++] = id;
    return true;
}

/* ------------------------------------------------------------------ special-token partition */

/* One piece of the partitioned text: a raw span (id < 0) or a special token. */
typedef struct frag {
    size_t pos, len;
    int32_t id;
} frag;

typedef struct match {
    size_t pos;
    uint32_t len;
} match;

static int cmp_match_pos(const void *a, const void *b) {
    size_t x = ((const match *)a)->pos, y = ((const match *)b)->pos;
    return x < y ? -1 : x > y;
}

/* Plain text (parse_special off) only cuts out added words: USER_DEFINED tokens that are no marker. */
static bool matchable(const gm_tokenizer *t, int32_t id, bool parse_special) {
    return parse_special || (t->types[id] == GM_TOKEN_USER_DEFINED && !t->marker[id]);
}

static bool bit_get(const uint64_t *bits, size_t i) { return (bits[i >> 6] >> (i & 63)) & 1; }
static void bit_set(uint64_t *bits, size_t i) { bits[i >> 6] |= (uint64_t)1 << (i & 63); }

/* llama.cpp takes the special pieces longest first and, for each, cuts every leftmost
 * non-overlapping occurrence out of the raw fragments still left. We get the same cuts without
 * rescanning the text once per special piece: one trie pass records, for every position, which
 * special lengths match there (a bitmask over the distinct lengths); then, length by length
 * (longest first), a left-to-right sweep accepts occurrences not yet covered. Because the
 * accepted spans so far are never shorter than the current length, an overlap always covers the
 * candidate's first or last byte, so two bit tests decide it. Equal-length pieces are taken
 * together, leftmost first (llama.cpp's order among them is an unstable sort; no two
 * equal-length special pieces of Gemma can overlap, so this never differs there). */
static gm_status find_special_matches(const gm_tokenizer *t, const uint8_t *s, size_t n,
                                      bool parse_special, match **out, size_t *n_out, gm_error *err) {
    *out = NULL;
    *n_out = 0;
    if (t->n_spec_lens == 0 || n == 0) return GM_OK;
    size_t W = ((size_t)t->n_spec_lens + 63) / 64;
    size_t cap = 0, ne = 0;
    size_t *pos = NULL;
    uint64_t *masks = NULL;
    uint64_t *covered = NULL;
    match *acc = NULL;
    gm_status st = GM_OK;
    for (size_t p = 0; p < n; p++) {
        if (!t->starts[s[p]]) continue;
        int32_t node = 0;
        bool any = false;
        for (size_t q = p; q < n && q - p < t->max_spec_len; q++) {
            node = trie_child(t, node, s[q]);
            if (node < 0) break;
            int32_t id = t->trie[node].token;
            if (id < 0 || !matchable(t, id, parse_special)) continue;
            if (!any) {
                if (ne == cap) {
                    cap = cap ? cap * 2 : 256;
                    size_t *np = realloc(pos, cap * sizeof *np);
                    if (np) pos = np;
                    uint64_t *nm = np ? realloc(masks, cap * W * sizeof *nm) : NULL;
                    if (nm) masks = nm;
                    if (!np || !nm) { st = gm_fail(err, GM_ERR_NOMEM, "%s: out of memory while tokenizing", t->name); goto done; }
                }
                pos[ne] = p;
                memset(masks + ne * W, 0, W * sizeof *masks);
                ne++;
                any = true;
            }
            int32_t k = t->len_index[q - p + 1];
            masks[(ne - 1) * W + (size_t)k / 64] |= (uint64_t)1 << (k % 64);
        }
    }
    if (ne == 0) goto done;
    covered = calloc((n + 63) / 64, sizeof *covered);
    acc = malloc(ne * sizeof *acc);
    if (!covered || !acc) { st = gm_fail(err, GM_ERR_NOMEM, "%s: out of memory while tokenizing", t->name); goto done; }
    size_t na = 0;
    for (int32_t k = 0; k < t->n_spec_lens; k++) {
        uint32_t L = t->spec_lens[k];
        uint64_t bit = (uint64_t)1 << (k % 64);
        for (size_t e = 0; e < ne; e++) {
            if (!(masks[e * W + (size_t)k / 64] & bit)) continue;
            size_t p = pos[e];
            if (bit_get(covered, p) || bit_get(covered, p + L - 1)) continue;
            for (size_t i = p; i < p + L; i++) bit_set(covered, i);
            acc[na++] = (match){p, L};
        }
    }
    qsort(acc, na, sizeof *acc, cmp_match_pos);
    *out = acc;
    *n_out = na;
    acc = NULL;
done:
    free(pos);
    free(masks);
    free(covered);
    free(acc);
    return st;
}

/* ------------------------------------------------------------------ SPM merge */

typedef struct sym {
    int32_t prev, next;
    uint32_t off, n; /* into the escaped fragment; n == 0 once merged away */
} sym;

typedef struct bigram {
    float score;
    int32_t left, right;
    uint32_t size;
} bigram;

typedef struct spm_scratch {
    const uint8_t *banned; /* ids the fragment must not yield (t->marker for plain text), or NULL */
    char *buf;
    size_t buf_cap;
    sym *syms;
    size_t syms_cap;
    bigram *heap;
    size_t heap_n, heap_cap;
} spm_scratch;

/* heap order: higher score first, then the leftmost pair */
static bool bigram_before(const bigram *a, const bigram *b) {
    return a->score > b->score || (a->score == b->score && a->left < b->left);
}

static bool heap_push(spm_scratch *w, bigram b) {
    if (w->heap_n == w->heap_cap) {
        size_t cap = w->heap_cap ? w->heap_cap * 2 : 256;
        bigram *nh = realloc(w->heap, cap * sizeof *nh);
        if (!nh) return false;
        w->heap = nh;
        w->heap_cap = cap;
    }
    size_t i = w->heap_n++;
    while (i > 0) {
        size_t parent = (i - 1) / 2;
        if (!bigram_before(&b, &w->heap[parent])) break;
        w->heap[i] = w->heap[parent];
        i = parent;
    }
    w->heap[i] = b;
    return true;
}

static bigram heap_pop(spm_scratch *w) {
    bigram top = w->heap[0];
    bigram last = w->heap[--w->heap_n];
    size_t i = 0, n = w->heap_n;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= n) break;
        if (c + 1 < n && bigram_before(&w->heap[c + 1], &w->heap[c])) c++;
        if (!bigram_before(&w->heap[c], &last)) break;
        w->heap[i] = w->heap[c];
        i = c;
    }
    if (n) w->heap[i] = last;
    return top;
}

static bool try_add_bigram(const gm_tokenizer *t, spm_scratch *w, int32_t left, int32_t right) {
    if (left < 0 || right < 0) return true;
    const sym *l = &w->syms[left], *r = &w->syms[right];
    uint32_t size = l->n + r->n;
    int32_t id = lookup(t, w->buf + l->off, size);
    if (id < 0 || (w->banned && w->banned[id])) return true;
    return heap_push(w, (bigram){t->scores[id], left, right, size});
}

/* A final symbol: its piece, else one byte token per byte. Merges never build a banned piece, but
 * a single character can be one (a one-character CONTROL token): it goes out as bytes too. <unk>,
 * the fallback for a byte without a token, is allowed even when banned: no text spells it there. */
static gm_status emit_symbol(const gm_tokenizer *t, const uint8_t *banned, const char *p, uint32_t n,
                             idvec *out, gm_error *err) {
    int32_t id = lookup(t, p, n);
    if (id >= 0 && !(banned && banned[id]))
        return idvec_push(out, id) ? GM_OK : gm_fail(err, GM_ERR_NOMEM, "%s: out of memory", t->name);
    for (uint32_t i = 0; i < n; i++) {
        int32_t b = t->byte_id[(uint8_t)p[i]];
        if (b >= 0 && banned && banned[b]) b = -1;
        if (b < 0) b = t->unk; /* documented: a vocabulary without byte pieces falls back to <unk> */
        if (b < 0)
            return gm_fail(err, GM_ERR_UNSUPPORTED,
                           "%s: byte 0x%02X is not in the vocabulary (no <0x%02X> piece, no <unk>)",
                           t->name, (uint8_t)p[i], (uint8_t)p[i]);
        if (!idvec_push(out, b)) return gm_fail(err, GM_ERR_NOMEM, "%s: out of memory", t->name);
    }
    return GM_OK;
}

static gm_status spm_fragment(const gm_tokenizer *t, spm_scratch *w, const char *s, size_t n,
                              bool space_prefix, idvec *out, gm_error *err) {
    /* escape: ' ' -> U+2581 (3 bytes) */
    size_t spaces = space_prefix ? 1 : 0;
    for (size_t i = 0; i < n; i++) spaces += s[i] == ' ';
    size_t m = n + (space_prefix ? 1 : 0) + 2 * spaces;
    if (m > UINT32_MAX / 2) return gm_fail(err, GM_ERR_ARG, "%s: text fragment too long", t->name);
    if (m > w->buf_cap) {
        char *nb = realloc(w->buf, m);
        if (!nb) return gm_fail(err, GM_ERR_NOMEM, "%s: out of memory", t->name);
        w->buf = nb;
        w->buf_cap = m;
    }
    size_t k = 0;
    if (space_prefix) { memcpy(w->buf, "\xe2\x96\x81", 3); k = 3; }
    for (size_t i = 0; i < n; i++) {
        if (s[i] == ' ') { memcpy(w->buf + k, "\xe2\x96\x81", 3); k += 3; }
        else w->buf[k++] = s[i];
    }
    if (m > w->syms_cap) {
        sym *ns = realloc(w->syms, m * sizeof *ns);
        if (!ns) return gm_fail(err, GM_ERR_NOMEM, "%s: out of memory", t->name);
        w->syms = ns;
        w->syms_cap = m;
    }
    int32_t ns = 0;
    for (size_t off = 0; off < m;) {
        size_t l = gm_utf8_lead_len((uint8_t)w->buf[off]);
        if (l > m - off) l = m - off;
        w->syms[ns] = (sym){ns - 1, off + l == m ? -1 : ns + 1, (uint32_t)off, (uint32_t)l};
        ns++;
        off += l;
    }
    w->heap_n = 0;
    for (int32_t i = 1; i < ns; i++)
        if (!try_add_bigram(t, w, i - 1, i)) return gm_fail(err, GM_ERR_NOMEM, "%s: out of memory", t->name);
    while (w->heap_n) {
        bigram b = heap_pop(w);
        sym *l = &w->syms[b.left], *r = &w->syms[b.right];
        /* stale entry: one side was merged away, or grew since it was queued */
        if (l->n == 0 || r->n == 0 || l->n + r->n != b.size) continue;
        l->n += r->n;
        r->n = 0;
        l->next = r->next;
        if (r->next >= 0) w->syms[r->next].prev = b.left;
        if (!try_add_bigram(t, w, l->prev, b.left) || !try_add_bigram(t, w, b.left, l->next))
            return gm_fail(err, GM_ERR_NOMEM, "%s: out of memory", t->name);
    }
    for (int32_t i = ns ? 0 : -1; i >= 0; i = w->syms[i].next) {
        gm_status st = emit_symbol(t, w->banned, w->buf + w->syms[i].off, w->syms[i].n, out, err);
        if (st) return st;
    }
    return GM_OK;
}

/* ------------------------------------------------------------------ encode */

gm_status gm_tokenize(const gm_tokenizer *t, const char *text, size_t len, bool add_bos,
                      bool parse_special, int32_t **ids, size_t *n, gm_error *err) {
    if (ids) *ids = NULL;
    if (n) *n = 0;
    if (!t || !ids || !n || (!text && len))
        return gm_fail(err, GM_ERR_ARG, "gm_tokenize: NULL tokenizer, text or output");
    if (len > GM_MAX_TEXT)
        return gm_fail(err, GM_ERR_ARG, "%s: text of %zu bytes is over the 1 GiB limit", t->name, len);
    const uint8_t *s = (const uint8_t *)(text ? text : "");
    match *m = NULL;
    size_t nm = 0;
    idvec out = {0};
    spm_scratch w = {.banned = parse_special ? NULL : t->marker};
    gm_status st = find_special_matches(t, s, len, parse_special, &m, &nm, err);
    if (st) return st;
    /* never two BOS: skip ours when the text itself starts with the BOS piece */
    bool starts_with_bos = nm > 0 && m[0].pos == 0 && t->bos >= 0 &&
                           lookup(t, text, m[0].len) == t->bos;
    if (add_bos && t->bos >= 0 && !starts_with_bos && !idvec_push(&out, t->bos)) {
        st = gm_fail(err, GM_ERR_NOMEM, "%s: out of memory", t->name);
        goto done;
    }
    bool prev_special = true;
    size_t at = 0;
    for (size_t i = 0; i <= nm && !st; i++) {
        size_t end = i < nm ? m[i].pos : len;
        if (end > at) {
            st = spm_fragment(t, &w, text + at, end - at, t->add_space_prefix && prev_special, &out, err);
            prev_special = false;
        }
        if (i < nm && !st) {
            if (!idvec_push(&out, lookup(t, text + m[i].pos, m[i].len))) st = gm_fail(err, GM_ERR_NOMEM, "%s: out of memory", t->name);
            prev_special = true;
            at = m[i].pos + m[i].len;
        }
    }
done:
    free(m);
    free(w.buf);
    free(w.syms);
    free(w.heap);
    if (st) {
        free(out.v);
        return st;
    }
    if (!out.v) out.v = malloc(sizeof *out.v); /* a valid pointer even for no ids */
    if (!out.v) return gm_fail(err, GM_ERR_NOMEM, "%s: out of memory", t->name);
    *ids = out.v;
    *n = out.n;
    return GM_OK;
}

/* ------------------------------------------------------------------ decode */

gm_status gm_token_to_piece(const gm_tokenizer *t, int32_t id, bool render_special,
                            const char **piece, size_t *len, gm_error *err) {
    if (!t || !piece || !len) return gm_fail(err, GM_ERR_ARG, "gm_token_to_piece: NULL argument");
    if (id < 0 || id >= t->n_vocab) {
        *piece = "";
        *len = 0;
        return gm_fail(err, GM_ERR_ARG, "%s: token id %d is out of range (vocabulary of %d)",
                       t->name, id, t->n_vocab);
    }
    int ty = t->types[id];
    if (render_special && (ty == GM_TOKEN_CONTROL || ty == GM_TOKEN_UNKNOWN)) {
        *piece = t->arena + t->off[id];
        *len = t->len[id];
    } else {
        *piece = t->dec_arena + t->dec_off[id];
        *len = t->dec_len[id];
    }
    return GM_OK;
}

gm_status gm_detokenize(const gm_tokenizer *t, const int32_t *ids, size_t n, bool render_special,
                        char **out, size_t *len, gm_error *err) {
    if (out) *out = NULL;
    if (len) *len = 0;
    if (!t || !out || (!ids && n)) return gm_fail(err, GM_ERR_ARG, "gm_detokenize: NULL argument");
    size_t total = 0;
    for (size_t i = 0; i < n; i++) {
        const char *p;
        size_t l;
        gm_status st = gm_token_to_piece(t, ids[i], render_special, &p, &l, err);
        if (st) return gm_fail_prefix(err, "ids[%zu]: ", i);
        total += l;
    }
    char *buf = malloc(total + 1);
    if (!buf) return gm_fail(err, GM_ERR_NOMEM, "%s: out of memory for %zu bytes of text", t->name, total);
    size_t at = 0;
    for (size_t i = 0; i < n; i++) {
        const char *p;
        size_t l;
        gm_token_to_piece(t, ids[i], render_special, &p, &l, NULL);
        memcpy(buf + at, p, l);
        at += l;
    }
    buf[at] = 0;
    *out = buf;
    if (len) *len = at;
    return GM_OK;
}

/* ------------------------------------------------------------------ streaming decode */

struct gm_detok_stream {
    const gm_tokenizer *tok;
    bool render_special;
    char *buf;
    size_t len, cap, emitted; /* buf[emitted..len) is held back */
};

gm_status gm_detok_stream_new(const gm_tokenizer *tok, bool render_special, gm_detok_stream **out,
                              gm_error *err) {
    if (!tok || !out) return gm_fail(err, GM_ERR_ARG, "gm_detok_stream_new: NULL argument");
    gm_detok_stream *s = calloc(1, sizeof *s);
    if (!s) return gm_fail(err, GM_ERR_NOMEM, "out of memory");
    s->tok = tok;
    s->render_special = render_special;
    *out = s;
    return GM_OK;
}

gm_status gm_detok_stream_push(gm_detok_stream *s, int32_t id, const char **text, size_t *len,
                               gm_error *err) {
    if (!s || !text || !len) return gm_fail(err, GM_ERR_ARG, "gm_detok_stream_push: NULL argument");
    *text = "";
    *len = 0;
    const char *p;
    size_t l;
    gm_status st = gm_token_to_piece(s->tok, id, s->render_special, &p, &l, err);
    if (st) return st;
    size_t held = s->len - s->emitted;
    if (held && s->emitted) memmove(s->buf, s->buf + s->emitted, held);
    s->len = held;
    s->emitted = 0;
    if (s->len + l > s->cap) {
        size_t cap = (s->len + l) * 2 + 16;
        char *nb = realloc(s->buf, cap);
        if (!nb) return gm_fail(err, GM_ERR_NOMEM, "out of memory");
        s->buf = nb;
        s->cap = cap;
    }
    if (l) memcpy(s->buf + s->len, p, l);
    s->len += l;
    s->emitted = gm_utf8_complete_prefix((const uint8_t *)s->buf, s->len);
    *text = s->buf ? s->buf : "";
    *len = s->emitted;
    return GM_OK;
}

void gm_detok_stream_flush(gm_detok_stream *s, const char **text, size_t *len) {
    if (!s) { if (text) *text = ""; if (len) *len = 0; return; }
    if (text) *text = s->buf ? s->buf + s->emitted : "";
    if (len) *len = s->len - s->emitted;
    s->len = 0;
    s->emitted = 0;
}

void gm_detok_stream_free(gm_detok_stream *s) {
    if (!s) return;
    free(s->buf);
    free(s);
}
