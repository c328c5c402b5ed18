/* fuzz/fuzz_spm_model.c — libFuzzer harness for the SentencePiece tokenizer.model reader
 * (text/spm_proto.c) and the vocabulary builder behind it: gm_tokenizer_from_spm_model on
 * arbitrary bytes must succeed or fail with an error naming the input, never crash or allocate
 * absurdly; a tokenizer that loads must encode / decode a fixed text (fuzz/fuzz_tok_common.h).
 * Seeds: the committed tiny Gemma tokenizer.model and small hand-made protobufs. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz/fuzz_tok_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    gm_tokenizer *tok = NULL;
    gm_error err = {0};
    gm_status st = gm_tokenizer_from_spm_model(data, size, "fuzz.model", &tok, &err);
    if (st != GM_OK) {
        if (tok || !strstr(err.msg, "fuzz.model")) ft_abort("fuzz_spm_model", "error does not name the input", err.msg);
        return 0;
    }
    ft_exercise("fuzz_spm_model", tok);
    gm_tokenizer_free(tok);
    return 0;
}
