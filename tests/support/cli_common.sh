# tests/support/cli_common.sh — the preamble of the CLI shell tests, sourced after `set -u`:
# GEMMA (the binary) and SRC (the source dir) from the arguments, the committed tiny fixtures, a
# temporary folder removed on exit, and ok / bad reporting into $fail.
GEMMA=$1
SRC=$2
TINY=$SRC/tests/data/tiny/gemma3.gguf
TOK=$SRC/tests/data/tokenizer/tiny/hf_json
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
fail=0
ok() { echo "ok   $1"; }
bad() { echo "FAIL $1"; fail=1; }
