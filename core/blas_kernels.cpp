// OpenBLAS kernel choice: CPUID against the core OpenBLAS detected and, where it fell back to
// generic kernels, OPENBLAS_CORETYPE and a switch in place (or a one-time re-exec).
#include "core/blas_kernels.hpp"

#include <dlfcn.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

#include "core/log.hpp"
#include "core/proc_files.hpp"
#include "core/simd_clones.hpp"
#include "core/text_file.hpp"
#include "core/model/attention_kernel.hpp"

namespace actorpipe {
namespace {

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}

bool set_and_nonempty(const char* v) { return v != nullptr && *v != '\0'; }

bool restarted_for_kernels = false;  // this process is the restart of ensure_best_blas_kernels

template <typename Fn>
Fn find_symbol(const char* name) {
  return reinterpret_cast<Fn>(::dlsym(RTLD_DEFAULT, name));
}

}  // namespace

std::string simd_level_name(simd_level level) {
  switch (level) {
    case simd_level::sse: return "SSE";
    case simd_level::avx: return "AVX";
    case simd_level::avx2: return "AVX2";
    case simd_level::avx512: return "AVX-512";
    case simd_level::avx512_bf16: return "AVX-512 BF16";
  }
  return "SSE";
}

simd_level cpu_simd_level() {
#if defined(__x86_64__) || defined(__i386__)
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (!__get_cpuid(1, &a, &b, &c, &d)) return simd_level::sse;
  const bool osxsave = c & (1u << 27), avx = c & (1u << 28), fma = c & (1u << 12);
  if (!osxsave || !avx) return simd_level::sse;
  unsigned xcr0_lo = 0, xcr0_hi = 0;
  __asm__ volatile("xgetbv" : "=a"(xcr0_lo), "=d"(xcr0_hi) : "c"(0));
  if ((xcr0_lo & 0x6u) != 0x6u) return simd_level::sse;  // the OS saves no YMM state
  if (__get_cpuid_max(0, nullptr) < 7) return simd_level::avx;
  unsigned a7 = 0, b7 = 0, c7 = 0, d7 = 0;
  __cpuid_count(7, 0, a7, b7, c7, d7);
  const bool avx2 = b7 & (1u << 5);
  if (!avx2 || !fma) return simd_level::avx;
  // SkylakeX kernels use AVX-512 F, CD, BW, DQ and VL; the OS must save opmask and ZMM state.
  const unsigned need = (1u << 16) | (1u << 17) | (1u << 28) | (1u << 30) | (1u << 31);
  if ((b7 & need) != need || (xcr0_lo & 0xe0u) != 0xe0u) return simd_level::avx2;
  unsigned a71 = 0, b71 = 0, c71 = 0, d71 = 0;
  __cpuid_count(7, 1, a71, b71, c71, d71);
  return (a71 & (1u << 5)) ? simd_level::avx512_bf16 : simd_level::avx512;
#else
  return simd_level::sse;
#endif
}

simd_level openblas_core_level(const std::string& core) {
  const std::string c = lower(core);
  if (c == "cooperlake" || c == "sapphirerapids") return simd_level::avx512_bf16;
  if (c == "skylakex") return simd_level::avx512;
  if (c == "haswell" || c == "zen") return simd_level::avx2;
  if (c == "sandybridge" || c == "bulldozer" || c == "piledriver" || c == "steamroller" || c == "excavator")
    return simd_level::avx;
  return simd_level::sse;
}

std::string best_openblas_core(simd_level cpu) {
  switch (cpu) {
    case simd_level::avx512_bf16: return "Cooperlake";
    case simd_level::avx512: return "SkylakeX";
    case simd_level::avx2: return "Haswell";
    case simd_level::avx: return "Sandybridge";
    case simd_level::sse: return "";
  }
  return "";
}

namespace {
// Whether the marker says actorpipe chose this OPENBLAS_CORETYPE: the marker is inherited by
// every process a run starts (a data script, a launched program), which may set a core of its
// own; then the core is the user's. actorpipe only ever sets the best core for the CPU.
bool chosen_by_actorpipe(const char* coretype, const char* marker, simd_level cpu) {
  return set_and_nonempty(coretype) && set_and_nonempty(marker) && lower(coretype) == lower(best_openblas_core(cpu));
}
}  // namespace

blas_choice choose_blas_kernels(const std::string& detected_core, simd_level cpu, const char* user_coretype,
                                const char* /*marker: the choice is kept by OPENBLAS_CORETYPE itself*/) {
  blas_choice choice;
  if (set_and_nonempty(user_coretype)) return choice;  // the user's, or actorpipe's before a restart
  if (openblas_core_level(detected_core) >= cpu) return choice;
  choice.coretype = best_openblas_core(cpu);
  choice.change = !choice.coretype.empty();
  return choice;
}

