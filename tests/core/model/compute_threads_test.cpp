// LibTorch's vectorised kernels: this test process (tests/main.cpp makes the binary's start-up
// call) dispatches to the widest ones the CPU supports, unless the user chose, and the run
// summary's text says which and who chose.
#include "core/model/compute_threads.hpp"

#include <cstdlib>
#include <string>

#include <catch2/catch.hpp>

#include "core/blas_kernels.hpp"

using namespace actorpipe;

CATCH_TEST_CASE("ATen's kernels are chosen for AVX-512 CPUs unless the user set them", "[model][blas]") {
  CATCH_CHECK(choose_aten_capability(simd_level::avx512_bf16, nullptr) == "avx512");
  CATCH_CHECK(choose_aten_capability(simd_level::avx512, "") == "avx512");  // empty counts as unset
  CATCH_CHECK(choose_aten_capability(simd_level::avx2, nullptr).empty());    // LibTorch's own detection
  CATCH_CHECK(choose_aten_capability(simd_level::sse, nullptr).empty());
  CATCH_CHECK(choose_aten_capability(simd_level::avx512_bf16, "avx2").empty());  // the user's value stays
}

CATCH_TEST_CASE("this test process runs LibTorch's kernels for its CPU", "[model][blas]") {
  const std::string kernels = aten_kernels();
  CATCH_INFO("LibTorch reports: " << libtorch_version());
  CATCH_REQUIRE(!kernels.empty());
  const char* value = std::getenv(aten_capability_variable);
  const char* marker = std::getenv(aten_marker_variable);
  const bool user_set = value != nullptr && *value != '\0' && (marker == nullptr || *marker == '\0');
  if (user_set) {
    CATCH_CHECK(aten_capability_origin(kernels).find("set by the user") != std::string::npos);
  } else if (cpu_simd_level() >= simd_level::avx512) {
    CATCH_CHECK(kernels == "AVX512");
    CATCH_CHECK(libtorch_version().find("AVX512 kernels (chosen by actorpipe for this CPU's AVX-512") !=
                std::string::npos);
  } else {
    CATCH_CHECK(libtorch_version().find("kernels (detected by LibTorch)") != std::string::npos);
  }
}
