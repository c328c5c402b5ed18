#!/usr/bin/env bash
# tests/cli_embed.sh GEMMA_BINARY SOURCE_DIR — `gemma embed` on the tiny synthetic EmbeddingGemma
# (tests/data/embedding/plain.gguf, 32 dimensions; its numbers are checked against llama.cpp in
# tests/test_embedding.c): inputs from -p, -f and stdin, --normalize, --json, --task / --prefix, the
# refusals (run on an embedding model, embed with a text generator) and write errors.
set -u
. "$2/tests/support/cli_common.sh"
E=$SRC/tests/data/embedding/plain.gguf

out=$("$GEMMA" embed -m "$E" -p "the cat" -p "of and") || bad "two -p inputs: exit $?"
[ "$(echo "$out" | wc -l)" = 2 ] && ok "one line per input" || bad "one line per input: $(echo "$out" | wc -l)"
[ "$(echo "$out" | head -1 | wc -w)" = 32 ] && ok "32 floats per line" || bad "floats per line"
printf 'the cat\n\nof and\r\n' >"$TMP/in.txt"
[ "$("$GEMMA" embed -m "$E" -f "$TMP/in.txt")" = "$out" ] && ok "-f: one input per non-empty line" || bad "-f differs"
[ "$("$GEMMA" embed -m "$E" <"$TMP/in.txt")" = "$out" ] && ok "stdin lines" || bad "stdin differs"
[ "$("$GEMMA" embed -m "$E" -t 1 -p "the cat")" = "$(echo "$out" | head -1)" ] && ok "same bits at 1 thread" || bad "threads"

norm=$("$GEMMA" embed -m "$E" --normalize -p "the cat" | awk '{s = 0; for (i = 1; i <= NF; i++) s += $i * $i; printf "%.5f", s}')
[ "$norm" = "1.00000" ] && ok "--normalize: unit length" || bad "--normalize: |v|^2 = $norm"
raw=$(echo "$out" | head -1 | awk '{s = 0; for (i = 1; i <= NF; i++) s += $i * $i; printf "%.3f", s}')
[ "$raw" != "1.000" ] && ok "no normalisation by default (|v|^2 = $raw)" || bad "default output is normalised"

"$GEMMA" embed -m "$E" --json -p "a" -p "b" >"$TMP/out.json" || bad "--json exit"
if command -v python3 >/dev/null; then
    python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); assert d["dim"]==32 and len(d["data"])==2 and d["data"][1]["index"]==1 and len(d["data"][0]["embedding"])==32 and d["data"][0]["tokens"]==2' "$TMP/out.json" \
        && ok "--json parses" || bad "--json: $(head -c 200 "$TMP/out.json")"
fi
[ "$("$GEMMA" embed -m "$E" --task query -p "the cat")" = "$("$GEMMA" embed -m "$E" --prefix "task: search result | query: " -p "the cat")" ] \
    && ok "--task query = its prefix" || bad "--task query"
[ "$("$GEMMA" embed -m "$E" --task document -p "the cat")" != "$(echo "$out" | head -1)" ] && ok "a prefix changes the vector" || bad "prefix ignored"

"$GEMMA" embed -m "$E" --task nope -p x >/dev/null 2>&1; [ $? = 2 ] && ok "unknown task: exit 2" || bad "unknown task"
"$GEMMA" embed -m "$E" </dev/null >/dev/null 2>&1; [ $? = 2 ] && ok "no input: exit 2" || bad "no input"
"$GEMMA" embed -m "$E" -c 4 -p "the cat of and the cat" >/dev/null 2>"$TMP/err"; rc=$?
[ $rc = 1 ] && grep -q "context" "$TMP/err" && ok "too long: exit 1, says why" || bad "too long: $rc $(cat "$TMP/err")"
"$GEMMA" run -m "$E" -p hi -n 2 >/dev/null 2>"$TMP/err"; rc=$?
[ $rc = 1 ] && grep -q "embedding model" "$TMP/err" && ok "run on an embedding model: refused" || bad "run: $rc $(cat "$TMP/err")"
"$GEMMA" embed -m "$TINY" -p hi >/dev/null 2>"$TMP/err"; rc=$?
[ $rc = 1 ] && grep -q "not an embedding model" "$TMP/err" && ok "embed with a generator: refused" || bad "embed gemma3: $rc"
"$GEMMA" embed -m "$E" -p x >/dev/full 2>"$TMP/err"; rc=$?
[ $rc = 1 ] && grep -q "cannot write" "$TMP/err" && ok "write error: exit 1" || bad "/dev/full: $rc"
"$GEMMA" embed --help | grep -q "^usage: gemma embed" && ok "--help" || bad "--help"
exit $fail
