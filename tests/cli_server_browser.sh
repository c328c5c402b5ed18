#!/usr/bin/env bash
# `gemma serve`: tests/server/test_browser.py under CTest (see that file): the chat page in headless Chromium,
# text only and with --mmproj (the tiny random encoder for the default model) for attached images.
command -v chromium >/dev/null && command -v chromedriver >/dev/null || { echo "FAIL chromium / chromedriver missing (scripts/install-deps.sh installs them)"; exit 1; }
exec bash "$2/tests/server/run.sh" test_browser.py "$1" "$2" "$(dirname "$1")/chat-page.png" \
    "$2/tests/data/vision/mmproj-640.gguf" "$2/tests/data/images"
