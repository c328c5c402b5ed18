#!/usr/bin/env bash
# `gemma serve` end to end: the official openai client and raw HTTP against a server started on
# loopback by the test (tests/server/test_api.py). The Python venv comes from scripts/test-venv.sh.
set -u
GEMMA=$1
SRC=$2
MODEL=${GEMMA_MODEL:-$SRC/models/gemma-3-270m-q4_k_m.gguf}
[ -f "$MODEL" ] || { echo "skip: no model at $MODEL"; exit 77; }
PY=$("$SRC/scripts/test-venv.sh") || { echo "FAIL cannot make the test venv"; exit 1; }
cd "$SRC/tests/server" && exec "$PY" test_api.py "$GEMMA" "$MODEL"
