#!/usr/bin/env bash
# scripts/update-bit-fixtures.sh BUILD_DIR — rewrites tests/data/bits/<level>.txt, the hashes of every logit
# of the bit-fixture models (bench/logits_dump) at each ISA level this CPU runs. Run it only when a change is
# MEANT to change numbers (a new kernel, another reduction order), after checking accuracy (test_backend_ref,
# gemma perplexity); say so in the commit. A level this CPU lacks keeps its old file: when the change alters
# that level too, delete the file in the same commit (cli_bits.sh then skips that level until a machine with
# it regenerates the file).
set -eu
BUILD=${1:?usage: update-bit-fixtures.sh BUILD_DIR}
cd "$(dirname "$0")/.."
. scripts/bit-fixture-models.sh
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
"$BUILD/test_gemma3n" --write "$TMP/tiny-gemma3n.gguf" >/dev/null
models="$BIT_MODELS $TMP/tiny-gemma3n.gguf"
[ -f "$BIT_DEFAULT_MODEL" ] && models="$models $BIT_DEFAULT_MODEL"
for level in scalar avx2 avx512; do
  out=$(GEMMA_ISA=$level "$BUILD/logits_dump" -t 1 $models | sed "s#$TMP/##")
  if ! echo "$out" | awk -v l=$level '$2 != l { bad = 1 } END { exit bad }'; then
    echo "$level: not on this CPU, tests/data/bits/$level.txt left as it is"
    continue
  fi
  echo "$out" | awk '{ print $1, $3 }' > "tests/data/bits/$level.txt"
  echo "wrote tests/data/bits/$level.txt ($(wc -l < tests/data/bits/$level.txt) models)"
done
