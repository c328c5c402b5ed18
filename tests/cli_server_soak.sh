#!/usr/bin/env bash
# `gemma serve`: tests/server/test_soak.py under CTest (8 streams, then 64 clients of mixed abuse).
# Under the sanitizers the server is several times slower: shorter runs (leaks and UB are what they check).
[ -n "${GM_SANITIZER_BUILD:-}" ] && export GM_SOAK_SECONDS=${GM_SOAK_SECONDS:-45} GM_ABUSE_SECONDS=${GM_ABUSE_SECONDS:-30}
exec bash "$2/tests/server/run.sh" test_soak.py "$1" "$2"
