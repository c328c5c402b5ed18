#!/usr/bin/env bash
# tests/cli_args.sh — bad command-line input users trip on: every case gets a clear message on
# stderr and a non-zero status (2 for a bad option value, 1 for a file or model that does not
# work), never a crash, a hang or garbage output; plus the edge values that must keep working
# (a huge -n stops at the context, a tiny temperature is greedy). Uses the committed tiny GGUF and
# tokenizer folder.
# usage: cli_args.sh <gemma binary> <source dir>
set -u
. "$2/tests/support/cli_common.sh"

# expect <name> <exit code> <stderr substring or ""> -- command...   (stdin: /dev/null, 60 s cap)
expect() {
  local name=$1 code=$2 pat=$3
  shift 4
  timeout 60 "$@" >"$TMP/out" 2>"$TMP/err" </dev/null
  local rc=$?
  if [ "$rc" -ne "$code" ]; then bad "$name: exit $rc, expected $code; stderr: $(head -c 400 "$TMP/err")"; return; fi
  if [ -n "$pat" ] && ! grep -q -- "$pat" "$TMP/err"; then bad "$name: stderr lacks '$pat': $(head -c 400 "$TMP/err")"; return; fi
  ok "$name"
}
R=("$GEMMA" run -m "$TINY" -p "the cat")

# -n
expect "run -n -1" 2 "-n expects an integer" -- "${R[@]}" -n -1
expect "run -n past INT_MAX" 2 "-n expects an integer" -- "${R[@]}" -n 99999999999
expect "run -n INT_MAX stops at the context" 0 "context is full" -- "${R[@]}" -n 2147483647 -c 32 --ignore-eos
expect "run -n 0" 0 "generation: 0 tokens" -- "${R[@]}" -n 0
expect "chat -n -1" 2 "-n expects an integer" -- "$GEMMA" chat -m "$TINY" -n -1
# -t
expect "run -t 0" 2 "-t expects an integer in \[1," -- "${R[@]}" -t 0
expect "run -t -2" 2 "-t expects" -- "${R[@]}" -t -2
expect "run -t 1025" 2 "-t expects" -- "${R[@]}" -t 1025
expect "run -t x" 2 "-t expects" -- "${R[@]}" -t x
# -c
expect "run -c -3" 2 "-c expects" -- "${R[@]}" -c -3
expect "run -c 1" 2 "no room" -- "${R[@]}" -c 1
expect "chat -c 1" 2 "no room" -- "$GEMMA" chat -m "$TINY" -c 1
expect "run -c past the model's context" 1 "n_ctx 100000 must be in \[0, 128\]" -- "${R[@]}" -c 100000
expect "chat -c past the model's context" 1 "n_ctx 100000" -- "$GEMMA" chat -m "$TINY" -c 100000
expect "run -c 2 --truncate: <bos> only" 0 "prompt ids (1): 2$" -- "${R[@]}" -c 2 --truncate -v
# prompts
expect "run -p ''" 2 "the prompt is empty" -- "$GEMMA" run -m "$TINY" -p ""
: >"$TMP/empty.txt"
expect "run -f empty file" 2 "the prompt is empty" -- "$GEMMA" run -m "$TINY" -f "$TMP/empty.txt"
expect "run -f missing file" 1 "cannot read the prompt file $TMP/nope.txt: No such file" -- "$GEMMA" run -m "$TINY" -f "$TMP/nope.txt"
expect "run -f a folder" 1 "Is a directory" -- "$GEMMA" run -m "$TINY" -f "$TMP"
expect "run -p and -f" 2 "exactly one of" -- "$GEMMA" run -m "$TINY" -p the -f "$TMP/empty.txt"
expect "run -p without a value" 2 "-p needs a value" -- "$GEMMA" run -m "$TINY" -p
expect "run stray argument" 2 "unknown option 'extra'" -- "${R[@]}" extra
# models
expect "run -m ''" 1 "empty model path" -- "$GEMMA" run -m "" -p the
expect "run -m a folder without config.json" 1 "no config.json" -- "$GEMMA" run -m "$TMP" -p the
expect "run -m a text file" 1 "empty.txt" -- "$GEMMA" run -m "$TMP/empty.txt" -p the
# sampling values
expect "--temp inf" 2 "finite number" -- "${R[@]}" --temp inf
expect "--temp nan" 2 "finite number" -- "${R[@]}" --temp nan
expect "--temp 1e39 (overflows float)" 2 "finite number" -- "${R[@]}" --temp 1e39
expect "--temp -0.5" 2 "temperature" -- "${R[@]}" --temp -0.5
expect "--temp ''" 2 "finite number" -- "${R[@]}" --temp ""
expect "--top-p nan" 2 "finite number" -- "${R[@]}" --top-p nan
expect "--top-k -5" 2 "top_k" -- "${R[@]}" --top-k -5
expect "--repeat-penalty 0" 2 "repeat_penalty" -- "${R[@]}" --repeat-penalty 0
expect "--seed -1" 2 "--seed expects" -- "${R[@]}" --seed -1
expect "--seed past 2^64" 2 "--seed expects" -- "${R[@]}" --seed 99999999999999999999
expect "greedy" 0 "" -- "${R[@]}" -n 12 --ignore-eos
cp "$TMP/out" "$TMP/greedy"
for t in 1.2e-38 1e-45 1e-50; do
  expect "--temp $t" 0 "" -- "${R[@]}" -n 12 --ignore-eos --temp $t --top-k 40 --seed 5
  cmp -s "$TMP/out" "$TMP/greedy" && ok "--temp $t samples greedily" || bad "--temp $t: '$(cat "$TMP/out")' is not the greedy '$(cat "$TMP/greedy")'"
