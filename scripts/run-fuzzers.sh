#!/usr/bin/env bash
# scripts/run-fuzzers.sh FUZZ_BUILD_DIR SECONDS — runs every fuzz_* libFuzzer binary in the build
# folder for SECONDS each, on a scratch copy of its seed corpus fuzz/corpus/<name> (the committed
# seeds are never modified), with the dictionary fuzz/<name>.dict when there is one. Exits non-zero
# if any harness reports a finding (crash, sanitizer error, leak, timeout, out-of-memory); the
# reproducer is kept in FUZZ_BUILD_DIR/findings/.
set -u
build=${1:?usage: run-fuzzers.sh FUZZ_BUILD_DIR SECONDS}
secs=${2:-60}
root=$(cd "$(dirname "$0")/.." && pwd)
max_len=${FUZZ_MAX_LEN:-65536}
findings="$build/findings"
mkdir -p "$findings"
shopt -s nullglob
bins=("$build"/fuzz_*)
if [ ${#bins[@]} -eq 0 ]; then
    echo "run-fuzzers: no fuzz_* binaries in $build" >&2
    exit 1
fi
status=0
for bin in "${bins[@]}"; do
    [ -x "$bin" ] && [ -f "$bin" ] || continue
    name=$(basename "$bin")
    work=$(mktemp -d)
    [ -d "$root/fuzz/corpus/$name" ] && cp -r "$root/fuzz/corpus/$name/." "$work/"
    dict=
    [ -f "$root/fuzz/$name.dict" ] && dict=-dict="$root/fuzz/$name.dict"
    echo "== $name: ${secs}s, max_len $max_len, $(ls "$work" | wc -l) seeds${dict:+, dictionary}"
    "$bin" -max_total_time="$secs" -max_len="$max_len" -timeout=10 -rss_limit_mb=2048 ${dict:+"$dict"} \
        -artifact_prefix="$findings/$name-" -print_final_stats=1 "$work" >"$build/$name.log" 2>&1
    rc=$?
    tail -n 12 "$build/$name.log"
    if [ $rc -ne 0 ]; then
        echo "run-fuzzers: $name FAILED (exit $rc); log $build/$name.log, reproducers in $findings/" >&2
        status=1
    fi
    rm -rf "$work"
done
exit $status
