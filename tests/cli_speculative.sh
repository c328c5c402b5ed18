#!/usr/bin/env bash
# tests/cli_speculative.sh — `gemma run` / `gemma chat` with --lookup, --draft-model, --mtp, --draft-max: the
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
  for flag in --lookup --draft-model --mtp --eagle3 --draft-max; do
    grep -q -- "$flag" "$TMP/help" && ok "$cmd --help lists $flag" || bad "$cmd --help lacks $flag"
  done
done

expect "--lookup with --draft-model" 2 "give one" -- "$GEMMA" run -m "$TINY" -p "the" --lookup --draft-model "$TINY"
expect "--lookup with --mtp" 2 "give one" -- "$GEMMA" run -m "$TINY" -p "the" --lookup --mtp "$TINY"
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

# Gemma 4's MTP assistant (tests/data/gemma4: a tiny target and its assistant): the same greedy text, the counters,
# the refusals; `gemma serve --mtp`: the request's drafts in usage and timings, the same text as without.
G4=$SRC/tests/data/gemma4/gemma4-dense.gguf
MTP=$SRC/tests/data/gemma4/gemma4-mtp.gguf
expect "g4 plain" 0 "generation: 30 tokens" -- "$GEMMA" run -m "$G4" -p "the cat" -n 30 --ignore-eos -t 2
cp "$TMP/out" "$TMP/g4plain"
expect "g4 --mtp" 0 "speculative (mtp assistant)" -- "$GEMMA" run -m "$G4" -p "the cat" -n 30 --ignore-eos -t 2 \
  --mtp "$MTP" --draft-max 3 -v
cmp -s "$TMP/out" "$TMP/g4plain" && ok "--mtp: same text" || bad "--mtp changed the greedy text"
grep -q "mtp assistant: [1-9][0-9]* forward calls" "$TMP/err" && ok "--mtp -v counts the assistant's calls" \
  || bad "--mtp -v: $(tail -2 "$TMP/err")"
expect "--mtp with another target" 1 "hidden states of 32" -- "$GEMMA" run -m "$TINY" -p "the" --mtp "$MTP"
expect "--mtp with a target file" 1 "not a drafter" -- "$GEMMA" run -m "$G4" -p "the" --mtp "$G4"
expect "an assistant alone" 1 "cannot run alone" -- "$GEMMA" run -m "$MTP" -p "the"

# EAGLE-3 heads (tests/data/eagle3): the same greedy text, the counters, the refusals
for h in eagle3-gemma4 eagle3-gemma4-d2t; do
  expect "g4 --eagle3 $h" 0 "speculative (eagle3 head)" -- "$GEMMA" run -m "$G4" -p "the cat" -n 30 --ignore-eos -t 2 \
    --eagle3 "$SRC/tests/data/eagle3/$h.gguf" --draft-max 3 -v
  cmp -s "$TMP/out" "$TMP/g4plain" && ok "--eagle3 $h: same text" || bad "--eagle3 $h changed the greedy text"
  grep -q "eagle3 head: [1-9][0-9]* forward calls" "$TMP/err" && ok "--eagle3 -v counts the head's calls" \
    || bad "--eagle3 -v: $(tail -2 "$TMP/err")"
done
expect "--eagle3 with --mtp" 2 "give one" -- "$GEMMA" run -m "$G4" -p "the" --mtp "$MTP" --eagle3 "$MTP"
expect "--eagle3 with another target" 1 "states of 32" -- "$GEMMA" run -m "$TINY" -p "the" \
  --eagle3 "$SRC/tests/data/eagle3/eagle3-gemma4.gguf"
expect "--eagle3 with an assistant file" 1 "not an EAGLE-3 head" -- "$GEMMA" run -m "$G4" -p "the" --eagle3 "$MTP"
expect "serve --eagle3" 2 "not served yet" -- "$GEMMA" serve -m "$G4" --eagle3 "$SRC/tests/data/eagle3/eagle3-gemma4.gguf"

serve_g4() { # $1: extra options; the port into $TMP/port
  "$GEMMA" serve -m "$G4" --port 0 -t 2 -c 128 $1 >"$TMP/srv.out" 2>"$TMP/srv.err" &
  SRV=$!
  for _ in $(seq 1 100); do
    grep -q "listening on" "$TMP/srv.err" 2>/dev/null && break
    sleep 0.1
  done
  grep -o "listening on http://[^ ]*:[0-9]*" "$TMP/srv.err" | grep -o "[0-9]*$" >"$TMP/port"
}
BODY='{"messages":[{"role":"user","content":"the cat"}],"max_tokens":24,"temperature":0}'
for opts in "" "--mtp $MTP --draft-max 3"; do
  serve_g4 "$opts"
  if [ -s "$TMP/port" ]; then
    curl -s -m 60 "http://127.0.0.1:$(cat "$TMP/port")/v1/chat/completions" -H 'Content-Type: application/json' \
      -d "$BODY" >"$TMP/resp${opts:+.mtp}"
  else
    bad "serve $opts did not start: $(head -c 300 "$TMP/srv.err")"
  fi
  kill "$SRV" 2>/dev/null; wait "$SRV" 2>/dev/null
done
python3 - "$TMP/resp" "$TMP/resp.mtp" <<'PY' && ok "serve --mtp: same text, drafts in usage and timings" || bad "serve --mtp: $(head -c 400 "$TMP/resp.mtp")"
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:3])
assert a["choices"][0]["message"]["content"] == b["choices"][0]["message"]["content"], "text differs"
t, d = b["timings"], b["usage"]["completion_tokens_details"]
assert t["draft_n"] > 0 and 0 <= t["draft_n_accepted"] <= t["draft_n"], t
assert d["accepted_prediction_tokens"] == t["draft_n_accepted"], d
assert d["rejected_prediction_tokens"] == t["draft_n"] - t["draft_n_accepted"], d
assert "timings" not in a, "a request without drafts has no timings"
PY
exit $fail
