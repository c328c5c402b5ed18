#!/bin/sh
# Builds mtmd_ref (bench/vision-ref/mtmd_ref.cpp) against a llama.cpp build: its sources for the headers, its
# build folder for libllama / libmtmd / libggml. Not part of the CMake build or CI.
#
#   bench/vision-ref/build.sh LLAMA_CPP_SRC LLAMA_CPP_BUILD [OUT=build/mtmd_ref]
#   e.g. bench/vision-ref/build.sh /tmp/lcp/llama_cpp_python-0.3.36/vendor/llama.cpp /tmp/lcp/build
set -eu
src=${1:?llama.cpp source folder}
bld=${2:?llama.cpp build folder}
out=${3:-build/mtmd_ref}
here=$(dirname "$0")
libdir=$(dirname "$(find "$bld" -name 'libmtmd.so' | head -n 1)")
[ -f "$libdir/libmtmd.so" ] || { echo "no libmtmd.so under $bld" >&2; exit 1; }
mkdir -p "$(dirname "$out")"
c++ -std=c++17 -O2 -Wall -Wextra -Werror \
    -I"$src/include" -I"$src/ggml/include" -I"$src/tools/mtmd" \
    "$here/mtmd_ref.cpp" -o "$out" \
    -L"$libdir" -Wl,-rpath,"$libdir" -lmtmd -lllama -lggml -lggml-base
echo "$out"