blas_info current_blas() {
  blas_info info;
  auto get_core = find_symbol<char* (*)()>("openblas_get_corename");
  auto get_config = find_symbol<char* (*)()>("openblas_get_config");
  if (get_core == nullptr) {
    info.origin = "not OpenBLAS";
    return info;
  }
  info.openblas = true;
  if (const char* core = get_core()) info.core = core;
  if (get_config != nullptr)
    if (const char* config = get_config()) info.config = config;
  if (void* sgemm = ::dlsym(RTLD_DEFAULT, "sgemm_")) {  // the library that defines it: an OpenBLAS?
    Dl_info where{};
    if (::dladdr(sgemm, &where) != 0 && where.dli_fname != nullptr) {
      void* library = ::dlopen(where.dli_fname, RTLD_LAZY | RTLD_NOLOAD);  // loaded already: only a handle
      if (library != nullptr) {
        if (::dlsym(library, "openblas_get_corename") == nullptr) info.other_sgemm = where.dli_fname;
        ::dlclose(library);
      }
    }
  }
  const char* coretype = std::getenv("OPENBLAS_CORETYPE");
  const char* marker = std::getenv(blas_marker_variable);
  const simd_level cpu = cpu_simd_level();
  if (chosen_by_actorpipe(coretype, marker, cpu)) {
    info.origin = "chosen by actorpipe for this CPU's " + simd_level_name(cpu) + "; OpenBLAS alone picked " + marker;
    if (lower(coretype) != lower(info.core))
      info.origin += "; actorpipe asked for " + std::string(coretype) + " but OpenBLAS runs " + info.core;
    if (restarted_for_kernels) info.origin += "; the program restarted once to load them";
  } else if (set_and_nonempty(coretype)) {
    info.origin = "OPENBLAS_CORETYPE=" + shown_text(coretype, 40) + " set by the user";
    // A core OpenBLAS does not have (a typo, or one this build has no kernels for) is ignored:
    // it picks one itself, maybe a generic one.
    info.user_core_ignored = lower(coretype) != lower(info.core);
    if (info.user_core_ignored)
      info.origin += ", a core this OpenBLAS does not have (or cannot run here): it picked " + info.core + " itself";
  } else {
    info.origin = "detected by OpenBLAS";
    if (openblas_core_level(info.core) < cpu)
      info.origin += "; generic for this CPU's " + simd_level_name(cpu) + ", so slow: set OPENBLAS_CORETYPE=" +
                     best_openblas_core(cpu);
  }
  return info;
}

std::string describe_blas(const blas_info& info) {
  if (!info.openblas) return "BLAS: not OpenBLAS (LibTorch's own)";
  std::string config = info.config.empty() ? "OpenBLAS" : info.config;
  if (!info.other_sgemm.empty())
    return "BLAS: matrix products from " + info.other_sgemm + ", not from the " + config +
           " also loaded (a reference BLAS is ~20x slower: check LD_LIBRARY_PATH and update-alternatives --display "
           "libblas.so.3-x86_64-linux-gnu)";
  return "BLAS: " + config + "; kernels " + info.core + " (" + info.origin + ")";
}

std::string own_loops_isa() {
#ifdef ACTORPIPE_HAS_SIMD_CLONES
  return __builtin_cpu_supports("avx512f") ? "AVX-512" : __builtin_cpu_supports("avx2") ? "AVX2" : "x86-64";
#else
  return "plain";
#endif
}

std::string describe_own_kernels() {
  const char* attention = causal_attention_kernel_isa();
  return "GELU and AdamW " + own_loops_isa() + ", attention " + (attention ? attention : "LibTorch's ops");
}

std::string describe_allocator() {
  auto version = find_symbol<const char* (*)(int*, int*, const char**)>("tc_version");
  if (version == nullptr) return "glibc malloc";
  int major = 0, minor = 0;
  const char* patch = nullptr;
  const char* text = version(&major, &minor, &patch);
  return std::string("tcmalloc (") + (text != nullptr ? text : "gperftools") + ")";
}

namespace {
// The only value actorpipe sets ATEN_CPU_CAPABILITY to.
constexpr char aten_choice[] = "avx512";

// Whether the marker says actorpipe chose ATEN_CPU_CAPABILITY's value (an inherited marker
// beside a value of the user's does not), as chosen_by_actorpipe for OPENBLAS_CORETYPE.
bool aten_chosen_by_actorpipe(const char* value, const char* marker) {
  return set_and_nonempty(value) && set_and_nonempty(marker) && std::string(value) == aten_choice;
}
}  // namespace

std::string choose_aten_capability(simd_level cpu, const char* user_value) {
  if (set_and_nonempty(user_value) || cpu < simd_level::avx512) return "";
  return aten_choice;
}

