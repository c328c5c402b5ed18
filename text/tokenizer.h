/* text/tokenizer.h — internal interface of the SentencePiece-style (llama.cpp "SPM") tokenizer.
 *
 * One vocabulary builder (gm_tokenizer_build) is fed by every source: GGUF metadata
 * (text/tokenizer_gguf.c), a Hugging Face folder's tokenizer.model / tokenizer.json
 * (text/tokenizer_hf.c) or a test's synthetic arrays. The public calls live in gemma.h. */
#ifndef GM_TEXT_TOKENIZER_H
#define GM_TEXT_TOKENIZER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "formats/gguf.h"
#include "gemma.h"

/* Everything a vocabulary is made of. Pieces are (pointer, length) views that need not be
 * NUL-terminated; the builder copies what it keeps. scores/types may be NULL (0.0 / NORMAL). */
typedef struct gm_vocab_spec {
    int32_t n;
    const char *const *pieces;
    const uint32_t *piece_lens;
    const float *scores;
    const int32_t *types;          /* GGUF token_type values (gm_token_type) */
    int32_t bos_id, eos_id, unk_id, pad_id; /* -1 = none */
    int32_t eot_id;                /* -1 = look up "<end_of_turn>" */
    bool add_bos;
    bool add_space_prefix;
    const char *chat_template;     /* may be NULL; copied */
    size_t chat_template_len;
} gm_vocab_spec;

/* name is used in error messages (a path, "test vocab"). */
gm_status gm_tokenizer_build(const gm_vocab_spec *spec, const char *name, gm_tokenizer **out,
                             gm_error *err);

/* Sources. from_gguf only reads the tokenizer.* keys (no tensors). */
gm_status gm_tokenizer_from_gguf(const gguf_file *f, gm_tokenizer **out, gm_error *err);
/* dir holds tokenizer.model and/or tokenizer.json (+ tokenizer_config.json,
 * special_tokens_map.json, added_tokens.json). tokenizer.model wins when both exist. */
gm_status gm_tokenizer_from_hf_dir(const char *dir, gm_tokenizer **out, gm_error *err);
/* Just the SentencePiece protobuf, from memory (also the fuzz entry point). */
gm_status gm_tokenizer_from_spm_model(const void *buf, size_t len, const char *name,
                                      gm_tokenizer **out, gm_error *err);

/* Just tokenizer.json's text, from memory (also the fuzz entry point). Without
 * tokenizer_config.json there are no bos/eos/pad ids and add_bos is false. */
gm_status gm_tokenizer_from_hf_json(const void *buf, size_t len, const char *name,
                                    gm_tokenizer **out, gm_error *err);

/* text/spm_proto.c: a minimal reader of SentencePiece's ModelProto. Pieces point into buf. */
typedef struct gm_spm_piece {
    const char *piece;
    uint32_t len;
    float score;
    int32_t type; /* 1 normal .. 6 byte; 1 when absent */
} gm_spm_piece;

typedef struct gm_spm_model {
    gm_spm_piece *pieces;
    int32_t n;
    int32_t unk_id, bos_id, eos_id, pad_id; /* TrainerSpec (defaults 0, 1, 2, -1) */
    bool add_dummy_prefix;                  /* NormalizerSpec (default true) */
} gm_spm_model;

gm_status gm_spm_parse(const void *buf, size_t len, const char *name, gm_spm_model *out,
                       gm_error *err);
void gm_spm_free(gm_spm_model *m);

/* The chat template text the tokenizer was built with ("" when none). */
const char *gm_tokenizer_chat_template(const gm_tokenizer *tok);

/* A chat-format marker (turn, channel, tool-call tokens, BOS / EOS / PAD, control tokens: see the
 * top of tokenizer.c): plain text never yields it, so a grammar over text must never allow it. */
bool gm_token_is_marker(const gm_tokenizer *t, int32_t id);
/* The chat formats' marker pieces by name (turns, channels, tool tokens), in a fixed order: grammars number
 * their marker characters by it (grammar/markers.c), so new markers go at the end. Returns how many. */
size_t gm_marker_pieces(const char *const **out);

/* UTF-8 helpers (text/utf8.c). */
/* Bytes in the UTF-8 sequence whose lead byte is b, by llama.cpp's rule (high nibble table:
 * continuation and invalid bytes count 1, 0xF8..0xFF count 4). */
size_t gm_utf8_lead_len(uint8_t b);
/* Length of the longest prefix of s[0..n) that does not end inside an incomplete (but so far
 * valid) UTF-8 sequence: what a streaming decoder may emit now. */
size_t gm_utf8_complete_prefix(const uint8_t *s, size_t n);
/* true when s[0..n) is valid UTF-8 (no overlongs, surrogates, or > U+10FFFF). */
bool gm_utf8_valid(const uint8_t *s, size_t n);
/* Decodes one code point at s (n > 0 bytes available); returns its length (>= 1) and the code
 * point, or -1 in *cp for an invalid sequence (length 1 then). */
size_t gm_utf8_decode(const uint8_t *s, size_t n, int32_t *cp);
/* cp (at most U+10FFFF) as UTF-8 into out; returns its length (1-4). */
size_t gm_utf8_encode(uint32_t cp, char out[4]);

#endif
