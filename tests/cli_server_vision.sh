#!/usr/bin/env bash
# `gemma serve --mmproj`: image_url parts through the official openai client, the prefix and encoder caches,
# file:// under --media-path only, bad images and misuse as 400s (tests/server/test_vision.py).
exec bash "$2/tests/server/run.sh" test_vision.py "$1" "$2" "$2/tests/data/vision/mmproj-640.gguf" "$2/tests/data/images"
