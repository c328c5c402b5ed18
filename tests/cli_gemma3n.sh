#!/usr/bin/env bash
# tests/cli_gemma3n.sh — `gemma inspect / run / run --lookup / perplexity` on the tiny synthetic Gemma 3n GGUF (25 layers,
# KV shared from layer 20, window 8), written at test time by `test_gemma3n --write` (its weights are the
# ones tests/test_gemma3n.c checks against llama.cpp; the file is ~17 MB, so it is not committed).
# usage: cli_gemma3n.sh <gemma binary> <source dir>
set -u
. "$2/tests/support/cli_common.sh"
WRITER=$(dirname "$GEMMA")/test_gemma3n
M=$TMP/tiny-gemma3n.gguf
"$WRITER" --write "$M" || { echo "FAIL cannot write the tiny gemma3n model"; exit 1; }

"$GEMMA" inspect -m "$M" >"$TMP/out" 2>"$TMP/err" && grep -q "architecture: gemma3n" "$TMP/out" &&
  ok "inspect names gemma3n" || bad "inspect: $(head -c 300 "$TMP/err")"
grep -q "20-23 .*kv of layer 18" "$TMP/out" && grep -q "^  24 .*kv of layer 19" "$TMP/out" &&
  ok "inspect shows the KV sharing (20-23 read 18, 24 reads 19)" || bad "inspect layer table: $(grep -E '^  (19|2[0-4])' "$TMP/out")"

"$GEMMA" run -m "$M" -p "the cat" -n 24 --ignore-eos -t 2 >"$TMP/cached" 2>"$TMP/err" &&
  grep -q "generation: 24 tokens" "$TMP/err" && ok "run (cached), past the window and the shared layers" ||
  bad "run: $(head -c 300 "$TMP/err")"
"$GEMMA" run -m "$M" -p "the cat" -n 24 --ignore-eos -t 1 --naive >"$TMP/naive" 2>"$TMP/err" &&
  ok "run --naive" || bad "run --naive: $(head -c 300 "$TMP/err")"
cmp -s "$TMP/naive" "$TMP/cached" && ok "naive == cached output" || bad "naive and cached outputs differ"
"$GEMMA" run -m "$M" -p "the cat the cat the cat" -n 24 --ignore-eos -t 2 >"$TMP/plain" 2>/dev/null
"$GEMMA" run -m "$M" -p "the cat the cat the cat" -n 24 --ignore-eos -t 2 --lookup -v >"$TMP/lookup" 2>"$TMP/err" &&
  grep -q "speculative (lookup)" "$TMP/err" && cmp -s "$TMP/plain" "$TMP/lookup" &&
  ok "run --lookup: the greedy output unchanged" || bad "run --lookup: $(tail -c 300 "$TMP/err")"

for i in $(seq 40); do printf 'the cat and the hat are on the mat of the sea and a tree. '; done >"$TMP/text.txt"
"$GEMMA" perplexity -m "$M" -f "$TMP/text.txt" -c 48 --chunks 3 -t 2 >"$TMP/out" 2>"$TMP/err"
rc=$?
ppl=$(sed -n 's/.*Final estimate: PPL = \([0-9.]*\).*/\1/p' "$TMP/out" "$TMP/err" | head -1)
[ "$rc" -eq 0 ] && [ -n "$ppl" ] && awk -v p="$ppl" 'BEGIN { exit !(p > 1 && p < 1e6) }' &&
  ok "perplexity $ppl" || bad "perplexity: rc $rc, $(head -c 300 "$TMP/err")"
"$WRITER" --write-hf "$TMP/hf" || bad "cannot write the HF form"
"$GEMMA" run -m "$TMP/hf" -p "the cat" -n 8 --ignore-eos -t 2 >"$TMP/out" 2>"$TMP/err" &&
  grep -q "generation: 8 tokens" "$TMP/err" && ok "run on the HF folder form" || bad "run HF: $(head -c 300 "$TMP/err")"
exit $fail
