// Torch's intra-op thread count for the calling thread (thread-local in torch and in the
// OpenMP OpenBLAS): each rank's compute thread sets its own.
#pragma once

#include <memory>
#include <mutex>
#include <string>

namespace actorpipe {

// Throws std::invalid_argument for threads < 1.
void set_compute_threads(int threads);

// Throws std::invalid_argument where the calling thread is in c10::InferenceMode: training
// needs autograd, and LibTorch's own error came from the first layer, blamed on it.
void refuse_inference_mode();

// Held while a run seeds torch's default generator and builds a layer from it, and while a
// caller's generator state is taken or put back: runs at once in one process (a library
// caller's threads) build their layers one at a time. A thread of the caller's own drawing from
// the default generator meanwhile still changes the layers built (README: bring your own model).
std::mutex& default_generator_use();

// What a run changes of its caller's LibTorch state, put back when this goes: the default CPU
// generator's state (layers are built after seeding it: a caller's draws after a run were the
// same whatever its seed) and the thread count (the calling thread's, and the process-wide
// default that threads made later take). run_pipeline and run_reference hold one.
class caller_torch_state {
 public:
  caller_torch_state();
  ~caller_torch_state();
  caller_torch_state(const caller_torch_state&) = delete;
  caller_torch_state& operator=(const caller_torch_state&) = delete;

 private:
  struct saved;
  std::unique_ptr<saved> saved_;
};

// "LibTorch 1.13.0 (BLAS_INFO=generic), AVX512 kernels (chosen by actorpipe for this CPU's
// AVX-512 BF16)": what this program was built against and the vectorised kernels LibTorch
// runs, for run summaries.
std::string libtorch_version();

// Single-precision matrix products on the calling thread with one torch thread (as a rank's
// compute thread runs them): the best of `repeats` timed products of an (m x k) by a (k x n)
// matrix, after one untimed, in GFLOP/s (2mkn flops each). What the BLAS kernels give a rank.
// Leaves the calling thread's torch thread count at 1.
double matmul_gflops(int m, int k, int n, int repeats);

// The BLAS LibTorch was built to call ("generic": the system's libblas.so.3, "mkl", ...); ""
// where at::show_config() does not say.
std::string libtorch_blas_info();

// The vectorised kernels LibTorch dispatches to ("AVX2", "AVX512", ...); "" where it does not say.
std::string aten_kernels();

}  // namespace actorpipe
