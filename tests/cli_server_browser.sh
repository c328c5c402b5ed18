#!/usr/bin/env bash
# `gemma serve`: tests/server/test_browser.py under CTest (see that file). The Python venv comes from
# scripts/test-venv.sh.
set -u
GEMMA=$1
SRC=$2
MODEL=${GEMMA_MODEL:-$SRC/models/gemma-3-270m-q4_k_m.gguf}
[ -f "$MODEL" ] || { echo "skip: no model at $MODEL"; exit 77; }
PY=$("$SRC/scripts/test-venv.sh") || { echo "FAIL cannot make the test venv"; exit 1; }
command -v chromium >/dev/null && command -v chromedriver >/dev/null || { echo "FAIL chromium / chromedriver missing (scripts/install-deps.sh installs them)"; exit 1; }
SHOT=$(dirname "$GEMMA")/chat-page.png
cd "$SRC/tests/server" && "$PY" test_browser.py "$GEMMA" "$MODEL" "$SHOT" && echo "screenshot: $SHOT"
