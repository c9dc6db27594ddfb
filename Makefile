# The two commands for a fresh machine:
#   make demo   installs the Debian packages, builds, and runs the main job
#   make test   installs the Debian packages, builds, and runs every test through CTest
BUILD ?= build
JOBS ?= 2
CMAKE_FLAGS ?=
# make fuzz: the libFuzzer targets (clang, address + undefined sanitizers), each run for
# FUZZ_SECONDS. make sanitize: the whole test suite built with address + undefined.
FUZZ_BUILD ?= build-fuzz
FUZZ_SECONDS ?= 60
SAN_BUILD ?= build-asan
SAN_TESTS ?=

.PHONY: deps configure build test demo bench clean format fuzz sanitize ci

deps:
	@./scripts/install-deps.sh

$(BUILD)/CMakeCache.txt:
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release $(CMAKE_FLAGS)

configure: deps $(BUILD)/CMakeCache.txt

build: configure
	cmake --build $(BUILD) -j$(JOBS)

test: build
	./scripts/check-test-count.sh $(BUILD)
	ctest --test-dir $(BUILD) --output-on-failure -j$(JOBS) --timeout 600

fuzz: deps
	cmake -S . -B $(FUZZ_BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_COMPILER=clang++ \
	  -DTROUPE_FUZZ=ON -DTROUPE_SANITIZE=address,undefined -DTROUPE_BUILD_TESTS=OFF -DTROUPE_WITH_CUDA=OFF
	cmake --build $(FUZZ_BUILD) -j$(JOBS) --target troupe_fuzzers
	./scripts/run-fuzzers.sh $(FUZZ_BUILD) $(FUZZ_SECONDS)

sanitize: deps
	cmake -S . -B $(SAN_BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTROUPE_SANITIZE=address,undefined \
	  -DTROUPE_WITH_CUDA=OFF
	cmake --build $(SAN_BUILD) -j$(JOBS)
	ASAN_OPTIONS=$${ASAN_OPTIONS:-detect_leaks=1} ctest --test-dir $(SAN_BUILD) --output-on-failure \
	  -j$(JOBS) --timeout 900 $(if $(SAN_TESTS),-R '$(SAN_TESTS)')

demo: build
	$(BUILD)/bin/troupe launch --ps 2 --workers 2 --restart-failed --chaos kill:worker:1@1s -- $(BUILD)/bin/fmnist_ps

bench: build
	$(BUILD)/bin/bench_train_step

format:
	clang-format -i $$(git ls-files '*.cpp' '*.hpp' '*.cu')

clean:
	rm -rf $(BUILD) $(FUZZ_BUILD) $(SAN_BUILD)
