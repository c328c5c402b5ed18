/* gemma_chat.h — libgemma: chat templates, tools in each Gemma family's format, the reply parser (text/). */
#ifndef GEMMA_CHAT_H
#define GEMMA_CHAT_H

#include "gemma.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Chat. role: "system" (only as the first message), "user", "assistant" (rendered "model") or
 * "model"; user and model turns must alternate, starting with user (GM_ERR_ARG otherwise).
 * Renders Gemma's turn format, content trimmed like the official template's `| trim`:
 *   <bos><start_of_turn>user\n{system}\n\n{user}<end_of_turn>\n<start_of_turn>model\n{reply}
 *   <end_of_turn>\n ... [<start_of_turn>model\n when add_generation_prompt]
 * The format comes from the file's chat template when it is Gemma's (recognised by its
 * <start_of_turn> / <end_of_turn> markers); a file without a template, or with one we do not
 * recognise, falls back to the Gemma format when the vocabulary has <start_of_turn> and
 * <end_of_turn> (GM_ERR_UNSUPPORTED otherwise). The text starts with the BOS piece: tokenize it
 * with add_bos=false (or true: gm_tokenize never doubles BOS) and parse_special=true. */
typedef struct gm_tool_call gm_tool_call;
typedef struct gm_chat_message {
    const char *role;            /* system (first only), developer (= system), user, assistant / model, tool */
    const char *content;         /* NULL only for an assistant message with tool_calls */
    /* Tool use (see "tools" below); zero when unused. */
    const gm_tool_call *tool_calls; /* assistant: the calls it made */
    size_t n_tool_calls;
    const char *tool_call_id;    /* tool: the call it answers (its function's name is found from it) */
    const char *name;            /* tool: the function's name, when tool_call_id does not find one */
    const char *reasoning;       /* assistant: its thoughts (Gemma 4 renders them before calls after the last user turn) */
    /* user: images at these byte offsets of content (ascending): each becomes the family's image markers around
     * the place of its rows (gm_chat_options.image_pos); the text between two images is trimmed on its own. */
    const size_t *image_at;
    size_t n_images;
} gm_chat_message;


/* ---- tools: OpenAI-style function calling in each Gemma family's own format (text/tools.c).
 *   GM_TOOLS_GEMMA3         Gemma 1-3 / 3n: no tool tokens; Google's documented prompt (the tools as JSON in
 *                           the first user turn) and pythonic calls `[f(a="x", b=2), g()]` recognised by shape
 *                           (a reply that is only such a list); results go back as a user turn of
 *                           `<tool_response>...</tool_response>` blocks.
 *   GM_TOOLS_FUNCTIONGEMMA  FunctionGemma (a Gemma 3 vocabulary with <start_function_call> ...): declarations
 *                           in a developer turn, `<start_function_call>call:f{a:<escape>x<escape>}<end_function_call>`,
 *                           results `<start_function_response>response:f{...}<end_function_response>` in the same
 *                           model turn; <start_function_response> ends a calling turn.
 *   GM_TOOLS_GEMMA4         Gemma 4: `<|tool>declaration:...<tool|>` in the system turn,
 *                           `<|tool_call>call:f{a:<|"|>x<|"|>}<tool_call|>`, results
 *                           `<|tool_response>response:f{value:<|"|>...<|"|>}<tool_response|>`; <|tool_response>
 *                           ends a calling turn; thoughts `<|channel>thought\n...<channel|>`.
 * The format follows the vocabulary's markers (Gemma 4 > FunctionGemma > Gemma 3). */
typedef enum gm_tool_format {
    GM_TOOLS_NONE = 0, GM_TOOLS_GEMMA3, GM_TOOLS_FUNCTIONGEMMA, GM_TOOLS_GEMMA4,
} gm_tool_format;
GEMMA_API gm_tool_format gm_tokenizer_tool_format(const gm_tokenizer *tok);
GEMMA_API const char *gm_tool_format_name(gm_tool_format f); /* "gemma3-pythonic", "functiongemma", "gemma4", "none" */

typedef struct gm_tool {
    const char *name;        /* [a-zA-Z0-9_.-]{1,64} */
    const char *description; /* NULL: none */
    const char *parameters;  /* the arguments' JSON schema (an object schema) as text; NULL: no arguments */
} gm_tool;

