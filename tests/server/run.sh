#!/usr/bin/env bash
# tests/server/run.sh TEST.py GEMMA SRC [ARGS...] — what every tests/cli_server*.sh does: skip (77) without
# the default model, make the test venv (scripts/test-venv.sh), run TEST.py GEMMA MODEL ARGS... in tests/server.
set -u
TEST=$1
GEMMA=$2
SRC=$3
shift 3
MODEL=${GEMMA_MODEL:-$SRC/models/gemma-3-270m-q4_k_m.gguf}
[ -f "$MODEL" ] || { echo "skip: no model at $MODEL"; exit 77; }
PY=$("$SRC/scripts/test-venv.sh") || { echo "FAIL cannot make the test venv"; exit 1; }
cd "$SRC/tests/server" && exec "$PY" "$TEST" "$GEMMA" "$MODEL" "$@"
