// `actorpipe doctor`: what this machine gives a training run, checked before one starts: the
// CPU and memory this process may use, the kernels it computes on and how fast one thread
// multiplies, the data plane (UCX between two workers, GPUs and NCCL), what a multi-process job
// needs (open files, the master address and port, the job token) and the output directory.
// Each finding is ok, a note, a warning (a run would be slower than it could be) or a failure
// (a run would stop).
#pragma once

#include <iosfwd>
#include <string>
#include <vector>

#include "core/blas_kernels.hpp"

namespace actorpipe {

struct doctor_options {
  std::string dir = ".";    // where checkpoints, metrics and traces would go
  std::string master_addr;  // "": MASTER_ADDR, else launch's default
  int master_port = 0;      // 0: MASTER_PORT, else launch's default
  int nproc_per_node = 0;   // 0: say how many processes launch could start; else check that many
};

enum class doctor_status { ok, note, warn, fail };

struct doctor_finding {
  doctor_status status = doctor_status::ok;
  std::string section;  // "machine", "compute", "data plane", "jobs", "files"
  std::string item;     // "CPU", "matmul", "UCX", ...
  std::string text;
};

// fp32 GFLOP/s one core of this CPU can reach at `mhz`: two FMA units of its widest vectors
// (AVX-512: 64 flops a cycle; AVX2: 32; AVX: 16; SSE: 8). 0 where the clock is unknown.
double peak_gflops(simd_level cpu, double mhz);

// The matmul line's peak: "AVX-512 at the 2.30 GHz /proc/cpuinfo gives: 74 with one FMA unit,
// 147 with two (turbo clocks go higher)" (Intel's AVX-512 cores have one or two 512-bit units);
// an AMD Zen 4 (family 25 with AVX-512) runs a 512-bit FMA on both of its 256-bit units, so
// one number there. "" where the clock is unknown.
std::string peak_text(simd_level cpu, double mhz, const std::string& vendor, int family);

// One thread's matmul against that peak: ok from 30% of it (good kernels on one FMA unit reach
// about half, more at turbo clocks), a warning below (generic kernels: OpenBLAS's SSE core on
// an AVX-512 CPU reached 21-23%; SSE on an AVX2 CPU can reach 25%), a note where the peak is
// unknown.
doctor_status judge_matmul(double gflops, simd_level cpu, double mhz);

// Every check, in report order. Throws std::invalid_argument for a bad option.
std::vector<doctor_finding> run_doctor_checks(const doctor_options& options);

// The report, and the exit code: 0, or 1 when a finding is a failure.
int run_doctor(const doctor_options& options, std::ostream& out);

}  // namespace actorpipe
