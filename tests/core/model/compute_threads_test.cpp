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

CATCH_TEST_CASE("a value of ATEN_CPU_CAPABILITY LibTorch does not know is said to be one", "[model][blas]") {
  // It read "bogus was asked for", as if LibTorch had been asked for a kernel and denied it.
  const char* value = std::getenv(aten_capability_variable);
  const char* marker = std::getenv(aten_marker_variable);
  const std::string value_kept = value ? value : "", marker_kept = marker ? marker : "";
  ::setenv(aten_capability_variable, "bogus", 1);
  ::unsetenv(aten_marker_variable);
  const std::string unknown = aten_capability_origin("AVX2");
  ::setenv(aten_capability_variable, "AVX512", 1);  // LibTorch takes lower case only
  const std::string upper = aten_capability_origin("AVX2");
  ::setenv(aten_capability_variable, "default", 1);
  const std::string honoured = aten_capability_origin("NO AVX");
  ::setenv(aten_capability_variable, "avx512", 1);
  const std::string known = aten_capability_origin("AVX2");
  if (value) ::setenv(aten_capability_variable, value_kept.c_str(), 1);
  else ::unsetenv(aten_capability_variable);
  if (marker) ::setenv(aten_marker_variable, marker_kept.c_str(), 1);
  CATCH_CHECK_THAT(unknown, Catch::Contains("ATEN_CPU_CAPABILITY=bogus set by the user; bogus is not a value LibTorch "
                                            "knows (default, avx2, avx512, in lower case): it detected the kernels itself"));
  CATCH_CHECK_THAT(known, Catch::Contains("; avx512 was asked for"));
  CATCH_CHECK_THAT(upper, Catch::Contains("; AVX512 is not a value LibTorch knows"));
  CATCH_CHECK(honoured.find("asked for") == std::string::npos);  // it ran what was asked
}
