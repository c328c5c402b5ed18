# scripts/bit-fixture-models.sh — sourced by tests/cli_bits.sh and scripts/update-bit-fixtures.sh: the models
# whose logits the bit fixtures hash (paths relative to the source tree; the tiny Gemma 3n file is written at
# test time, the default model is skipped where it is not installed).
BIT_MODELS="tests/data/tiny/gemma.gguf tests/data/tiny/gemma2.gguf tests/data/tiny/gemma3.gguf
tests/data/gemma4/gemma4-dense.gguf tests/data/gemma4/gemma4-moe.gguf tests/data/gemma4/gemma4-ple.gguf
tests/data/embedding/dense.gguf"
BIT_DEFAULT_MODEL=models/gemma-3-270m-q4_k_m.gguf
