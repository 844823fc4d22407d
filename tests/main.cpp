// Catch2 main for the test binaries (CATCH_CONFIG_PREFIX_ALL comes from tests/CMakeLists.txt).
// Tests run on the BLAS kernels actorpipe itself runs on: the same start-up choice first.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include "core/blas_kernels.hpp"

int main(int argc, char** argv) {
  actorpipe::ensure_best_blas_kernels(argv);
  return Catch::Session().run(argc, argv);
}
