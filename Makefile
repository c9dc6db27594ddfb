# The two commands for a fresh machine:
#   make demo   installs the Debian packages, builds, and runs the main job
#   make test   installs the Debian packages, builds, and runs every test through CTest
BUILD ?= build
JOBS ?= 2
CMAKE_FLAGS ?=

.PHONY: deps configure build test demo bench clean format

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

demo: build
	$(BUILD)/bin/troupe launch --ps 2 --workers 2 --restart-failed --chaos kill:worker:1@1s -- $(BUILD)/bin/fmnist_ps

bench: build
	$(BUILD)/bin/bench_train_step

format:
	clang-format -i $$(git ls-files '*.cpp' '*.hpp' '*.cu')

clean:
	rm -rf $(BUILD)
