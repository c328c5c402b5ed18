#!/usr/bin/env bash
# tests/cli_speculative.sh — `gemma run` / `gemma chat` with --lookup, --draft-model, --draft-max: the
# help documents them, greedy output is byte-identical to the output without them (the reference),
# -v reports the counters, and the bad combinations are refused; under --grammar-file / --json-schema /
# --json the text is the same with speculation as without. Tiny committed GGUF; the default
# model, when present, for a copy-heavy prompt (acceptances asserted) and the vocabulary check.
# usage: cli_speculative.sh <gemma binary> <source dir>
set -u
. "$2/tests/support/cli_common.sh"

expect() {
  local name=$1 code=$2 pat=$3
  shift 4
  "$@" >"$TMP/out" 2>"$TMP/err"
  local rc=$?
  if [ "$rc" -ne "$code" ]; then bad "$name: exit $rc, expected $code; stderr: $(head -c 400 "$TMP/err")"; return; fi
  if [ -n "$pat" ] && ! grep -q -- "$pat" "$TMP/err"; then bad "$name: stderr lacks '$pat': $(head -c 400 "$TMP/err")"; return; fi
  ok "$name"
}

for cmd in run chat; do
  "$GEMMA" $cmd --help >"$TMP/help" 2>&1
  for flag in --lookup --draft-model --draft-max; do
    grep -q -- "$flag" "$TMP/help" && ok "$cmd --help lists $flag" || bad "$cmd --help lacks $flag"
  done
done

expect "--lookup with --draft-model" 2 "give one" -- "$GEMMA" run -m "$TINY" -p "the" --lookup --draft-model "$TINY"
expect "--draft-max alone" 2 "needs --lookup" -- "$GEMMA" run -m "$TINY" -p "the" --draft-max 4
expect "--draft-max 0" 2 "--draft-max" -- "$GEMMA" run -m "$TINY" -p "the" --lookup --draft-max 0
expect "--draft-max 33" 2 "--draft-max" -- "$GEMMA" run -m "$TINY" -p "the" --lookup --draft-max 33
expect "--naive --lookup" 2 "naive" -- "$GEMMA" run -m "$TINY" -p "the" --lookup --naive
expect "missing draft model" 1 "nope.gguf" -- "$GEMMA" run -m "$TINY" -p "the" --draft-model "$TMP/nope.gguf"

P="the cat the cat the cat the cat the"
expect "tiny plain" 0 "generation: 40 tokens" -- "$GEMMA" run -m "$TINY" -p "$P" -n 40 --ignore-eos -t 2
cp "$TMP/out" "$TMP/plain"
expect "tiny --lookup" 0 "speculative (lookup)" -- "$GEMMA" run -m "$TINY" -p "$P" -n 40 --ignore-eos -t 2 --lookup -v
cmp -s "$TMP/out" "$TMP/plain" && ok "--lookup: same text" || bad "--lookup changed the greedy text"
expect "tiny --draft-model" 0 "speculative (draft model)" -- \
  "$GEMMA" run -m "$TINY" -p "$P" -n 40 --ignore-eos -t 2 --draft-model "$TINY" --draft-max 3 -v
cmp -s "$TMP/out" "$TMP/plain" && ok "--draft-model: same text" || bad "--draft-model changed the greedy text"
grep -q "accepted (100.0%)" "$TMP/err" && ok "the model as its own draft: every proposal accepted" \
  || bad "own draft: $(grep speculative "$TMP/err")"
# under a grammar: the tokens are chosen under it with speculation too, so the text is the same
printf 'root ::= [a-z ]+ "."\n' >"$TMP/g.gbnf"
expect "tiny grammar plain" 0 "" -- "$GEMMA" run -m "$TINY" -p "$P" -n 40 -t 2 --grammar-file "$TMP/g.gbnf"
cp "$TMP/out" "$TMP/gplain"
expect "tiny grammar --lookup" 0 "speculative (lookup)" -- \
  "$GEMMA" run -m "$TINY" -p "$P" -n 40 -t 2 --grammar-file "$TMP/g.gbnf" --lookup -v
cmp -s "$TMP/out" "$TMP/gplain" && ok "--grammar-file --lookup: same text" || bad "--lookup changed the text under a grammar"
expect "tiny grammar --draft-model" 0 "speculative (draft model)" -- \
  "$GEMMA" run -m "$TINY" -p "$P" -n 40 -t 2 --grammar-file "$TMP/g.gbnf" --draft-model "$TINY" --draft-max 3 -v
cmp -s "$TMP/out" "$TMP/gplain" && ok "--grammar-file --draft-model: same text" \
  || bad "--draft-model changed the text under a grammar"
printf 'hello there\n/exit\n' | "$GEMMA" chat -m "$TINY" -n 8 -t 1 --lookup -v >"$TMP/out" 2>"$TMP/err" \
  && grep -q "speculative (lookup)" "$TMP/err" && ok "chat --lookup" || bad "chat --lookup: $(head -c 300 "$TMP/err")"

MODEL=$SRC/models/gemma-3-270m-q4_k_m.gguf
if [ -r "$MODEL" ]; then
  expect "vocabulary mismatch" 1 "vocabulary" -- "$GEMMA" run -m "$TINY" -p "the" --draft-model "$MODEL"
  Q="Copy the list exactly. List: red, green, blue, cyan, magenta, yellow, black, white. Copy: red, green,"
  expect "real plain" 0 "" -- "$GEMMA" run -m "$MODEL" -p "$Q" -n 24 -t 2
  cp "$TMP/out" "$TMP/plain"
  expect "real --lookup" 0 "speculative (lookup)" -- "$GEMMA" run -m "$MODEL" -p "$Q" -n 24 -t 2 --lookup -v
  cmp -s "$TMP/out" "$TMP/plain" && ok "real --lookup: same text" || bad "real --lookup changed the greedy text"
  acc=$(sed -n 's/.* \([0-9]*\) accepted .*/\1/p' "$TMP/err")
  [ "${acc:-0}" -gt 5 ] && ok "real --lookup accepted $acc proposals" || bad "real --lookup accepted ${acc:-0}"
  # a JSON schema and --json: the same text with --lookup (the hobbies array loops: proposals accepted)
  printf '%s' '{"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"},
    "hobbies": {"type": "array", "items": {"type": "string"}}}, "required": ["name", "age", "hobbies"]}' >"$TMP/s.json"
  J="Extract the person as JSON. Text: Alice Smith is 34; she likes chess, hiking and painting. JSON:"
  for c in "--json-schema $TMP/s.json" "--json"; do
    expect "real $c" 0 "" -- "$GEMMA" run -m "$MODEL" -p "$J" -n 40 -t 2 $c
    cp "$TMP/out" "$TMP/jplain"
    expect "real $c --lookup" 0 "speculative (lookup)" -- "$GEMMA" run -m "$MODEL" -p "$J" -n 40 -t 2 $c --lookup -v
    cmp -s "$TMP/out" "$TMP/jplain" && ok "real $c --lookup: same text" || bad "real $c --lookup changed the text"
  done
else
  echo "skip real model (missing $MODEL)"
fi
exit $fail
