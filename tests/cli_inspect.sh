#!/usr/bin/env bash
# tests/cli_inspect.sh GEMMA_BIN SOURCE_DIR — `gemma inspect` on the default model (skipped when it
# is not installed) and on bad input. Exit 0 pass, 1 fail, 77 skip.
set -u
bin=$1
src=$2
fail=0
check() { # description, command...
    local what=$1; shift
    if "$@"; then echo "ok   $what"; else echo "FAIL $what"; fail=1; fi
}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# Bad input: non-zero exit and a message naming the file, on stderr.
"$bin" inspect "$src/tests/data/bad/bad_magic.gguf" >"$tmp/out" 2>"$tmp/err"
rc=$?
check "bad file exits non-zero" test "$rc" -ne 0
check "bad file message" grep -q "^gemma inspect: .*bad_magic.gguf" "$tmp/err"
"$bin" inspect /nonexistent/model.gguf >"$tmp/out" 2>"$tmp/err"
check "missing file exits 1" test $? -eq 1
check "missing file message" grep -q "gemma inspect: /nonexistent/model.gguf" "$tmp/err"
"$bin" inspect "$src/tests/data/bad/arch_llama.gguf" >"$tmp/out" 2>"$tmp/err"
check "unsupported architecture exits 1" test $? -eq 1
check "unsupported architecture message" grep -q "architecture llama is not supported yet" "$tmp/err"
"$bin" inspect --bogus >"$tmp/out" 2>"$tmp/err"
check "unknown option exits non-zero" test $? -ne 0

model=$("$bin" inspect --help | sed -n 's/.*(default: \(.*\))$/\1/p')
if [ -z "${GEMMA_MODEL:-}" ] && [ ! -f "$model" ]; then
    echo "default model not installed ($model): skipping the model checks"
    [ $fail -eq 0 ] && exit 77 || exit 1
fi

"$bin" inspect >"$tmp/out" 2>"$tmp/err"
check "default model exits 0" test $? -eq 0
check "18 layers" grep -Eq "^  n_layers +18$" "$tmp/out"
check "architecture gemma3" grep -q "^architecture: gemma3" "$tmp/out"
check "token_embd is Q8_0" grep -Eq "^  token_embd.weight +Q8_0 +\[640, 262144\]" "$tmp/out"
for t in Q5_0 Q4_K Q6_K F32; do
    check "has $t tensors" grep -Eq "^  blk\.[0-9]+\.[a-z_]+\.weight +$t " "$tmp/out"
done
check "236 tensors" grep -Eq "^  tensors +236$" "$tmp/out"
check "vocab 262144" grep -Eq "^  vocab size +262144$" "$tmp/out"
check "layer table: 0-4 sliding, window 512" grep -Eq "^  0-4 +sliding +window 512 +head_dim 256 +heads 4/1" "$tmp/out"
check "layer table: 17 full" grep -Eq "^  17 +full +window 0 " "$tmp/out"

"$bin" inspect --json >"$tmp/json" 2>"$tmp/err"
check "--json exits 0" test $? -eq 0
if command -v python3 >/dev/null; then
    check "--json is valid JSON" python3 -m json.tool "$tmp/json" >/dev/null
fi
check "--json has n_layers 18" grep -Eq '"n_layers":[[:space:]]*18' "$tmp/json"
check "--json has by_type Q6_K" grep -Eq '"Q6_K":[[:space:]]*9' "$tmp/json"
check "--json has the layer runs" grep -Eq '"kind":[[:space:]]*"sliding"' "$tmp/json"
"$bin" inspect --mtp --json >/dev/null 2>&1
check "--mtp accepted" test $? -eq 0
exit $fail
