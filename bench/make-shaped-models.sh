#!/usr/bin/env bash
# bench/make-shaped-models.sh OUT_DIR [1b] [4b] [12b] — Gemma 3 files of real sizes with random weights, for speed
# figures on the shapes people run (issue 28): OUT_DIR/g3-<size>-q4_k_m.gguf, quantized by llama.cpp's own tool
# as users' Q4_K_M downloads are (its 1152-wide rows fall back to Q5_0 / Q8_0; 2560-wide ones stay Q4_K / Q6_K).
# The F16 intermediate (1B 2.0 GB, 4B 7.8 GB, 12B ~24 GB) is deleted after quantizing; keep OUT_DIR outside the
# repository (never commit these). Needs: ../shared/tools/make-shaped-model.py, numpy and gguf-py (e.g. the one in
# llama.cpp's tree: PYTHONPATH=.../vendor/llama.cpp/gguf-py), and llama-quantize ($LLAMA_QUANTIZE, or
# /tmp/lcp/build/bin/llama-quantize as ../shared/docs/machine.md builds it). Text from these files is noise: use
# them for tokens/s, first-token and memory figures only (bench/compare-llama-cpp -m, bench/serve-load --model).
# Measured on 2 Zen 4 cores: 1B ~40 s, 4B ~5 min.
set -euo pipefail
out=${1:?usage: make-shaped-models.sh OUT_DIR [1b] [4b] [12b]}
shift
sizes=${*:-1b 4b}
root=$(cd "$(dirname "$0")/.." && pwd)
maker=${SHAPED_MAKER:-$root/../shared/tools/make-shaped-model.py}
quant=${LLAMA_QUANTIZE:-/tmp/lcp/build/bin/llama-quantize}
python=${PYTHON:-python3}
[ -f "$maker" ] || { echo "make-shaped-models.sh: $maker not found (set SHAPED_MAKER)" >&2; exit 1; }
[ -x "$quant" ] || { echo "make-shaped-models.sh: $quant not found (set LLAMA_QUANTIZE)" >&2; exit 1; }
mkdir -p "$out"
for s in $sizes; do
  q="$out/g3-$s-q4_k_m.gguf"
  if [ -s "$q" ]; then echo "$q exists"; continue; fi
  f="$out/g3-$s-f16.gguf"
  "$python" "$maker" --preset "$s" --tokenizer-from "$root/models/gemma-3-270m-q4_k_m.gguf" -o "$f"
  "$quant" "$f" "$q" Q4_K_M > "$out/quantize-$s.log" 2>&1 || { echo "llama-quantize failed: $out/quantize-$s.log" >&2; exit 1; }
  rm -f "$f"
  echo "wrote $q"
done