done
# the other commands
expect "tokenize -m without a value" 2 "usage" -- "$GEMMA" tokenize -m
expect "tokenize missing model" 1 "nope" -- "$GEMMA" tokenize -m "$TMP/nope" hello
expect "detokenize id past int32" 1 "not a token id" -- "$GEMMA" detokenize -m "$TOK" 99999999999
expect "detokenize garbage" 1 "not a token id" -- "$GEMMA" detokenize -m "$TOK" 12abc
expect "perplexity -f missing" 1 "No such file" -- "$GEMMA" perplexity -m "$TINY" -f "$TMP/nope.txt"
expect "perplexity -f a folder" 1 "Is a directory" -- "$GEMMA" perplexity -m "$TINY" -f "$TMP"
expect "perplexity -c 7" 2 "-c expects an integer in \[8, 1048576\], got '7'" -- "$GEMMA" perplexity -m "$TINY" -c 7
expect "perplexity -t 0" 2 "-t expects an integer in \[1, 1024\]" -- "$GEMMA" perplexity -m "$TINY" -t 0
expect "perplexity --chunks 0" 2 "--chunks expects" -- "$GEMMA" perplexity -m "$TINY" --chunks 0
expect "perplexity text shorter than a chunk" 1 "fewer than one chunk" -- "$GEMMA" perplexity -m "$TINY" -f "$TMP/empty.txt" -c 16
expect "perplexity -c past the model's context" 1 "n_ctx" -- "$GEMMA" perplexity -m "$TINY" -c 100000
expect "bench -t 0" 2 "-t expects a comma-separated list" -- "$GEMMA" bench -m "$TINY" -t 0
expect "bench -t ''" 2 "-t expects" -- "$GEMMA" bench -m "$TINY" -t ""
expect "bench -t ," 2 "-t expects" -- "$GEMMA" bench -m "$TINY" -t ,
expect "bench -p -1" 2 "-p expects an integer in \[0," -- "$GEMMA" bench -m "$TINY" -p -1
expect "bench -r 0" 2 "-r expects" -- "$GEMMA" bench -m "$TINY" -r 0
expect "bench past the model's context" 1 "n_ctx" -- "$GEMMA" bench -m "$TINY" -p 100000 -n 1 -r 1
expect "inspect missing file" 1 "No such file" -- "$GEMMA" inspect "$TMP/nope.gguf"
# one option table for every command (tools/cli_opts.c): the same messages and statuses everywhere
for c in run chat serve bench perplexity embed tokenize detokenize inspect; do
  expect "$c --help" 0 "" -- "$GEMMA" $c --help
  grep -q "^usage: gemma $c" "$TMP/out" && ok "$c --help: usage line" || bad "$c --help: $(head -c 200 "$TMP/out")"
  expect "$c unknown option" 2 "gemma $c: unknown option '--bogus'" -- "$GEMMA" $c --bogus
  grep -q "^usage: gemma $c" "$TMP/err" && ok "$c unknown option: usage line" || bad "$c unknown option: no usage line"
  expect "$c -m without a value" 2 "gemma $c: -m needs a value" -- "$GEMMA" $c -m
