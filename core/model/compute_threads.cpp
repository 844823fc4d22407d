// set_compute_threads (the only torch call the actor side makes directly).
#include "core/model/compute_threads.hpp"

#include <algorithm>
#include <chrono>
#include <mutex>
#include <stdexcept>
#include <string>

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Parallel.h>
#include <ATen/Version.h>
#include <c10/core/InferenceMode.h>
#include <torch/version.h>

#include "core/blas_kernels.hpp"

namespace actorpipe {

void set_compute_threads(int threads) {
  if (threads < 1) throw std::invalid_argument("threads per stage must be >= 1: got " + std::to_string(threads));
  at::set_num_threads(threads);
}

struct caller_torch_state::saved {
  at::Tensor generator_state;
  int threads = 1;
};

void refuse_inference_mode() {
  if (c10::InferenceMode::is_enabled())
    throw std::invalid_argument(
        "training was called under c10::InferenceMode, where no tensor can be saved for backward: call it outside "
        "the InferenceMode guard (a torch::NoGradGuard is fine: each rank sets its own grad mode)");
}

std::mutex& default_generator_use() {
  static std::mutex held;
  return held;
}

caller_torch_state::caller_torch_state() : saved_(std::make_unique<saved>()) {
  const std::lock_guard<std::mutex> ours(default_generator_use());
  at::Generator g = at::detail::getDefaultCPUGenerator();
  std::lock_guard<std::mutex> lock(g.mutex());
  saved_->generator_state = g.get_state();
  saved_->threads = at::get_num_threads();
}

caller_torch_state::~caller_torch_state() {
  try {
    {
      const std::lock_guard<std::mutex> ours(default_generator_use());
      at::Generator g = at::detail::getDefaultCPUGenerator();
      std::lock_guard<std::mutex> lock(g.mutex());
      g.set_state(saved_->generator_state);
    }
    // Only where the run changed it: at::set_num_threads also makes LibTorch's pthreadpool
    // again with that many threads, which spin for a while (OMP_NUM_THREADS=1000 spent 27 s
    // after a run's last step, on 2 cores).
    if (at::get_num_threads() != saved_->threads) at::set_num_threads(saved_->threads);
  } catch (...) {  // a destructor: the run's own outcome is what the caller hears
  }
}

namespace {

// at::show_config()'s line naming the vectorised kernels: "CPU capability usage: AVX512".
constexpr const char* kCapabilityKey = "CPU capability usage: ";
// Its build setting naming the BLAS: "BLAS_INFO=mkl,".
constexpr const char* kBlasKey = "BLAS_INFO=";

// The value after `key` in at::show_config()'s text, up to `ends`; "" where it is missing.
std::string config_value(const std::string& config, const std::string& key, const char* ends) {
  const auto at = config.find(key);
  if (at == std::string::npos) return "";
  const auto begin = at + key.size();
  return config.substr(begin, config.find_first_of(ends, begin) - begin);
}

}  // namespace

std::string libtorch_version() {
  // at::show_config() lists the build settings, among them "BLAS_INFO=mkl," (or open, ...),
  // and the vectorised kernels it dispatches to ("CPU capability usage: AVX512").
  const std::string config = at::show_config();
  const std::string blas = config_value(config, kBlasKey, ", \n");
  std::string out = std::string("LibTorch ") + TORCH_VERSION + (blas.empty() ? "" : " (BLAS_INFO=" + blas + ")");
  const std::string kernels = config_value(config, kCapabilityKey, "\n");
  if (!kernels.empty()) out += ", " + kernels + " kernels (" + aten_capability_origin(kernels) + ")";
  return out;
}

double matmul_gflops(int m, int k, int n, int repeats) {
  if (m < 1 || k < 1 || n < 1 || repeats < 1)
    throw std::invalid_argument("matmul_gflops needs positive sizes and repeats: got " + std::to_string(m) + "x" +
                                std::to_string(k) + " by " + std::to_string(k) + "x" + std::to_string(n) + ", " +
                                std::to_string(repeats) + " repeats");
  set_compute_threads(1);
  const at::Tensor a = at::rand({m, k}), b = at::rand({k, n});
  at::Tensor c = at::mm(a, b);  // untimed: buffers and kernels warm
  double best = 1e300;
  for (int r = 0; r < repeats; ++r) {
    const auto start = std::chrono::steady_clock::now();
    at::mm_out(c, a, b);
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  return 2.0 * m * k * n / best / 1e9;
}

std::string libtorch_blas_info() { return config_value(at::show_config(), kBlasKey, ", \n"); }

std::string aten_kernels() { return config_value(at::show_config(), kCapabilityKey, "\n"); }

}  // namespace actorpipe
