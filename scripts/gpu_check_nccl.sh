#!/usr/bin/env bash
# Builds only the NCCL backend and its tests, then runs them: for a machine with GPUs (two or
# more exercise the two-process tests; one GPU runs the single-rank ones). Without a GPU the
# tests pass by printing why they skipped. Usage: scripts/gpu_check_nccl.sh [build dir]
set -euo pipefail
src="$(cd "$(dirname "$0")/.." && pwd)"
build="${1:-/tmp/build-nccl}"
nvidia-smi -L || echo "nvidia-smi: no GPU listed (the tests will say why they skip)"
cmake -S "$src" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DACTORPIPE_WITH_TORCH=OFF \
      -DACTORPIPE_WITH_NCCL=ON -DACTORPIPE_BUILD_EXAMPLES=OFF
ninja -C "$build" actorpipe_nccl_tests
# One process per test case (ctest), since the GPU tests fork ranks; -V shows skip reasons.
cd "$build" && NCCL_DEBUG="${NCCL_DEBUG:-WARN}" ctest -R nccl -V --timeout 300
