# The two README commands, plus helpers. Everything goes through CMake + CTest in build/.
#   make demo    install what is missing, build, generate from the embedded model
#   make test    install what is missing, build, run every test (and the short fuzz runs)
BUILD ?= build
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?=
LOWBIT := $(BUILD)/bin/lowbit
MODEL := models/ref-llama-19m

.PHONY: all deps build demo test fuzz fuzz-long asan bench clean format

all: build

deps:
	@scripts/install-deps.sh

$(BUILD)/CMakeCache.txt:
	@cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release $(CMAKE_FLAGS) >/dev/null

build: deps $(BUILD)/CMakeCache.txt
	@cmake --build $(BUILD) -j $(JOBS) -- --no-print-directory

demo: build
	@scripts/demo.sh $(LOWBIT) $(MODEL)

test: build
	@ctest --test-dir $(BUILD) --output-on-failure -j $(JOBS)
	@$(MAKE) --no-print-directory fuzz FUZZ_SECONDS=10

# libFuzzer targets (clang); FUZZ_SECONDS per target. `make fuzz-long` runs each for 10 minutes.
FUZZ_SECONDS ?= 10
fuzz: deps
	@scripts/run-fuzzers.sh $(FUZZ_SECONDS)

fuzz-long:
	@scripts/run-fuzzers.sh 600

# The whole test suite under AddressSanitizer + UndefinedBehaviorSanitizer (optimized with debug
# info, so the model tests finish). The two full-corpus perplexity runs (ctest entries of their
# own) are left out: they run the same code as the golden-logit tests, 700k tokens over, and would
# take most of an hour here.
asan: deps
	@cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DLOWBIT_SANITIZE=ON -DLOWBIT_CUDA=OFF \
	  -DLOWBIT_BENCH=OFF >/dev/null
	@cmake --build build-asan -j $(JOBS) -- --no-print-directory
	@ASAN_OPTIONS=detect_leaks=1 ctest --test-dir build-asan --output-on-failure -j $(JOBS) \
	  -E 'ReferenceModelCliTest[.]PerplexityOn'

bench: build
	@$(LOWBIT) synth --like llama-3.2-1b -o $(BUILD)/synth-llama-3.2-1b --overwrite
	@$(LOWBIT) bench $(BUILD)/synth-llama-3.2-1b --threads 2

format:
	@git ls-files '*.cc' '*.h' | xargs clang-format -i

clean:
	rm -rf $(BUILD) build-asan build-fuzz
