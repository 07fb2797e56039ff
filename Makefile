# Ferry: `make demo` runs the main job, `make test` passes the tests.
# Both install missing Debian packages (scripts/install-deps.sh), configure
# and build. Build trees: build/ (release with assertions), build-asan/,
# build-tsan/, build-fuzz/.
JOBS ?= $(shell nproc)
CMAKE ?= cmake
FUZZ_SECONDS ?= 20

.PHONY: all build deps demo test test-unit test-asan test-tsan test-fuzz bench plots clean

all: build

deps:
	@scripts/install-deps.sh

build: deps
	@$(CMAKE) -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
	@$(CMAKE) --build build -j $(JOBS)

demo: build
	./build/ferry demo

test: deps
	@scripts/run-tests.sh

test-unit: build
	cd build && ctest --output-on-failure -j $(JOBS)

clean:
	rm -rf build build-asan build-tsan build-fuzz
