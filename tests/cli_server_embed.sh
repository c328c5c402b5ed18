#!/usr/bin/env bash
# `gemma serve` with an embedding model: POST /v1/embeddings through the official openai client and raw
# HTTP (tests/server/test_embeddings.py), on the committed tiny EmbeddingGemma. The venv comes from
# scripts/test-venv.sh.
set -u
GEMMA=$1
SRC=$2
PY=$("$SRC/scripts/test-venv.sh") || { echo "FAIL cannot make the test venv"; exit 1; }
cd "$SRC/tests/server" && exec "$PY" test_embeddings.py "$GEMMA" "$SRC"
