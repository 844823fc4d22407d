// Torch's intra-op thread count for the calling thread (thread-local in torch and in the
// OpenMP OpenBLAS): each rank's compute thread sets its own.
#pragma once

#include <string>

namespace actorpipe {

// Throws std::invalid_argument for threads < 1.
void set_compute_threads(int threads);

// "LibTorch 2.15.0 (BLAS_INFO=mkl)": what this program was built against, for run summaries.
std::string libtorch_version();

}  // namespace actorpipe
