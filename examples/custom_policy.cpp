// Example: a binary of your own with a dynamic ordering policy of its own, and the whole
// actorpipe command line. It registers "gpipe-waves" (examples/waves_policy.hpp) and hands
// argv to actorpipe's CLI, so everything that takes a schedule name takes it:
//
//   custom_policy simulate --schedule gpipe-waves --stages 4 --microbatches 8 --print-plan
//   custom_policy train --schedule gpipe-waves --stages 2 --budget 3
//   custom_policy launch --nproc-per-node 2 -- train --schedule gpipe-waves --stages 2
//
// launch starts this same binary once per process, so every process has the policy: the stage
// actor of each rank asks the registry for it by name.
#include <iostream>

#include "apps/cli.hpp"
#include "apps/crash_report.hpp"
#include "core/blas_kernels.hpp"
#include "examples/waves_policy.hpp"

int main(int argc, char** argv) {
  actorpipe::report_crashes();                // as the actorpipe binary: a crash says so, with its frames
  actorpipe::ensure_best_blas_kernels(argv);  // as the actorpipe binary: the best BLAS kernels (may restart once)
  waves::register_waves_policy();
  return actorpipe::cli_main(argc, argv, std::cout, std::cerr);
}
