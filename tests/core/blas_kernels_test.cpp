// BLAS kernel choice: the decision table, and that this test process itself runs on the
// kernels actorpipe chooses (tests/main.cpp makes the same start-up call as the binary).
#include <catch2/catch.hpp>

#include <dlfcn.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "core/blas_kernels.hpp"

using namespace actorpipe;

CATCH_TEST_CASE("OpenBLAS core names map to the instruction sets their kernels need", "[core][blas]") {
  CATCH_CHECK(openblas_core_level("Prescott") == simd_level::sse);
  CATCH_CHECK(openblas_core_level("Core2") == simd_level::sse);
  CATCH_CHECK(openblas_core_level("Unknown") == simd_level::sse);
  CATCH_CHECK(openblas_core_level("Sandybridge") == simd_level::avx);
  CATCH_CHECK(openblas_core_level("Excavator") == simd_level::avx);
  CATCH_CHECK(openblas_core_level("Haswell") == simd_level::avx2);
  CATCH_CHECK(openblas_core_level("zen") == simd_level::avx2);
  CATCH_CHECK(openblas_core_level("SKYLAKEX") == simd_level::avx512);
  CATCH_CHECK(openblas_core_level("Cooperlake") == simd_level::avx512_bf16);
  CATCH_CHECK(best_openblas_core(simd_level::avx512_bf16) == "Cooperlake");
  CATCH_CHECK(best_openblas_core(simd_level::avx512) == "SkylakeX");
  CATCH_CHECK(best_openblas_core(simd_level::avx2) == "Haswell");
  CATCH_CHECK(best_openblas_core(simd_level::sse).empty());
  // Every chosen core needs no more than the level it is chosen for.
  for (auto l : {simd_level::avx, simd_level::avx2, simd_level::avx512, simd_level::avx512_bf16})
    CATCH_CHECK(openblas_core_level(best_openblas_core(l)) == l);
}

CATCH_TEST_CASE("the kernels are changed only when OpenBLAS fell back and nobody chose", "[core][blas]") {
  // The case of Debian's OpenBLAS 0.3.21 on AMD Zen 4: generic Prescott kernels on AVX-512 BF16.
  auto c = choose_blas_kernels("Prescott", simd_level::avx512_bf16, nullptr, nullptr);
  CATCH_CHECK(c.change);
  CATCH_CHECK(c.coretype == "Cooperlake");
  c = choose_blas_kernels("Sandybridge", simd_level::avx2, nullptr, nullptr);
  CATCH_CHECK(c.change);
  CATCH_CHECK(c.coretype == "Haswell");
  c = choose_blas_kernels("Prescott", simd_level::avx512, "", "");  // empty values count as unset
  CATCH_CHECK(c.change);
  CATCH_CHECK(c.coretype == "SkylakeX");
  // The user's value is never overridden, whatever it is.
  CATCH_CHECK_FALSE(choose_blas_kernels("Prescott", simd_level::avx512_bf16, "Prescott", nullptr).change);
  // Already chosen once (the marker, inherited or from a restart): never again, even if the
  // asked-for core was refused.
  CATCH_CHECK_FALSE(choose_blas_kernels("Prescott", simd_level::avx512_bf16, "Cooperlake", "Prescott").change);
  // OpenBLAS's own detection is kept when it matches the CPU.
  CATCH_CHECK_FALSE(choose_blas_kernels("Zen", simd_level::avx2, nullptr, nullptr).change);
  CATCH_CHECK_FALSE(choose_blas_kernels("Cooperlake", simd_level::avx512_bf16, nullptr, nullptr).change);
  CATCH_CHECK_FALSE(choose_blas_kernels("SkylakeX", simd_level::avx512, nullptr, nullptr).change);
  // Nothing better to pick on an SSE-only CPU.
  CATCH_CHECK_FALSE(choose_blas_kernels("Prescott", simd_level::sse, nullptr, nullptr).change);
}

CATCH_TEST_CASE("this test process computes on the kernels actorpipe picks", "[core][blas]") {
  const blas_info info = current_blas();
  if (!info.openblas) {
    CATCH_CHECK(describe_blas(info) == "BLAS: not OpenBLAS (LibTorch's own)");
    return;
  }
  CATCH_INFO(describe_blas(info));
  CATCH_CHECK(!info.core.empty());
  CATCH_CHECK(info.other_sgemm.empty());  // LibTorch's sgemm_ is OpenBLAS's here (libblas.so.3 is its alternative)
  const char* coretype = std::getenv("OPENBLAS_CORETYPE");
  const char* marker = std::getenv(blas_marker_variable);
  if (coretype != nullptr && *coretype != '\0' && (marker == nullptr || *marker == '\0')) {
    CATCH_CHECK(info.origin == "OPENBLAS_CORETYPE=" + std::string(coretype) + " set by the user");
  } else {
    // Either OpenBLAS found the right core itself or actorpipe switched it to the best one.
    CATCH_CHECK(openblas_core_level(info.core) >= cpu_simd_level());
    CATCH_CHECK(describe_blas(info).find("kernels " + info.core) != std::string::npos);
  }
}

