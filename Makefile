# gemma.c — the two commands of the README, and the rest.
#   make run    install what is missing (Debian packages, the default model), build, generate text
#   make test   install what is missing, build, run the test suite (release build)
# Others: make build | test-sanitize | fuzz | fuzz-long | bench | model | deps | clean
#   make fuzz       every libFuzzer harness (fuzz/fuzz_*.c) for FUZZ_SECONDS each (CI, .ci/run: 30 s each)
#   make fuzz-long  the same build and harnesses for FUZZ_LONG_SECONDS each (30 min: by hand, not CI)

JOBS      ?= $(shell nproc)
BUILD     ?= build
ASAN      ?= build-asan
FUZZB     ?= build-fuzz
MODEL     := models/gemma-3-270m-q4_k_m.gguf
PROMPT    ?= The capital of France is
N         ?= 64
# seconds per harness: 12 harnesses (fuzz/fuzz_*.c) x 30 s = 6 min, plus the build
FUZZ_SECONDS ?= 30
FUZZ_LONG_SECONDS ?= 1800

.PHONY: run test build deps model test-sanitize fuzz fuzz-long fuzz-build bench clean

run: deps model build
	$(BUILD)/gemma run -m $(MODEL) -p "$(PROMPT)" -n $(N)

test: deps model build
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS)

build: deps
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release >/dev/null
	cmake --build $(BUILD) -j $(JOBS)

deps:
	@scripts/install-deps.sh

model: deps
	@scripts/fetch-model.sh

test-sanitize: deps model
	cmake -S . -B $(ASAN) -DCMAKE_BUILD_TYPE=Debug -DGM_SANITIZE=ON -DCMAKE_C_COMPILER=gcc >/dev/null
	cmake --build $(ASAN) -j $(JOBS)
	cd $(ASAN) && ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 GM_SANITIZER_BUILD=1 \
	  ctest --output-on-failure -j $(JOBS)

fuzz: fuzz-build
	scripts/run-fuzzers.sh $(FUZZB) $(FUZZ_SECONDS)

fuzz-long: fuzz-build
	scripts/run-fuzzers.sh $(FUZZB) $(FUZZ_LONG_SECONDS)

fuzz-build: deps
	cmake -S . -B $(FUZZB) -DCMAKE_BUILD_TYPE=Debug -DGM_FUZZ=ON -DCMAKE_C_COMPILER=clang \
	  -DCMAKE_C_FLAGS="-fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=all" >/dev/null
	cmake --build $(FUZZB) -j $(JOBS) --target $$(cd fuzz && ls fuzz_*.c | sed 's/\.c$$//' | tr '\n' ' ')

bench: build model
	$(BUILD)/gemma bench -m $(MODEL)

clean:
	rm -rf $(BUILD) $(ASAN) $(FUZZB)
