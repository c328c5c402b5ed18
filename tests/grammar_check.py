#!/usr/bin/env python3
"""tests/grammar_check.py — the oracle side of tests/test_schema.c and tests/test_grammar.c (run by tests/cli_grammar.sh).

1. tests/data/grammar/schemas.json is right: every "valid" instance validates with the Python
   `jsonschema` package (Draft 2020-12, formats checked), every "invalid" one does not (or is not
   JSON), every "outside" one validates (the grammar refuses it anyway: it generates a subset).
2. Every output of the C random walks (JSON lines {"case": name, "text": ...} written by
   `test_grammar` when GM_GRAMMAR_WALKS names a file) parses as JSON and validates.
Exits 77 (skipped) without jsonschema."""
import json
import sys

try:
    import jsonschema
except ImportError:
    print("jsonschema not installed: skipped")
    sys.exit(77)


def validator(schema):
    if schema == {"type": "json_object"}:
        schema = {"type": "object"}
    cls = jsonschema.Draft202012Validator
    return cls(schema, format_checker=cls.FORMAT_CHECKER)


def main():
    cases = {c["name"]: c for c in json.load(open(sys.argv[1]))}
    bad = 0
    for c in cases.values():
        v = validator(c["schema"])
        for t in c["valid"] + c.get("outside", []):
            if not v.is_valid(json.loads(t)):
                print(f"{c['name']}: should validate: {t}")
                bad += 1
        for t in c["invalid"]:
            try:
                x = json.loads(t)
            except ValueError:
                continue
            if v.is_valid(x):
                print(f"{c['name']}: should not validate: {t}")
                bad += 1
    walks = 0
    if len(sys.argv) > 2:
        for line in open(sys.argv[2]):
            w = json.loads(line)
            walks += 1
            try:
                x = json.loads(w["text"])
            except ValueError as e:
                print(f"walk on {w['case']}: not JSON ({e}): {w['text']!r}")
                bad += 1
                continue
            errs = list(validator(cases[w["case"]]["schema"]).iter_errors(x))
            if errs:
                print(f"walk on {w['case']}: invalid ({errs[0].message}): {w['text']!r}")
                bad += 1
    print(f"{len(cases)} schemas, {walks} random walks, {bad} problems")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
