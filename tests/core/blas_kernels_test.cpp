// BLAS kernel choice: the decision table, and that this test process itself runs on the
// kernels actorpipe chooses (tests/main.cpp makes the same start-up call as the binary).
#include <catch2/catch.hpp>

#include <cstdlib>
#include <string>

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

CATCH_TEST_CASE("the kernels are restarted only when OpenBLAS fell back and nobody chose", "[core][blas]") {
  // The case of Debian's OpenBLAS 0.3.21 on AMD Zen 4: generic Prescott kernels on AVX-512 BF16.
  auto c = choose_blas_kernels("Prescott", simd_level::avx512_bf16, nullptr, nullptr);
  CATCH_CHECK(c.restart);
  CATCH_CHECK(c.coretype == "Cooperlake");
  c = choose_blas_kernels("Sandybridge", simd_level::avx2, nullptr, nullptr);
  CATCH_CHECK(c.restart);
  CATCH_CHECK(c.coretype == "Haswell");
  c = choose_blas_kernels("Prescott", simd_level::avx512, "", "");  // empty values count as unset
  CATCH_CHECK(c.restart);
  CATCH_CHECK(c.coretype == "SkylakeX");
  // The user's value is never overridden, whatever it is.
  CATCH_CHECK_FALSE(choose_blas_kernels("Prescott", simd_level::avx512_bf16, "Prescott", nullptr).restart);
  // Already restarted once (the marker): never again, even if the asked-for core was refused.
  CATCH_CHECK_FALSE(choose_blas_kernels("Prescott", simd_level::avx512_bf16, "Cooperlake", "Prescott").restart);
  // OpenBLAS's own detection is kept when it matches the CPU.
  CATCH_CHECK_FALSE(choose_blas_kernels("Zen", simd_level::avx2, nullptr, nullptr).restart);
  CATCH_CHECK_FALSE(choose_blas_kernels("Cooperlake", simd_level::avx512_bf16, nullptr, nullptr).restart);
  CATCH_CHECK_FALSE(choose_blas_kernels("SkylakeX", simd_level::avx512, nullptr, nullptr).restart);
  // Nothing better to pick on an SSE-only CPU.
  CATCH_CHECK_FALSE(choose_blas_kernels("Prescott", simd_level::sse, nullptr, nullptr).restart);
}

CATCH_TEST_CASE("this test process computes on the kernels actorpipe picks", "[core][blas]") {
  const blas_info info = current_blas();
  if (!info.openblas) {
    CATCH_CHECK(describe_blas(info) == "BLAS: not OpenBLAS (LibTorch's own)");
    return;
  }
  CATCH_INFO(describe_blas(info));
  CATCH_CHECK(!info.core.empty());
  const char* coretype = std::getenv("OPENBLAS_CORETYPE");
  const char* marker = std::getenv(blas_marker_variable);
  if (coretype != nullptr && *coretype != '\0' && (marker == nullptr || *marker == '\0')) {
    CATCH_CHECK(info.origin == "OPENBLAS_CORETYPE=" + std::string(coretype) + " set by the user");
  } else {
    // Either OpenBLAS found the right core itself or actorpipe restarted us on the best one.
    CATCH_CHECK(openblas_core_level(info.core) >= cpu_simd_level());
    CATCH_CHECK(describe_blas(info).find("kernels " + info.core) != std::string::npos);
  }
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
