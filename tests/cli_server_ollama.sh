#!/usr/bin/env bash
# `gemma serve` speaking Ollama's native API: the official ollama client and raw HTTP (NDJSON streams, the
# model endpoints, options, format, tools, images with the test encoder, /api/embed on the tiny EmbeddingGemma)
# against the default model (tests/server/test_ollama.py).
exec bash "$2/tests/server/run.sh" test_ollama.py "$1" "$2" "$2"
