#!/usr/bin/env bash
# tests/cli_gemma4.sh — `gemma inspect / run / run --lookup / perplexity` on the tiny synthetic Gemma 4 GGUFs committed under
# tests/data/gemma4/ (7 layers: sliding head_dim 8 x 2 KV heads, full head_dim 16 x 1, layers 5 and 6 reading
# the K/V of layers 3 and 4, window 8; the -ple variant with per-layer embeddings). Their logits are checked
# against llama.cpp by tests/test_gemma4.c.
# usage: cli_gemma4.sh <gemma binary> <source dir>
set -u
. "$2/tests/support/cli_common.sh"
for M in "$SRC/tests/data/gemma4/gemma4-dense.gguf" "$SRC/tests/data/gemma4/gemma4-ple.gguf" \
         "$SRC/tests/data/gemma4/gemma4-moe.gguf"; do
  v=$(basename "$M" .gguf)
  "$GEMMA" inspect -m "$M" >"$TMP/out" 2>"$TMP/err" && grep -q "architecture: gemma4" "$TMP/out" &&
    ok "$v: inspect names gemma4" || bad "$v: inspect: $(head -c 300 "$TMP/err")"
  grep -q "^  1 .*full .*head_dim 16 .*heads 4/1 .*ffn 48 .*(16 dims, 2 rotate).*no attn_v.*out x0.75" "$TMP/out" &&
    grep -q "^  5 .*sliding .*head_dim 8 .*heads 4/2 .*ffn 96 .*kv of layer 3.*out x1.25" "$TMP/out" &&
    grep -q "^  6 .*full .*kv of layer 4" "$TMP/out" &&
    ok "$v: inspect shows the per-layer geometry, partial RoPE, K as V, KV sharing, output scales" ||
    bad "$v: inspect layer table: $(grep -E '^  [0-9]' "$TMP/out")"
  "$GEMMA" inspect -m "$M" --json >"$TMP/json" 2>"$TMP/err" && grep -q '"kv_source"' "$TMP/json" &&
    ok "$v: inspect --json" || bad "$v: inspect --json: $(head -c 300 "$TMP/err")"

  "$GEMMA" run -m "$M" -p "the cat" -n 24 --ignore-eos -t 2 >"$TMP/cached" 2>"$TMP/err" &&
    grep -q "generation: 24 tokens" "$TMP/err" && ok "$v: run (cached), past the window and the shared layers" ||
    bad "$v: run: $(head -c 300 "$TMP/err")"
  "$GEMMA" run -m "$M" -p "the cat" -n 24 --ignore-eos -t 1 --naive >"$TMP/naive" 2>"$TMP/err" &&
    ok "$v: run --naive" || bad "$v: run --naive: $(head -c 300 "$TMP/err")"
  cmp -s "$TMP/naive" "$TMP/cached" && ok "$v: naive == cached output" || bad "$v: naive and cached outputs differ"
  "$GEMMA" run -m "$M" -p "the cat the cat the cat" -n 24 --ignore-eos -t 2 >"$TMP/plain" 2>/dev/null
  "$GEMMA" run -m "$M" -p "the cat the cat the cat" -n 24 --ignore-eos -t 2 --lookup -v >"$TMP/lookup" 2>"$TMP/err" &&
    grep -q "speculative (lookup)" "$TMP/err" && cmp -s "$TMP/plain" "$TMP/lookup" &&
    ok "$v: run --lookup: the greedy output unchanged" || bad "$v: run --lookup: $(tail -c 300 "$TMP/err")"

  for i in $(seq 40); do printf 'the cat and the hat are on the mat of the sea and a tree. '; done >"$TMP/text.txt"
  "$GEMMA" perplexity -m "$M" -f "$TMP/text.txt" -c 48 --chunks 3 -t 2 >"$TMP/out" 2>"$TMP/err"
  rc=$?
  ppl=$(sed -n 's/.*Final estimate: PPL = \([0-9.]*\).*/\1/p' "$TMP/out" "$TMP/err" | head -1)
  [ "$rc" -eq 0 ] && [ -n "$ppl" ] && awk -v p="$ppl" 'BEGIN { exit !(p > 1 && p < 1e6) }' &&
    ok "$v: perplexity $ppl" || bad "$v: perplexity: rc $rc, $(head -c 300 "$TMP/err")"
done
M="$SRC/tests/data/gemma4/gemma4-moe.gguf"
"$GEMMA" inspect -m "$M" >"$TMP/out" 2>"$TMP/err" &&
  grep -q "^  2 .*sliding .*head_dim 8 .*heads 4/2 .*ffn 64 .*kv own .*moe 4 experts top 2 width 16" "$TMP/out" &&
  grep -q "^  5 .*kv of layer 3 .*moe 4 experts top 2 width 16" "$TMP/out" &&
  ! grep -q "^  [0134] .*moe" "$TMP/out" && ! grep -q "^  6 .*moe" "$TMP/out" &&
  ok "gemma4-moe: inspect shows experts, top-k and expert width on layers 2 and 5 only" ||
  bad "gemma4-moe: inspect layer table: $(grep -E '^  [0-9]' "$TMP/out") $(head -c 300 "$TMP/err")"
"$GEMMA" inspect -m "$M" --json >"$TMP/json" 2>"$TMP/err" &&
  [ "$(grep -o '"n_experts":[[:space:]]*4' "$TMP/json" | wc -l)" -eq 2 ] &&
  [ "$(grep -o '"n_experts_used":[[:space:]]*2' "$TMP/json" | wc -l)" -eq 2 ] &&
  [ "$(grep -o '"expert_d_ff":[[:space:]]*16' "$TMP/json" | wc -l)" -eq 2 ] &&
  ok "gemma4-moe: inspect --json n_experts / n_experts_used / expert_d_ff" ||
  bad "gemma4-moe: inspect --json: $(head -c 300 "$TMP/err")"
exit $fail
