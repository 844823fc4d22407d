// actorpipe executable.
#include <cstdio>
#include <cstdlib>
#include <iostream>

#include "apps/cli.hpp"
#include "apps/crash_report.hpp"
#include "core/blas_kernels.hpp"
#include "core/log.hpp"

int main(int argc, char** argv) {
  actorpipe::report_crashes();
  actorpipe::ensure_best_blas_kernels(argv);  // the best BLAS kernels, before anything else (may restart once)
  const int code = actorpipe::cli_main(argc, argv, std::cout, std::cerr);
  // Everything the run wrote is flushed here, then the process ends without running static
  // destructors: an actor system left behind by a bounded shutdown (actors/pipeline_runtime.cpp)
  // still has threads running, which libraries' static teardown must not race with.
  std::cout.flush();
  std::cerr.flush();
  actorpipe::flush_log();
  std::fflush(nullptr);
  std::_Exit(code);
}
