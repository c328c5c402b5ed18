#!/usr/bin/env bash
# The Python environment of the server tests: .venv-test/ (git-ignored) with the official `openai`,
# `anthropic` and `ollama` clients, `selenium` (drives Debian's chromium for the chat-page test) and
# `jsonschema` (the oracle of the structured-output tests). Made once; later runs only check it. Prints the
# venv's python on stdout.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=.venv-test
PY=$VENV/bin/python
# the server tests run in parallel under CTest: one of them makes the venv, the others wait for it
exec 9>"/tmp/gemma-test-venv.$(id -u).lock"
flock 9
# rfc3339-validator: without it jsonschema does not check the date-time / time formats (tests/grammar_check.py)
if ! "$PY" -c "import openai, anthropic, ollama, selenium, jsonschema, rfc3339_validator" >/dev/null 2>&1; then
  echo "making $VENV (openai, anthropic, ollama, selenium, jsonschema, rfc3339-validator from PyPI)" >&2
  [ -x "$PY" ] || python3 -m venv "$VENV" >&2
  "$PY" -m pip install -q --disable-pip-version-check "openai==2.8.1" "anthropic==2.17.0" "ollama==0.6.3" \
    "selenium==4.38.0" "jsonschema==4.26.0" "rfc3339-validator==0.1.4" >&2
fi
echo "$PWD/$PY"