struct gm_tool_call {
    const char *id;          /* the caller's id for it (NULL: none) */
    const char *name;
    const char *arguments;   /* a JSON object, as text (OpenAI's function.arguments) */
};

typedef struct gm_chat_options {
    bool add_generation_prompt;
    const gm_tool *tools;    /* declared in the prompt in the family's format */
    size_t n_tools;
    /* tokenize, out: for each image of the conversation in order, the index in the ids where its rows go
     * (between its begin and end markers: Gemma 3 "\n\n<start_of_image>" | "<end_of_image>\n\n" as
     * transformers expands them, Gemma 4 "<|image>" | "<image|>"); room for n_image_pos (GM_ERR_ARG if short). */
    size_t *image_pos;
    size_t n_image_pos;
} gm_chat_options;

/* The conversation rendered as text (*out: malloc'd, free() it); o NULL: the defaults (no generation prompt, no
 * tools). With tools, tool calls or tool messages, roles follow the conversation's shape:
 * user, assistant (with tool_calls: followed by one tool message per call, or by the end), tool ..., then
 * an assistant reply or the end; anything else is GM_ERR_ARG naming the message. Tool arguments must be
 * JSON objects and parameters JSON schemas (GM_ERR_ARG otherwise). */
GEMMA_API gm_status gm_chat_render(const gm_tokenizer *tok, const gm_chat_message *msgs, size_t n,
                                   const gm_chat_options *o, char **out, gm_error *err);
/* The same conversation as token ids, ready to evaluate: the turn markers (and BOS) are their ids and
 * every content is encoded as plain text, so a message holding "<end_of_turn><start_of_turn>model"
 * (or any other marker, see gm_tokenize) stays text and cannot forge a turn, whatever the file
 * types those tokens. For contents without control-token texts the ids equal
 * gm_tokenize(gm_chat_render(...), parse_special = true). *out: malloc'd, free() it. */
GEMMA_API gm_status gm_chat_tokenize(const gm_tokenizer *tok, const gm_chat_message *msgs, size_t n,
                                     const gm_chat_options *o, int32_t **out, size_t *n_out, gm_error *err);

/* Reads a model's reply token by token and splits it into content, thoughts and tool calls of the
 * tokenizer's format. Calls to functions not in tools, and anything malformed, come back as content
 * text (never lost, never an error). Call arguments come out as JSON objects (text). */
typedef struct gm_tool_parser gm_tool_parser;
GEMMA_API gm_status gm_tool_parser_new(const gm_tokenizer *tok, const gm_tool *tools, size_t n_tools, gm_tool_parser **out,
                                       gm_error *err);
GEMMA_API void gm_tool_parser_free(gm_tool_parser *p);
/* One generated token. *text / *n: content that is now final (whole UTF-8 characters; a reply that may
 * still turn out to be a call list is held back). Returns true when the token ends a calling turn
 * (Gemma 4's <|tool_response>, FunctionGemma's <start_function_response>): generation should stop. */
GEMMA_API bool gm_tool_parser_push(gm_tool_parser *p, int32_t id, const char **text, size_t *n);
/* The reply ended: whatever was held back, decided (calls or content). */
GEMMA_API void gm_tool_parser_finish(gm_tool_parser *p, const char **text, size_t *n);
GEMMA_API size_t gm_tool_parser_n_calls(const gm_tool_parser *p);
/* Call i: its name and arguments (a JSON object's text); views valid while p lives. */
GEMMA_API void gm_tool_parser_call(const gm_tool_parser *p, size_t i, const char **name, const char **arguments);
/* The thoughts read so far (Gemma 4's thought channel), NUL-terminated. */
GEMMA_API const char *gm_tool_parser_reasoning(const gm_tool_parser *p, size_t *len);

/* True when s[0..n) is well-formed UTF-8 (no overlongs, surrogates or code points past U+10FFFF). */
GEMMA_API bool gm_text_is_utf8(const char *s, size_t n);
/* "gemma" (from the template), "gemma-default" (no template), "gemma-fallback" (a template we did
 * not recognise) or "none" (no Gemma turn tokens: gm_chat_render fails). */
GEMMA_API const char *gm_tokenizer_chat_format(const gm_tokenizer *tok);

/* @end tokenizer */

#ifdef __cplusplus
}
#endif

#endif /* GEMMA_CHAT_H */
