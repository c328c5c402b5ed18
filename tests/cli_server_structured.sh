#!/usr/bin/env bash
# `gemma serve` structured output against oracles (tests/server/test_structured.py): 40 JSON schemas
# (tests/data/grammar/server_schemas.json) greedy, batched and sampled, validated with jsonschema; the openai
# client's chat.completions.parse with pydantic models; streaming; refused keywords; the `grammar` field with
# tests/data/grammar/{arithmetic,list}.gbnf checked by a Python parser of the same language.
exec bash "$2/tests/server/run.sh" test_structured.py "$1" "$2"
