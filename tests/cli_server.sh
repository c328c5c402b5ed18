#!/usr/bin/env bash
# `gemma serve` end to end: the official openai client and raw HTTP against a server started on
# loopback by the test (tests/server/test_api.py).
exec bash "$2/tests/server/run.sh" test_api.py "$1" "$2"
