#!/usr/bin/env bash
# `gemma serve` speaking OpenAI Responses (/v1/responses, input_tokens, /v1/responses/{id}) to the official
# openai client: shapes field by field, the streamed event sequence, tools round trip, responses.parse,
# previous_response_id and its store, greedy equality with /v1/chat/completions, images, errors
# (tests/server/test_responses.py).
exec bash "$2/tests/server/run.sh" test_responses.py "$1" "$2" "$2/tests/data/vision/mmproj-640.gguf" "$2/tests/data/tools"
