#!/usr/bin/env bash
# tests/cli_tokenize.sh GEMMA_BINARY SOURCE_DIR — `gemma tokenize` / `gemma detokenize`.
# Expected ids are llama.cpp's for the default model (see tests/data/tokenizer).
set -u
G="$1"
SRC="$2"
MODEL="${GEMMA_MODEL:-$SRC/models/gemma-3-270m-q4_k_m.gguf}"
[ -f "$MODEL" ] || { echo "skip: no model at $MODEL"; exit 77; }
export GEMMA_MODEL="$MODEL"
fails=0
pass=0
expect() { # name, expected, actual
    if [ "$2" == "$3" ]; then pass=$((pass + 1)); else
        fails=$((fails + 1)); printf 'FAIL %s\n  expected: %q\n  actual:   %q\n' "$1" "$2" "$3"; fi
}

expect "ids" "2 9259 1902" "$("$G" tokenize "Hello world")"
expect "words joined" "2 9259 1902" "$("$G" tokenize Hello world)"
expect "no bos" "9259 1902" "$("$G" tokenize --no-bos "Hello world")"
expect "stdin" "2 9259 1902" "$(printf 'Hello world' | "$G" tokenize)"
expect "special" "2 105 2364 107" "$("$G" tokenize "<start_of_turn>user"$'\n')"
expect "no special" "236820 3041 236779 1340 236779 887 236813" "$("$G" tokenize --no-bos --no-special "<start_of_turn>")"
expect "pieces" "$(printf '2\t<bos>\n236746\ta\n255968\t\\t\n236763\tb\n107\t\\n')" "$(printf 'a\tb\n' | "$G" tokenize --pieces)"
expect "detok args" "Hello world" "$("$G" detokenize 2 9259 1902)"
expect "detok commas" "Hello world" "$("$G" detokenize "2,9259, 1902")"
expect "detok stdin" "Hello world" "$(echo "2 9259 1902" | "$G" detokenize)"
expect "detok special" "<start_of_turn>Hello" "$(echo "105 9259" | "$G" detokenize --special)"
expect "round trip" "héllo 世界 😀" "$("$G" tokenize --no-bos "héllo 世界 😀" | "$G" detokenize)"

"$G" detokenize 262144 >/dev/null 2>/tmp/cli_tok_err.$$; rc=$?
expect "out of range exit" "1" "$rc"
grep -q "out of range" /tmp/cli_tok_err.$$; expect "out of range message" "0" "$?"
"$G" detokenize -1 2>&1 | grep -q "out of range"; expect "negative id" "0" "$?"
"$G" detokenize abc >/dev/null 2>&1; expect "bad id exit" "1" "$?"
"$G" tokenize -m /nonexistent.gguf x >/dev/null 2>&1; expect "bad model exit" "1" "$?"
"$G" tokenize --bogus x >/dev/null 2>&1; expect "bad option exit" "2" "$?"
rm -f /tmp/cli_tok_err.$$

# an HF folder works as the model too
expect "hf folder" "2 82 485 121 1234 443" "$("$G" tokenize -m "$SRC/tests/data/tokenizer/tiny/hf_json" "Hello world")"

echo "$pass passed, $fails failed"
[ "$fails" -eq 0 ]
