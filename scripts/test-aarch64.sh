#!/usr/bin/env bash
# scripts/test-aarch64.sh — cross-build for 64-bit ARM (Release, cmake/toolchain-aarch64.cmake) and run
# the part of the release suite that fits CI's budget under qemu-aarch64 (user mode, no binfmt_misc:
# ctest puts the emulator in front of the C tests, the CLI scripts get the shims in build/emu/).
# Needs `scripts/install-deps.sh aarch64` first. Idempotent: reuses the build folder.
#   scripts/test-aarch64.sh [build folder, default build-aarch64]
set -euo pipefail
cd "$(dirname "$0")/.."
B=${1:-build-aarch64}
# What runs, twice: with the tests' own thread counts (2 where they run in parallel, 1-8 in the pool tests,
# several compare 1 against 2), then the C tests again with GM_TEST_MAX_THREADS=1 (tests/support/test.h:
# every engine, generator and pool on one thread). The CLI scripts pass -t themselves (cli_run: 1 and 2).
RUN=(test_bad_files test_chat test_config test_embedding test_error test_family test_forward test_gemma4
     test_generator test_gguf test_gbnf test_schema test_grammar test_image test_kvcache test_llama_tiny test_matmul test_ops_simd
     test_pack test_pool_chunk test_quant test_safetensors test_scheduler test_thread_start test_threadpool
     test_threadpool_race test_tokenizer_json_mem test_vision test_vision_gemma4 test_vision_hf
     test_exact_ref test_gemma3n test_tokenizer test_tools
     test_cli_opts
     cli_args cli_embed cli_gemma3n cli_gemma4 cli_grammar cli_grammar_files cli_inspect cli_output cli_run
     cli_tokenize cli_vision)
# what they need built: the C tests themselves, and for the CLI scripts the gemma binary and test_grammar
TARGETS=(gemma_cli $(printf '%s\n' "${RUN[@]}" | grep '^test_'))
# Left out, with the reason (seconds: under qemu-aarch64 on this 2-core x86 CI machine, scalar kernels):
#   test_engine       > 900 s (ctest's timeout): the real 270M model through the scalar kernels, many configs
#   test_backend_ref  349 s: every family through both backends, the real model's 48 positions in double
#   test_sampler      101 s: 288k checks of pure sampling arithmetic, nothing ARM-specific
#   test_real_model, test_speculative: the real model through many configurations (minutes each under
#                     qemu; not measured to the end)
#   test_perplexity   runs GM_BUILD_DIR/gemma as a child from inside the emulated test: without
#                     binfmt_misc the host cannot exec an aarch64 binary
#   portable_kernels  compiles the x86 kernel sources with the (cross) compiler: x86 only
#   cli_bits          450 s, and its fixtures are x86's: the scalar level's bits differ on AArch64 (not
#                     investigated), and the NEON levels have no fixture (their logits_dump hashes equal the
#                     AVX2 fixture for the 270M model and 4 of the 7 tiny ones: docs/performance.md)
#   cli_speculative   128 s under qemu with the NEON kernels (target and draft generations, several modes)
#   cli_server*, cli_cluster: a served model under emulation plus Python / Chromium / HAProxy drivers
echo "== cross-build ($B)"
cmake -S . -B "$B" -DCMAKE_TOOLCHAIN_FILE=cmake/toolchain-aarch64.cmake -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$B" -j "${JOBS:-2}" --target "${TARGETS[@]}"
echo "== ctest under qemu-aarch64"
regex="^($(IFS='|'; echo "${RUN[*]}"))\$"
cregex="^($(printf '%s\n' "${RUN[@]}" | grep '^test_' | paste -sd'|'))\$"
# the tests' own TIMEOUT (900 s) outranks ctest --timeout: bound each pass itself, CI's budget is ~7 min
cd "$B"
timeout 420 ctest --output-on-failure -j "${JOBS:-2}" -R "$regex"
echo "== the C tests again, 1 thread (GM_TEST_MAX_THREADS=1)"
GM_TEST_MAX_THREADS=1 timeout 300 ctest --output-on-failure -j "${JOBS:-2}" -R "$cregex"
