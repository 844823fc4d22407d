# The two commands of the README:
#   make run   installs what is missing, builds, and runs the main job on its embedded default
#   make test  installs what is missing, builds, and runs every test
# Other targets: deps, build, bench, bench-peer, pictures, clean.
#
# TORCH=system (default) builds against Debian's LibTorch 1.13 (OpenBLAS) in build/;
# TORCH=pip against the LibTorch 2.x inside PyPI's torch wheel (MKL, fused attention),
# installed into .venv-torch when missing, in build-pip/. E.g. `make test TORCH=pip`.

TORCH ?= system
VENV := .venv-torch
# SANITIZE=address builds a checking copy with AddressSanitizer and UndefinedBehaviorSanitizer in
# build-asan/, e.g. `make test SANITIZE=address` (run with Debian's LibTorch; with TORCH=pip it
# goes to build-pip-asan/, not tried).
SANITIZE ?=
# Every report ends the process (and so fails its test), but those cmake/ubsan.supp passes over;
# a crash is left to actorpipe's own report, which tests check. Left out: the tests that limit
# the address space (the sanitizer's shadow memory needs terabytes of it).
SANITIZE_ENV :=
SANITIZE_SKIP :=
ifeq ($(SANITIZE),address)
SANITIZE_SUFFIX := -asan
SANITIZE_FLAGS := -DACTORPIPE_SANITIZE=address
SANITIZE_ENV := UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1:suppressions=$(CURDIR)/cmake/ubsan.supp \
                ASAN_OPTIONS=handle_segv=0:handle_sigbus=0:handle_sigfpe=0:handle_sigill=0:detect_leaks=1
SANITIZE_SKIP := -E 'threads-per-stage past the process'
else ifneq ($(SANITIZE),)
$(error SANITIZE must be address (or empty), got '$(SANITIZE)')
endif
ifeq ($(TORCH),pip)
BUILD_DIR ?= build-pip$(SANITIZE_SUFFIX)
TORCH_DEPS := venv
# The torch package folder, found without importing torch.
TORCH_FLAGS = -DACTORPIPE_TORCH_DIR="$$($(VENV)/bin/python -c 'import importlib.util, os; print(os.path.dirname(importlib.util.find_spec("torch").origin))')"
else ifeq ($(TORCH),system)
BUILD_DIR ?= build$(SANITIZE_SUFFIX)
TORCH_DEPS :=
TORCH_FLAGS =
else
$(error TORCH must be system or pip, got '$(TORCH)')
endif
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?=

# Debian packages the build needs (Debian 12). Installed by `make deps` when missing.
PACKAGES := build-essential cmake ninja-build ccache pkg-config \
            libcaf-dev libtorch-dev libucx-dev catch2 libspdlog-dev libfmt-dev \
            libcli11-dev nlohmann-json3-dev libopenblas0-openmp libssl-dev iproute2 \
            libgoogle-perftools-dev libblas3

.PHONY: run test deps venv build bench bench-peer pictures clean

run: build
	./$(BUILD_DIR)/apps/actorpipe train --trace $(BUILD_DIR)/trace.json
	@echo
	@echo "Next: ./$(BUILD_DIR)/apps/actorpipe train --help, ./$(BUILD_DIR)/apps/actorpipe simulate --help,"
	@echo "      ./$(BUILD_DIR)/apps/actorpipe doctor (what this machine gives a run)"
	@echo "      (the timeline of the last step is in $(BUILD_DIR)/trace.json: open it in ui.perfetto.dev)"

test: build
ifneq ($(SANITIZE_SKIP),)
	@echo "SANITIZE=$(SANITIZE) leaves out: $(SANITIZE_SKIP) (the test limits the address space)"
endif
	cd $(BUILD_DIR) && $(SANITIZE_ENV) ctest --output-on-failure -j $(JOBS) $(SANITIZE_SKIP)

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

# PyTorch from PyPI (the LibTorch of TORCH=pip, and the peer of bench-peer), once.
venv:
	@$(VENV)/bin/python -c 'import torch' 2>/dev/null || { \
	  python3 -m venv --help >/dev/null 2>&1 || apt-get install -y -qq python3-venv >/dev/null; \
	  echo "installing torch from PyPI into $(VENV) (a few GB, once)"; \
	  python3 -m venv $(VENV) && $(VENV)/bin/pip install -q torch numpy; } || \
	  { echo "could not make $(VENV) with torch from PyPI"; exit 1; }

$(BUILD_DIR)/build.ninja: CMakeLists.txt | deps $(TORCH_DEPS)
	cmake -S . -B $(BUILD_DIR) -G Ninja $(TORCH_FLAGS) $(SANITIZE_FLAGS) $(CMAKE_FLAGS)

build: deps $(TORCH_DEPS) $(BUILD_DIR)/build.ninja
ifeq ($(TORCH),pip)
	@# Follow the venv's torch if its folder changed since the build was configured.
	@cmake -S . -B $(BUILD_DIR) $(TORCH_FLAGS) > /dev/null
endif
	cmake --build $(BUILD_DIR) -j $(JOBS)

# Benchmarks: runtime overhead against the simulator, GPT tokens/s against the reference (whole
# runs, then the two taking turns a step at a time), what splitting a backward costs, what each
# rank's order of actions costs on one thread, our own attention and GELU loops against
# LibTorch's ops, the UCX transport's bandwidth against ucx_perftest (from ucx-utils), 2
# processes x 1 rank against 1 process x 2 ranks, data parallel against one replica, and
# checkpoint writes against the disk's sequential write.
bench: build
	./$(BUILD_DIR)/bench/pipeline_overhead
	./$(BUILD_DIR)/bench/gpt_throughput --repeat 3
	./$(BUILD_DIR)/bench/gpt_turns
	./$(BUILD_DIR)/bench/split_costs
	./$(BUILD_DIR)/bench/rank_replay
	./$(BUILD_DIR)/bench/own_loops
	./$(BUILD_DIR)/bench/data_parallel_throughput
	mkdir -p $(BUILD_DIR)/checkpoint-bench
	./$(BUILD_DIR)/bench/checkpoint_throughput --dir $(BUILD_DIR)/checkpoint-bench
	@command -v ucx_perftest >/dev/null || apt-get install -y -qq ucx-utils >/dev/null || true
	./$(BUILD_DIR)/bench/ucx_bandwidth
	./$(BUILD_DIR)/bench/process_layout_throughput ./$(BUILD_DIR)/apps/actorpipe

# The same GPT, data and AdamW trained by actorpipe and by PyTorch's torch.distributed.pipelining
# (bench/peer/): tokens/s side by side. Needs torch from PyPI, in .venv-torch (made on first use).
bench-peer: build venv
	$(VENV)/bin/python bench/peer/compare.py --actorpipe ./$(BUILD_DIR)/apps/actorpipe --repeat 3

# The README's schedule pictures.
pictures: build
	./$(BUILD_DIR)/apps/actorpipe simulate --schedule 1f1b --stages 4 --microbatches 8 --svg docs/1f1b.svg > /dev/null
	./$(BUILD_DIR)/apps/actorpipe simulate --schedule interleaved --stages 4 --microbatches 8 --chunks 2 --svg docs/interleaved.svg > /dev/null
	./$(BUILD_DIR)/apps/actorpipe simulate --schedule zbv --stages 4 --microbatches 8 --svg docs/zbv.svg > /dev/null
	./$(BUILD_DIR)/apps/actorpipe simulate --schedule zb-h1 --stages 4 --microbatches 8 --svg docs/zb-h1.svg > /dev/null

clean:
	rm -rf $(BUILD_DIR)
