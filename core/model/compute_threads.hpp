// Torch's intra-op thread count for the calling thread (thread-local in torch and in the
// OpenMP OpenBLAS): each rank's compute thread sets its own.
#pragma once

#include <string>

namespace actorpipe {

// Throws std::invalid_argument for threads < 1.
void set_compute_threads(int threads);

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