CATCH_TEST_CASE("OpenBLAS switches its kernels in place, and its products stay exact", "[core][blas]") {
  const blas_info before = current_blas();
  if (!before.openblas) {  // LibTorch's own BLAS (MKL): nothing to switch
    CATCH_CHECK_FALSE(switch_openblas_kernels("SkylakeX"));
    return;
  }
  using sgemm_fn = void (*)(int, int, int, int, int, int, float, const float*, int, const float*, int, float, float*, int);
  auto sgemm = reinterpret_cast<sgemm_fn>(::dlsym(RTLD_DEFAULT, "cblas_sgemm"));
  CATCH_REQUIRE(sgemm != nullptr);
  // Entries k/8 for small integers k: every product and partial sum is a multiple of 1/64 below
  // 2^18, exact in float, so every kernel must give exactly the double-precision product.
  const int m = 96, n = 80, k = 300;
  std::vector<float> a(m * k), b(k * n);
  for (int i = 0; i < m * k; ++i) a[i] = static_cast<float>((i * 7 + 3) % 13 - 6) / 8;
  for (int i = 0; i < k * n; ++i) b[i] = static_cast<float>((i * 5 + 1) % 11 - 5) / 8;
  std::vector<float> expected(m * n);
  for (int r = 0; r < m; ++r)
    for (int c = 0; c < n; ++c) {
      double s = 0;
      for (int j = 0; j < k; ++j) s += static_cast<double>(a[r * k + j]) * b[j * n + c];
      expected[r * n + c] = static_cast<float>(s);
    }
  auto product = [&] {
    std::vector<float> out(m * n, -1.0f);
    sgemm(101 /* row-major */, 111 /* no transpose */, 111, m, n, k, 1.0f, a.data(), k, b.data(), n, 0.0f, out.data(), n);
    return out;
  };
  const char* env = std::getenv("OPENBLAS_CORETYPE");
  const std::string had = env != nullptr ? env : "";
  CATCH_INFO("running " << before.core);
  CATCH_REQUIRE(switch_openblas_kernels("Prescott"));  // generic kernels, on every x86-64 CPU
  CATCH_CHECK(current_blas().core == "Prescott");
  CATCH_CHECK(std::string(std::getenv("OPENBLAS_CORETYPE")) == "Prescott");  // for child processes
  CATCH_CHECK(product() == expected);
  CATCH_CHECK_FALSE(switch_openblas_kernels("NoSuchCore"));  // unknown to this OpenBLAS: nothing changes
  CATCH_CHECK(current_blas().core == "Prescott");
  CATCH_REQUIRE(switch_openblas_kernels(before.core));
  CATCH_CHECK(current_blas().core == before.core);
  CATCH_CHECK(product() == expected);
  if (had.empty())
    ::unsetenv("OPENBLAS_CORETYPE");
  else
    ::setenv("OPENBLAS_CORETYPE", had.c_str(), 1);
}

CATCH_TEST_CASE("the test binaries run on the allocator the build linked", "[core][blas]") {
  const std::string a = describe_allocator();
  CATCH_INFO(a);
#ifdef ACTORPIPE_EXPECT_TCMALLOC
  CATCH_CHECK(a.rfind("tcmalloc (gperftools ", 0) == 0);
#else
  if (std::getenv("LD_PRELOAD") == nullptr) CATCH_CHECK(a == "glibc malloc");
#endif
}

CATCH_TEST_CASE("the run summary names the build of actorpipe's own loops this CPU runs", "[core][blas]") {
  const std::string d = describe_own_kernels();
  CATCH_INFO(d);
  const simd_level cpu = cpu_simd_level();
#if defined(__GNUC__) && defined(__x86_64__) && !defined(__clang__)
  // An AVX2 CPU must get the AVX2 attention build, not a plainer one (on AMD Zen 1 the
  // attention once ran a 64-byte vector build there, at a tenth of its speed).
  if (cpu >= simd_level::avx512)
    CATCH_CHECK(d == "GELU and AdamW AVX-512, attention AVX-512");
  else if (cpu == simd_level::avx2)
    CATCH_CHECK(d == "GELU and AdamW AVX2, attention AVX2+FMA");
  else
    CATCH_CHECK(d.find("attention LibTorch's ops") != std::string::npos);
#else
  CATCH_CHECK(d == "GELU and AdamW plain, attention LibTorch's ops");
#endif
}
