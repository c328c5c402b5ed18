#!/usr/bin/env bash
# `gemma serve` with OpenAI tools: each Gemma family's tool format (the default model for Gemma 3's, tiny
# models with the right special tokens for Gemma 4's and FunctionGemma's), tool_choice, streamed calls
# reassembled by the openai client, the history round trip, errors (tests/server/test_tools.py).
exec bash "$2/tests/server/run.sh" test_tools.py "$1" "$2" "$2/tests/data/tools"
