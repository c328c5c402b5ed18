#!/usr/bin/env bash
# Anthropic's Messages API on `gemma serve` (/v1/messages, /v1/messages/count_tokens) through the official
# anthropic client and raw HTTP; image blocks on a server with the tiny test encoder, the tool
# tokens of Gemma 4 and FunctionGemma on tiny random models (tests/server/test_anthropic.py).
exec bash "$2/tests/server/run.sh" test_anthropic.py "$1" "$2" "$2/tests/data/vision/mmproj-640.gguf" "$2/tests/data/tools"
