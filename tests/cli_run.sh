#!/usr/bin/env bash
# tests/cli_run.sh — `gemma run` / `gemma chat` end to end: options, errors, streaming, naive vs
# cached, seeding, context limits, chat turns. Uses the committed tiny llama.cpp-written GGUF
# (tests/data/tiny/gemma3.gguf: 6 layers, window 8, a 300-token vocabulary with the chat tokens),
# and the default real model when present.
# usage: cli_run.sh <gemma binary> <source dir>
set -u
. "$2/tests/support/cli_common.sh"

# expect <name> <exit code> <stderr substring or ""> -- command...
expect() {
  local name=$1 code=$2 pat=$3
  shift 4
  "$@" >"$TMP/out" 2>"$TMP/err"
  local rc=$?
  if [ "$rc" -ne "$code" ]; then bad "$name: exit $rc, expected $code; stderr: $(head -c 400 "$TMP/err")"; return; fi
  if [ -n "$pat" ] && ! grep -q -- "$pat" "$TMP/err"; then bad "$name: stderr lacks '$pat': $(head -c 400 "$TMP/err")"; return; fi
  ok "$name"
}

expect "run --help" 0 "" -- "$GEMMA" run --help
grep -q -- "--top-p" "$TMP/out" || bad "run --help lists --top-p"
expect "chat --help" 0 "" -- "$GEMMA" chat --help
expect "no prompt" 2 "one of -p" -- "$GEMMA" run -m "$TINY"
expect "empty prompt" 2 "empty" -- "$GEMMA" run -m "$TINY" -p ""
expect "bad top-p" 2 "top_p" -- "$GEMMA" run -m "$TINY" -p "the" --top-p 2
expect "bad temperature" 2 "temperature" -- "$GEMMA" run -m "$TINY" -p "the" --temp -1
expect "bad -n" 2 "-n" -- "$GEMMA" run -m "$TINY" -p "the" -n abc
expect "unknown option" 2 "unknown option" -- "$GEMMA" run -m "$TINY" -p "the" --bogus
expect "missing model" 1 "nope.gguf" -- "$GEMMA" run -m "$TMP/nope.gguf" -p "the"
expect "missing prompt file" 1 "cannot read" -- "$GEMMA" run -m "$TINY" -f "$TMP/nope.txt"

expect "tiny run" 0 "generation: 12 tokens" -- "$GEMMA" run -m "$TINY" -p "the cat" -n 12 --ignore-eos -t 2
cp "$TMP/out" "$TMP/cached"
expect "tiny run --naive" 0 "(naive)" -- "$GEMMA" run -m "$TINY" -p "the cat" -n 12 --ignore-eos --naive -t 1
cmp -s "$TMP/out" "$TMP/cached" && ok "naive == cached output" || bad "naive and cached outputs differ"

expect "seeded 1" 0 "" -- "$GEMMA" run -m "$TINY" -p "the" -n 16 --ignore-eos --temp 1.2 --top-k 40 --seed 7 -t 1
cp "$TMP/out" "$TMP/s1"
expect "seeded 2" 0 "" -- "$GEMMA" run -m "$TINY" -p "the" -n 16 --ignore-eos --temp 1.2 --top-k 40 --seed 7 -t 2
cmp -s "$TMP/out" "$TMP/s1" && ok "same seed, same text across thread counts" || bad "seeded runs differ"

printf 'the the the the the the the the the the the the the the the the the the the the' >"$TMP/long.txt"
expect "prompt past the context" 1 "--truncate" -- "$GEMMA" run -m "$TINY" -f "$TMP/long.txt" -c 16 -n 4
expect "--truncate" 0 "truncated" -- "$GEMMA" run -m "$TINY" -f "$TMP/long.txt" -c 16 -n 4 --ignore-eos --truncate
# --truncate keeps <bos> in front of the last n-1 tokens (12 = 16 - room for 4; <bos> is id 2)
expect "--truncate keeps <bos>" 0 "<bos> and the last 11" -- "$GEMMA" run -m "$TINY" -f "$TMP/long.txt" -c 16 -n 4 --truncate -v
grep -q "prompt ids (12): 2 272 265 262 272" "$TMP/err" && ok "truncated prompt starts with <bos>" || bad "truncated ids: $(grep 'prompt ids' "$TMP/err")"
expect "--truncate --no-bos" 0 "(the last 12)" -- "$GEMMA" run -m "$TINY" -f "$TMP/long.txt" -c 16 -n 4 --truncate --no-bos -v
grep -q "prompt ids (12): 262 272 265 262" "$TMP/err" && ok "--no-bos: the last 12 tokens" || bad "--no-bos truncated ids: $(grep 'prompt ids' "$TMP/err")"
expect "--chat --truncate keeps <bos>" 0 "<bos> and the last" -- "$GEMMA" run -m "$TINY" -f "$TMP/long.txt" -c 16 -n 4 --chat --truncate -v
grep -q "prompt ids (12): 2 " "$TMP/err" && ok "--chat truncated prompt starts with <bos>" || bad "--chat truncated ids: $(grep 'prompt ids' "$TMP/err")"
expect "context fills up" 0 "context is full" -- "$GEMMA" run -m "$TINY" -p "the" -c 16 -n 40 --ignore-eos
expect "--chat" 0 "" -- "$GEMMA" run -m "$TINY" -p "hello" --chat -n 4

printf 'hello there\n/reset\nthe cat\n\n/exit\nnot read\n' >"$TMP/chat.in"
expect "chat" 0 "conversation cleared" -- sh -c "'$GEMMA' chat -m '$TINY' -n 6 -s 'be brief' <'$TMP/chat.in'"
[ "$(grep -c '' "$TMP/out")" -ge 2 ] && ok "chat printed two replies" || bad "chat output: $(cat "$TMP/out")"

printf 'hello there\nthe cat\n' >"$TMP/chat2.in"
expect "chat -v" 0 "reused" -- sh -c "'$GEMMA' chat -m '$TINY' -n 6 -v <'$TMP/chat2.in'"
reused=$(grep -o '([0-9]* reused' "$TMP/err" | tail -1 | tr -dc '0-9')
[ "${reused:-0}" -gt 0 ] && ok "second chat turn reuses the cache ($reused tokens)" || bad "second turn reused nothing: $(cat "$TMP/err")"

MODEL=$SRC/models/gemma-3-270m-q4_k_m.gguf
if [ -f "$MODEL" ]; then
  expect "real model run" 0 "prompt: 6 tokens" -- "$GEMMA" run -m "$MODEL" -p "The capital of France is" -n 8
  [ -s "$TMP/out" ] && ok "real model printed text" || bad "real model printed nothing"
  # opt-in packed Q5_0 copies (model/model.c): the same greedy text, prompt and decode
  cp "$TMP/out" "$TMP/real"
  expect "real model GEMMA_REPACK=1" 0 "" -- env GEMMA_REPACK=1 "$GEMMA" run -m "$MODEL" -p "The capital of France is" -n 8
  cmp -s "$TMP/out" "$TMP/real" && ok "packed Q5_0 copies: same text" || bad "GEMMA_REPACK=1 changed the text"
else
  echo "skip real model (missing $MODEL)"
fi
exit $fail
