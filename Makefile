# The two commands of the README:
#   make run   installs what is missing, builds, and runs the main job on its embedded default
#   make test  installs what is missing, builds, and runs every test
# Other targets: deps, build, bench, pictures, clean.

BUILD_DIR ?= build
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?=

# Debian packages the build needs (Debian 12). Installed by `make deps` when missing.
PACKAGES := build-essential cmake ninja-build ccache pkg-config \
            libcaf-dev libtorch-dev libucx-dev catch2 libspdlog-dev libfmt-dev \
            libcli11-dev nlohmann-json3-dev libopenblas0-openmp libssl-dev iproute2

.PHONY: run test deps build bench pictures clean

run: build
	./$(BUILD_DIR)/apps/actorpipe train --trace $(BUILD_DIR)/trace.json
	@echo
	@echo "Next: ./$(BUILD_DIR)/apps/actorpipe train --help, ./$(BUILD_DIR)/apps/actorpipe simulate --help"
	@echo "      (the timeline of the last step is in $(BUILD_DIR)/trace.json: open it in ui.perfetto.dev)"

test: build
	cd $(BUILD_DIR) && ctest --output-on-failure -j $(JOBS)

deps:
	@missing=""; \
	for p in $(PACKAGES); do \
	  dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q "install ok installed" || missing="$$missing $$p"; \
	done; \
	if [ -n "$$missing" ]; then \
	  echo "installing:$$missing"; \
	  SUDO=""; [ "$$(id -u)" -eq 0 ] || SUDO=sudo; \
	  $$SUDO apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq --no-install-recommends $$missing; \
	fi
	@# Python's safetensors reads --save-final files in a test; optional, from PyPI.
	@python3 -c 'import safetensors.numpy' 2>/dev/null || python3 -m pip install -q safetensors numpy 2>/dev/null || \
	  echo "note: python3 safetensors not installed; its read-back check will be skipped"

$(BUILD_DIR)/build.ninja: CMakeLists.txt | deps
	cmake -S . -B $(BUILD_DIR) -G Ninja $(CMAKE_FLAGS)

build: deps $(BUILD_DIR)/build.ninja
	cmake --build $(BUILD_DIR) -j $(JOBS)

# Benchmarks: runtime overhead against the simulator, GPT tokens/s against the reference, the
# UCX transport's bandwidth against ucx_perftest (from ucx-utils), and 2 processes x 1 rank
# against 1 process x 2 ranks.
bench: build
	./$(BUILD_DIR)/bench/pipeline_overhead
	./$(BUILD_DIR)/bench/gpt_throughput
	@command -v ucx_perftest >/dev/null || apt-get install -y -qq ucx-utils >/dev/null || true
	./$(BUILD_DIR)/bench/ucx_bandwidth
	./$(BUILD_DIR)/bench/process_layout_throughput ./$(BUILD_DIR)/apps/actorpipe

# The README's schedule pictures.
pictures: build
	./$(BUILD_DIR)/apps/actorpipe simulate --schedule 1f1b --stages 4 --microbatches 8 --svg docs/1f1b.svg > /dev/null
	./$(BUILD_DIR)/apps/actorpipe simulate --schedule interleaved --stages 4 --microbatches 8 --chunks 2 --svg docs/interleaved.svg > /dev/null
	./$(BUILD_DIR)/apps/actorpipe simulate --schedule zbv --stages 4 --microbatches 8 --svg docs/zbv.svg > /dev/null
	./$(BUILD_DIR)/apps/actorpipe simulate --schedule zb-h1 --stages 4 --microbatches 8 --svg docs/zb-h1.svg > /dev/null

clean:
	rm -rf $(BUILD_DIR)
