#!/usr/bin/env bash
# tests/api/check-exports.sh — libgemma exports exactly its API: every function the public headers declare with
# GEMMA_API, and nothing else (no internal helper, no unprefixed name that could collide with another library's,
# as gguf_find_tensor once did with ggml's), from both the shared library and the static archive.
# usage: check-exports.sh SOURCE_DIR BUILD_DIR [NM]
set -u
src=$1 build=$2 nm=${3:-nm}
want=$(sed -n 's/^GEMMA_API [^(]*[ *]\([a-z_0-9]*\)(.*/\1/p' "$src"/include/gemma*.h | sort -u)
fail=0
compare() { # what, symbols
  local extra missing
  extra=$(comm -13 <(echo "$want") <(echo "$2"))
  missing=$(comm -23 <(echo "$want") <(echo "$2"))
  if [ -n "$extra" ] || [ -n "$missing" ]; then
    echo "FAIL $1: exported but not in the API: $(echo $extra | head -c 600)"
    echo "     declared but not exported: $(echo $missing | head -c 600)"
    fail=1
  else
    echo "ok   $1 exports the $(echo "$want" | wc -l) API functions and nothing else"
  fi
}
[ "$(echo "$want" | wc -l)" -gt 100 ] || { echo "FAIL cannot read the API from $src/include"; exit 1; }
compare libgemma.so "$("$nm" -D --defined-only "$build/libgemma.so" | awk '$2 ~ /^[TDBRVWGS]$/ { print $3 }' | sort -u)"
compare libgemma.a "$("$nm" -g --defined-only "$build/libgemma.a" 2>/dev/null | awk 'NF == 3 && $2 ~ /^[TDBRVWGS]$/ { print $3 }' | sort -u)"
exit $fail
