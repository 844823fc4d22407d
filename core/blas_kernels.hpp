// Which BLAS this process computes with and on which kernels, and the choice of OpenBLAS's
// kernels where its own CPU detection falls back to a generic core (it can for CPUs newer
// than the library: Debian's 0.3.21 ran one machine with AVX-512 BF16 on its SSE3 "Prescott"
// kernels, ~4x slower, while it picks Cooperlake on another AMD EPYC).
// No torch: OpenBLAS is looked up in the running process by symbol.
#pragma once

#include <string>

namespace actorpipe {

// Vector instruction sets, in the order OpenBLAS's x86 kernels need them.
enum class simd_level { sse = 0, avx = 1, avx2 = 2, avx512 = 3, avx512_bf16 = 4 };

std::string simd_level_name(simd_level level);  // "AVX-512 BF16", ...

// What this CPU and OS support (CPUID, and XGETBV for the OS saving the wider registers).
simd_level cpu_simd_level();

// The instruction set an OpenBLAS core's kernels need ("SkylakeX" -> avx512), any case;
// unknown names count as sse.
simd_level openblas_core_level(const std::string& core);

// The OpenBLAS core (an OPENBLAS_CORETYPE value) with the fastest single-precision kernels
// for a CPU of this level; empty for sse (nothing better to choose).
std::string best_openblas_core(simd_level cpu);

// What to do at start-up, decided from values only (testable without OpenBLAS):
//  - the user set OPENBLAS_CORETYPE (and actorpipe did not): keep it;
//  - actorpipe already chose (the marker is set): keep it;
//  - OpenBLAS detected a core below what the CPU supports: change to the best one.
struct blas_choice {
  bool change = false;
  std::string coretype;  // for OPENBLAS_CORETYPE when change
};
blas_choice choose_blas_kernels(const std::string& detected_core, simd_level cpu, const char* user_coretype,
                                const char* marker);

// The environment variable actorpipe sets, beside OPENBLAS_CORETYPE, to the core OpenBLAS had
// detected by itself; it tells the summary (and the process's children) who chose.
inline constexpr const char* blas_marker_variable = "ACTORPIPE_BLAS_DETECTED";
// Tests only: ensure_best_blas_kernels takes this core as OpenBLAS's own detection, so the
// change can be exercised on a machine where OpenBLAS detects the CPU correctly.
inline constexpr const char* blas_pretend_variable = "ACTORPIPE_BLAS_PRETEND_DETECTED";
// Tests only: set (to anything), ensure_best_blas_kernels restarts the program even where
// OpenBLAS could switch in place, so the restart that other OpenBLAS builds need stays tested.
inline constexpr const char* blas_restart_variable = "ACTORPIPE_BLAS_RESTART";
// Set for the restarted process only (it removes it at once, so its children do not inherit
// it); the summary then says the program restarted to load the kernels.
inline constexpr const char* blas_restarted_variable = "ACTORPIPE_BLAS_RESTARTED";

struct blas_info {
  bool openblas = false;
  std::string config;  // openblas_get_config(), e.g. "OpenBLAS 0.3.21 DYNAMIC_ARCH NO_AFFINITY Cooperlake MAX_THREADS=64"
  std::string core;    // openblas_get_corename(), e.g. "Cooperlake"
  std::string origin;  // who picked the core, in words
  // The user's OPENBLAS_CORETYPE names a core this OpenBLAS does not run (a typo): it picked one
  // itself.
  bool user_core_ignored = false;
  // The library LibTorch's matrix products (sgemm_, found as LibTorch finds it) come from,
  // where that is not the OpenBLAS above: OpenBLAS can be loaded while another libblas.so.3 (the
  // reference BLAS, ~20x slower here) comes first in the lookup order (LD_LIBRARY_PATH, say).
  // Empty when they come from OpenBLAS, or no sgemm_ is loaded.
  std::string other_sgemm;
};

// The BLAS of this process as it runs now.
blas_info current_blas();

// One line for run summaries and benchmarks: "OpenBLAS 0.3.21 ..., kernels Cooperlake (chosen
// by actorpipe for this CPU's AVX-512 BF16; OpenBLAS alone picked Prescott)".
std::string describe_blas(const blas_info& info);

// LibTorch's own vectorised kernels (elementwise ops, GELU's tanh, softmax, reductions: ATen's
// "CPU capability"). LibTorch picks them through the cpuinfo library on first use; Debian's
// LibTorch 1.13 with its cpuinfo picks AVX2 on an AVX-512 AMD EPYC (Zen 4), where its AVX-512
// kernels make training ~4% faster. The variable is read on the first dispatch, not at load.
inline constexpr const char* aten_capability_variable = "ATEN_CPU_CAPABILITY";
// Set beside it when actorpipe chose the value (the summary tells who chose).
inline constexpr const char* aten_marker_variable = "ACTORPIPE_ATEN_CHOSEN";

// The ATEN_CPU_CAPABILITY value to set for a CPU of this level: "avx512" on AVX-512 (F, CD,
// BW, DQ, VL) CPUs, else "" (leave LibTorch's detection alone). "" too when the user set it.
std::string choose_aten_capability(simd_level cpu, const char* user_value);

// Who chose LibTorch's kernels, in words, for `capability` (what LibTorch reports it runs).
std::string aten_capability_origin(const std::string& capability);

// Whether the value of `variable` in this process is actorpipe's own choice: OPENBLAS_CORETYPE
// or ATEN_CPU_CAPABILITY with its marker set (else a value there is the user's).
bool set_by_actorpipe(const char* variable);

// The allocator this process runs on: "tcmalloc (gperftools 2.10)" where the program was linked
// with it (CMake's actorpipe_allocator) or it was preloaded, else "glibc malloc".
std::string describe_allocator();

// actorpipe's own loops and the build of each this CPU runs: "GELU and AdamW AVX2, attention
// AVX2+FMA" (core/simd_clones.hpp's clones; core/model/attention_kernel.hpp, which serves head
// sizes that are multiples of 16, or says "LibTorch's ops" where it serves none).
std::string describe_own_kernels();

// The build of the GELU and AdamW loops this CPU runs: "AVX-512", "AVX2", "x86-64" or "plain".
std::string own_loops_isa();

// Makes this process's OpenBLAS compute on `coretype`'s kernels from now on, as if
// OPENBLAS_CORETYPE had been set when it loaded (it sets that variable too, so child processes
// load on them). An OpenBLAS built for several cores (DYNAMIC_ARCH, as Debian's) picks its
// kernel table in gotoblas_dynamic_init, reading the variable, and exports it and
// gotoblas_dynamic_quit, which drops the table; buffers and block sizes are taken from the
// table at each call, so the change holds from the next call. Call it with no BLAS call under
// way in any thread. Returns false, changing nothing, where it cannot: not OpenBLAS, built
// for one core, or built without `coretype` (its gotoblas_<CORE> table is missing).
bool switch_openblas_kernels(const std::string& coretype);

// Call first thing in main(), before any tensor operation:
//  - on an AVX-512 CPU, sets ATEN_CPU_CAPABILITY=avx512 unless the user set it;
//  - where OpenBLAS runs generic kernels on a CPU that supports better ones, sets
//    OPENBLAS_CORETYPE and switches OpenBLAS to that core in place (switch_openblas_kernels);
//    where this OpenBLAS cannot switch, re-executes the program once with the same arguments
//    (OpenBLAS reads the variable when it loads).
// Never overrides a value the user set. Returns when nothing needs changing, after a switch,
// or when the restart failed (then a warning goes to stderr).
void ensure_best_blas_kernels(char** argv);

}  // namespace actorpipe
