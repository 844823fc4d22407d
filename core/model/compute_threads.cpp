// set_compute_threads (the only torch call the actor side makes directly).
#include "core/model/compute_threads.hpp"

#include <stdexcept>
#include <string>

#include <ATen/Parallel.h>
#include <torch/version.h>

namespace actorpipe {

void set_compute_threads(int threads) {
  if (threads < 1) throw std::invalid_argument("threads per stage must be >= 1: got " + std::to_string(threads));
  at::set_num_threads(threads);
}

std::string libtorch_version() { return std::string("LibTorch ") + TORCH_VERSION; }

}  // namespace actorpipe
