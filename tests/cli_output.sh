#!/usr/bin/env bash
# tests/cli_output.sh — every `gemma` command that writes to stdout notices a write error and fails
# (exit 1, one line on stderr) instead of exiting 0: a full device (/dev/full), a closed stdout
# (>&-), a pipe whose reader has gone (EPIPE: exit 1 quietly, and the generation stops at once).
# Uses the committed tiny GGUF; the real model only for the early-stop timing check.
# usage: cli_output.sh <gemma binary> <source dir>
set -u
. "$2/tests/support/cli_common.sh"
[ -w /dev/full ] || { echo "skip: no /dev/full"; exit 77; }

printf 'the cat sat on the mat. the dog ate the cat. ' >"$TMP/text.txt"
for i in 1 2 3 4 5 6; do cat "$TMP/text.txt"; done >"$TMP/text6.txt"

# each command once as it is (exit 0, prints something), then into /dev/full and into a closed stdout
cmds=(
  "run|run -m $TINY -p the -n 4 --ignore-eos"
  "chat|chat -m $TINY -n 4"
  "tokenize|tokenize -m $TOK hello world"
  "tokenize --pieces|tokenize -m $TOK --pieces hello world"
  "detokenize|detokenize -m $TOK 271 118 616 1234 443"
  "inspect|inspect $TINY"
  "inspect --json|inspect --json $TINY"
  "perplexity|perplexity -m $TINY -f $TMP/text6.txt -c 16 --chunks 2 -t 1"
  "bench --json|bench -m $TINY -p 8 -n 4 -r 1 -t 1 --json"
  "bench|bench -m $TINY -p 8 -n 4 -r 1 -t 1"
  "run --help|run --help"
  "help|--help"
)
for c in "${cmds[@]}"; do
  name=${c%%|*}
  read -r -a args <<<"${c#*|}"
  echo "hello" | "$GEMMA" "${args[@]}" >"$TMP/out" 2>"$TMP/err"
  rc=$?
  if [ $rc -ne 0 ] || [ ! -s "$TMP/out" ]; then bad "$name: exit $rc, $(wc -c <"$TMP/out") bytes out: $(head -c 300 "$TMP/err")"; continue; fi
  echo "hello" | "$GEMMA" "${args[@]}" >/dev/full 2>"$TMP/err"
  rc=$?
  if [ $rc -eq 1 ] && grep -q "cannot write the output" "$TMP/err" && [ "$(grep -c 'cannot write' "$TMP/err")" -eq 1 ]; then
    ok "$name > /dev/full"
  else bad "$name > /dev/full: exit $rc, stderr: $(head -c 300 "$TMP/err")"; fi
  echo "hello" | "$GEMMA" "${args[@]}" >&- 2>"$TMP/err"
  rc=$?
  if [ $rc -eq 1 ] && grep -q "cannot write the output: Bad file descriptor" "$TMP/err"; then
    ok "$name >&-"
  else bad "$name >&-: exit $rc, stderr: $(head -c 300 "$TMP/err")"; fi
done

# a pipe without a reader, made deterministic: open a FIFO read-write, then write-only, then drop
# the reading side; writes to fd 4 fail with EPIPE (SIGPIPE is ignored by gemma)
mkfifo "$TMP/fifo"
exec 3<>"$TMP/fifo" 4>"$TMP/fifo" 3<&-
"$GEMMA" run -m "$TINY" -p the -n 100 --ignore-eos >&4 2>"$TMP/err"
rc=$?
if [ $rc -eq 1 ] && ! grep -q "cannot write\|load:" "$TMP/err"; then ok "run into a dead pipe: exit 1, quietly"
else bad "run into a dead pipe: exit $rc, stderr: $(head -c 300 "$TMP/err")"; fi
"$GEMMA" tokenize -m "$TOK" hello >&4 2>"$TMP/err"
rc=$?
[ $rc -eq 1 ] && [ ! -s "$TMP/err" ] && ok "tokenize into a dead pipe: exit 1, quietly" || bad "tokenize into a dead pipe: exit $rc, stderr: $(head -c 300 "$TMP/err")"

# `| head -c 1`: no error spew whichever way the race goes
"$GEMMA" run -m "$TINY" -p the -n 100 --ignore-eos 2>"$TMP/err" | head -c 1 >/dev/null
grep -q "cannot write" "$TMP/err" && bad "| head: error spew: $(cat "$TMP/err")" || ok "| head: no error spew"

MODEL=$SRC/models/gemma-3-270m-q4_k_m.gguf
if [ -f "$MODEL" ]; then
  # 3000 tokens would take half a minute: a dead stdout must stop the generation at the first token
  start=$(date +%s)
  timeout 60 "$GEMMA" run -m "$MODEL" -p "Once upon a time" -n 3000 -c 4096 --ignore-eos >&4 2>"$TMP/err"
  rc=$?
  secs=$(( $(date +%s) - start ))
  [ $rc -eq 1 ] && [ $secs -le 10 ] && ok "real model: a dead pipe stops the generation (${secs}s)" ||
    bad "real model into a dead pipe: exit $rc after ${secs}s: $(head -c 300 "$TMP/err")"
else
  echo "skip real model (missing $MODEL)"
fi
exec 4>&-
exit $fail
