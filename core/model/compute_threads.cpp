// set_compute_threads (the only torch call the actor side makes directly).
#include "core/model/compute_threads.hpp"

#include <stdexcept>
#include <string>

#include <ATen/Parallel.h>
#include <ATen/Version.h>
#include <torch/version.h>

namespace actorpipe {

void set_compute_threads(int threads) {
  if (threads < 1) throw std::invalid_argument("threads per stage must be >= 1: got " + std::to_string(threads));
  at::set_num_threads(threads);
}

std::string libtorch_version() {
  // at::show_config() lists the build settings, among them "BLAS_INFO=mkl," (or open, ...).
  const std::string config = at::show_config();
  std::string blas;
  const auto at = config.find("BLAS_INFO=");
  if (at != std::string::npos) {
    const auto begin = at + 10;
    blas = config.substr(begin, config.find_first_of(", \n", begin) - begin);
  }
  return std::string("LibTorch ") + TORCH_VERSION + (blas.empty() ? "" : " (BLAS_INFO=" + blas + ")");
}

}  // namespace actorpipe
