#!/usr/bin/env bash
# `gemma serve` under hostile traffic (tests/server/test_hardening.py): bounded work and memory per
# request, slow and idle connections, the Host check, forged turns, queue and shutdown behaviour,
# prefix-cache scopes. Uses loopback addresses 127.0.0.2-5 as other clients.
set -u
GEMMA=$1
SRC=$2
MODEL=${GEMMA_MODEL:-$SRC/models/gemma-3-270m-q4_k_m.gguf}
[ -f "$MODEL" ] || { echo "skip: no model at $MODEL"; exit 77; }
PY=$("$SRC/scripts/test-venv.sh") || { echo "FAIL cannot make the test venv"; exit 1; }
cd "$SRC/tests/server" && exec "$PY" test_hardening.py "$GEMMA" "$MODEL"
