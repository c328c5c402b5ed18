#!/usr/bin/env bash
# tests/cli_grammar.sh — the Python oracle for the grammar engine (tests/grammar_check.py): the
# schema cases of tests/data/grammar/schemas.json agree with the `jsonschema` package, and random
# walks through the default model's vocabulary under every schema (test_grammar with
# GM_GRAMMAR_ONLY_WALKS) end in JSON that validates. jsonschema comes from the test venv (scripts/test-venv.sh).
# usage: cli_grammar.sh <gemma binary> <source dir>
set -u
. "$2/tests/support/cli_common.sh"
BUILD=$(dirname "$GEMMA")
PY=$(bash "$SRC/scripts/test-venv.sh") || { echo "FAIL cannot make the test venv (scripts/test-venv.sh)"; exit 1; }
walks=
if [ -f "$SRC/models/gemma-3-270m-q4_k_m.gguf" ]; then
  if GM_GRAMMAR_ONLY_WALKS=1 GM_GRAMMAR_ALL_WALKS=2 GM_GRAMMAR_WALKS="$TMP/walks.jsonl" "$BUILD/test_grammar" >"$TMP/log" 2>&1; then
    ok "random walks under every schema"
    walks=$TMP/walks.jsonl
  else
    bad "random walks: $(grep -v '^ok' "$TMP/log" | head -c 600)"
  fi
fi
if "$PY" "$SRC/tests/grammar_check.py" "$SRC/tests/data/grammar/schemas.json" $walks >"$TMP/py" 2>&1; then
  ok "jsonschema agrees: $(tail -n 1 "$TMP/py")"
else
  bad "jsonschema: $(head -c 1500 "$TMP/py")"
fi
exit $fail