done
for c in run chat serve embed perplexity; do
  expect "$c -t x" 2 "gemma $c: -t expects an integer in \[1, 1024\], got 'x'" -- "$GEMMA" $c -m "$TINY" -t x
  expect "$c --threads 0" 2 "--threads expects" -- "$GEMMA" $c -m "$TINY" --threads 0
done
for c in run chat serve bench perplexity; do
  expect "$c --kv-type f8" 2 "gemma $c: --kv-type expects f32 or f16, got 'f8'" -- "$GEMMA" $c -m "$TINY" --kv-type f8
done
for c in run chat serve bench; do
  expect "$c --kv-mem 0" 2 "--kv-mem expects MiB in \[1, 1048576\]" -- "$GEMMA" $c -m "$TINY" --kv-mem 0
done
expect "run --backend gpu" 2 "--backend expects cpu or reference, got 'gpu'" -- "${R[@]}" --backend gpu
expect "serve --port 70000" 2 "--port expects an integer in \[0, 65535\]" -- "$GEMMA" serve -m "$TINY" --port 70000
expect "serve -c 8" 2 "-c expects an integer in \[16," -- "$GEMMA" serve -m "$TINY" -c 8
expect "serve --host ''" 2 "--host expects a non-empty value" -- "$GEMMA" serve -m "$TINY" --host ""
expect "serve --prefix-cache-scope all" 2 "expects one of global, key" -- "$GEMMA" serve -m "$TINY" --prefix-cache-scope all
expect "serve --api-key-file missing" 2 "--api-key-file" -- "$GEMMA" serve -m "$TINY" --api-key-file "$TMP/nope"
expect "serve --lookup --draft-model" 2 "give one" -- "$GEMMA" serve -m "$TINY" --lookup --draft-model "$TINY"
expect "serve --image (a run option)" 2 "unknown option '--image'" -- "$GEMMA" serve -m "$TINY" --image x.png
expect "run 17 images" 2 "--image expects a value, at most 16 times" -- "${R[@]}" $(for i in $(seq 17); do echo --image x.png; done)
expect "embed --task nope" 2 "--task expects one of query, document" -- "$GEMMA" embed -m "$TINY" --task nope -p x
expect "embed -c 0" 2 "-c expects an integer in \[1," -- "$GEMMA" embed -m "$TINY" -c 0 -p x
expect "inspect two paths" 2 "unexpected argument" -- "$GEMMA" inspect "$TINY" "$TINY"
expect "inspect -m and a path" 2 "unexpected argument" -- "$GEMMA" inspect -m "$TINY" "$TINY"
expect "tokenize -- --ids" 0 "" -- "$GEMMA" tokenize -m "$TOK" -- --ids
expect "unknown command" 2 "unknown command" -- "$GEMMA" bogus
expect "no command" 2 "usage" -- "$GEMMA"
exit $fail