std::string aten_capability_origin(const std::string& capability) {
  const char* value = std::getenv(aten_capability_variable);
  std::string origin;
  if (aten_chosen_by_actorpipe(value, std::getenv(aten_marker_variable)))
    origin = "chosen by actorpipe for this CPU's " + simd_level_name(cpu_simd_level());
  else if (set_and_nonempty(value))
    origin = std::string(aten_capability_variable) + "=" + value + " set by the user";
  else
    origin = "detected by LibTorch";
  if (set_and_nonempty(value)) {
    // LibTorch takes these, as written (AVX512 or Default it ignores, glog says so once): a
    // value it does not know is said so, not as if that kernel had been asked for and denied.
    const std::string asked = value;
    const bool known = asked == "default" || asked == "avx2" || asked == "avx512" || asked == "zvector" ||
                       asked == "vsx" || asked == "neon";
    // "default" runs the kernels LibTorch reports as NO AVX.
    const bool honoured = lower(asked) == lower(capability) || (asked == "default" && lower(capability) == "no avx");
    if (!known)
      origin += "; " + asked + " is not a value LibTorch knows (default, avx2, avx512, in lower case): it detected the "
                               "kernels itself";
    else if (!honoured)
      origin += "; " + asked + " was asked for";
  }
  return origin;
}

bool set_by_actorpipe(const char* variable) {
  const std::string name = variable;
  if (name == "OPENBLAS_CORETYPE")
    return chosen_by_actorpipe(std::getenv(name.c_str()), std::getenv(blas_marker_variable), cpu_simd_level());
  if (name == aten_capability_variable)
    return aten_chosen_by_actorpipe(std::getenv(name.c_str()), std::getenv(aten_marker_variable));
  return false;
}

bool switch_openblas_kernels(const std::string& coretype) {
  auto quit = find_symbol<void (*)()>("gotoblas_dynamic_quit");
  auto init = find_symbol<void (*)()>("gotoblas_dynamic_init");
  std::string core = coretype;  // its kernel table: gotoblas_SKYLAKEX
  std::transform(core.begin(), core.end(), core.begin(), [](unsigned char c) { return static_cast<char>(std::toupper(c)); });
  const std::string table = "gotoblas_" + core;
  // An unknown name would make gotoblas_dynamic_init fall back to generic kernels or exit.
  if (quit == nullptr || init == nullptr || coretype.empty() || find_symbol<const void*>(table.c_str()) == nullptr)
    return false;
  ::setenv("OPENBLAS_CORETYPE", coretype.c_str(), 1);
  quit();
  init();
  return true;
}

void ensure_best_blas_kernels(char** argv) {
  if (set_and_nonempty(std::getenv(blas_restarted_variable))) restarted_for_kernels = true;
  ::unsetenv(blas_restarted_variable);
  const std::string aten = choose_aten_capability(cpu_simd_level(), std::getenv(aten_capability_variable));
  if (!aten.empty()) {
    ::setenv(aten_capability_variable, aten.c_str(), 1);
    ::setenv(aten_marker_variable, "1", 1);
  }
  auto get_core = find_symbol<char* (*)()>("openblas_get_corename");
  if (get_core == nullptr) return;
  // Test hook: pretend OpenBLAS detected this core, to exercise the change on any machine.
  const char* pretend = std::getenv(blas_pretend_variable);
  const char* detected_c = set_and_nonempty(pretend) ? pretend : get_core();
  const std::string detected = detected_c ? detected_c : "";
  const blas_choice choice = choose_blas_kernels(detected, cpu_simd_level(), std::getenv("OPENBLAS_CORETYPE"),
                                                 std::getenv(blas_marker_variable));
  if (!choice.change) return;
  ::setenv(blas_marker_variable, detected.c_str(), 1);
  ::unsetenv(blas_pretend_variable);
  const bool restart_anyway = set_and_nonempty(std::getenv(blas_restart_variable));
  ::unsetenv(blas_restart_variable);
  if (!restart_anyway && switch_openblas_kernels(choice.coretype)) return;  // nothing has called BLAS yet
  int err = EINVAL;  // no argv to restart with
  if (argv != nullptr && argv[0] != nullptr) {
    ::setenv("OPENBLAS_CORETYPE", choice.coretype.c_str(), 1);
    ::setenv(blas_restarted_variable, "1", 1);
    int argc = 0;
    while (argv[argc] != nullptr) ++argc;
    // Started through the dynamic loader, /proc/self/exe is the loader: it gets its options
    // and the program again, before the program's arguments.
    std::vector<std::string> loader = loader_arguments(argc, argv);
    std::vector<char*> args{argv[0]};
    for (std::string& a : loader) args.push_back(a.data());
    args.insert(args.end(), argv + 1, argv + argc + 1);  // and the closing nullptr
    std::fflush(nullptr);
    ::execv("/proc/self/exe", args.data());
    err = errno;
    ::unsetenv(blas_restarted_variable);
  }
  ::unsetenv("OPENBLAS_CORETYPE");
  ::unsetenv(blas_marker_variable);
  // The first thing main does: nothing is set up yet, so this goes out on the default log.
  log_warn("OpenBLAS runs its generic " + detected + " kernels on a CPU with " + simd_level_name(cpu_simd_level()) +
           ", and restarting with OPENBLAS_CORETYPE=" + choice.coretype + " failed (" + std::strerror(err) +
           "); set that variable yourself for up to 4x faster matrix products");
}

}  // namespace actorpipe
