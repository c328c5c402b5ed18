/* fuzz/fuzz_tokenizer_json.c — libFuzzer harness for the Hugging Face tokenizer.json reader
 * (text/tokenizer_hf.c, gm_tokenizer_from_hf_json): Unigram and BPE vocabularies, added_tokens,
 * normalizer / pre_tokenizer space rules, on arbitrary bytes. It must succeed or fail with an
 * error naming the input, never crash or allocate absurdly; a tokenizer that loads must encode /
 * decode a fixed text (fuzz/fuzz_tok_common.h). Seeds: the committed tiny tokenizer.json and
 * small hand-written Unigram / BPE files. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz/fuzz_tok_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    gm_tokenizer *tok = NULL;
    gm_error err = {0};
    gm_status st = gm_tokenizer_from_hf_json(data, size, "fuzz.json", &tok, &err);
    if (st != GM_OK) {
        if (tok || !err.msg[0]) ft_abort("fuzz_tokenizer_json", "failure without a message", err.msg);
        return 0;
    }
    ft_exercise("fuzz_tokenizer_json", tok);
    gm_tokenizer_free(tok);
    return 0;
}
