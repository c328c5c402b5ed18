#!/usr/bin/env bash
# tests/cli_bits.sh — the CPU backend's logits are the bits committed in tests/data/bits/<level>.txt, at every
# ISA level this CPU runs (scalar, avx2, avx512), and the same at 1 and 2 threads. A refactoring must keep them
# (issue 24's rule); a change meant to alter numbers rewrites them with scripts/update-bit-fixtures.sh.
# usage: cli_bits.sh <gemma binary> <source dir>
set -u
. "$2/tests/support/cli_common.sh"
DUMP=$(dirname "$GEMMA")/logits_dump
cd "$2"
. scripts/bit-fixture-models.sh
"$(dirname "$GEMMA")/test_gemma3n" --write "$TMP/tiny-gemma3n.gguf" >/dev/null || { echo "FAIL cannot write the tiny gemma3n model"; exit 1; }
models="$BIT_MODELS $TMP/tiny-gemma3n.gguf"
if [ -n "${GM_SANITIZER_BUILD:-}" ]; then
  # the fixtures are the release build's bits; here: memory errors on every path, and thread invariance
  one=$("$DUMP" -t 1 $models) && two=$("$DUMP" -t 2 $models) && [ "$one" = "$two" ] &&
    ok "sanitizer build: logits_dump runs, 1 and 2 threads agree" || bad "sanitizer build: logits_dump"
  exit $fail
fi
[ -f "$BIT_DEFAULT_MODEL" ] && models="$models $BIT_DEFAULT_MODEL" || echo "  (no default model: its line is not checked)"
checked=0
for level in scalar avx2 avx512; do
  fixture=tests/data/bits/$level.txt
  [ -f "$fixture" ] || { echo "  $level: no fixture, skipped"; continue; }
  one=$(GEMMA_ISA=$level "$DUMP" -t 1 $models 2>"$TMP/err") || { bad "$level: logits_dump failed: $(head -c 300 "$TMP/err")"; continue; }
  if echo "$one" | awk -v l=$level '$2 != l { bad = 1 } END { exit !bad }'; then
    echo "  $level: not on this CPU, skipped"
    continue
  fi
  two=$(GEMMA_ISA=$level "$DUMP" -t 2 $models 2>/dev/null)
  [ "$one" = "$two" ] && ok "$level: 1 and 2 threads give the same bits" || bad "$level: 1 and 2 threads differ"
  got=$(echo "$one" | awk '{ print $1, $3 }' | sed "s#$TMP/##")
  want=$(cat "$fixture")
  [ -f "$BIT_DEFAULT_MODEL" ] || want=$(echo "$want" | grep -v "$BIT_DEFAULT_MODEL")
  if [ "$got" = "$want" ]; then
    ok "$level: every model's logits are the committed bits"
  else
    bad "$level: logits differ from $fixture (if the change is meant to alter numbers: scripts/update-bit-fixtures.sh build):
$(diff <(echo "$want") <(echo "$got"))"
  fi
  checked=$((checked + 1))
done
[ $checked -gt 0 ] || { echo "no ISA level checked"; exit 77; }
exit $fail
