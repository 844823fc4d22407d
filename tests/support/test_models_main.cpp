// actorpipe with the tests' user models registered (register_test_models): the multi-process
// tests run a user's model through launch, which starts this binary again for each process.
#include <iostream>

#include "apps/cli.hpp"
#include "apps/crash_report.hpp"
#include "core/blas_kernels.hpp"
#include "tests/support/test_models.hpp"

int main(int argc, char** argv) {
  actorpipe::report_crashes();
  actorpipe::ensure_best_blas_kernels(argv);
  actorpipe::testing::register_test_models();
  return actorpipe::cli_main(argc, argv, std::cout, std::cerr);
}
