// actorpipe executable.
#include <iostream>

#include "apps/cli.hpp"
#include "core/blas_kernels.hpp"

int main(int argc, char** argv) {
  actorpipe::ensure_best_blas_kernels(argv);  // may restart the program once, before anything else
  return actorpipe::cli_main(argc, argv, std::cout, std::cerr);
}
