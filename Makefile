# Ferry: `make demo` runs the main job, `make test` passes the tests.
# Both install missing Debian packages (scripts/install-deps.sh), configure
# and build. Build trees: build/ (release with assertions), build-asan/
# (clang ASan+UBSan, and the libFuzzer targets), build-tsan/. `make test`
# reads JOBS, FUZZ_SECONDS (default 8), SKIP_SANITIZERS and SKIP_FUZZ from
# the environment or the command line (see scripts/run-tests.sh). New build
# trees use Ninja (CMAKE_GENERATOR); an existing tree keeps its generator.
JOBS ?= $(shell nproc)
CMAKE ?= cmake
CMAKE_GENERATOR ?= Ninja
export CMAKE_GENERATOR

.PHONY: all build deps demo test test-unit clean

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
	rm -rf build build-asan build-tsan build-fuzz  # build-fuzz: older trees
