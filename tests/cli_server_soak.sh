#!/usr/bin/env bash
# `gemma serve`: tests/server/test_soak.py under CTest (see that file). The Python venv comes from
# scripts/test-venv.sh.
set -u
GEMMA=$1
SRC=$2
MODEL=${GEMMA_MODEL:-$SRC/models/gemma-3-270m-q4_k_m.gguf}
[ -f "$MODEL" ] || { echo "skip: no model at $MODEL"; exit 77; }
PY=$("$SRC/scripts/test-venv.sh") || { echo "FAIL cannot make the test venv"; exit 1; }
# under the sanitizers the server is several times slower: a shorter run (leaks and UB are what it checks)
[ -n "${GM_SANITIZER_BUILD:-}" ] && export GM_SOAK_SECONDS=${GM_SOAK_SECONDS:-45} GM_ABUSE_SECONDS=${GM_ABUSE_SECONDS:-30}
cd "$SRC/tests/server" && exec "$PY" test_soak.py "$GEMMA" "$MODEL"
