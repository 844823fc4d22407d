// What the kernel clone checks share (gelu_clones_check, adamw_clones_check; run by
// tests/core/kernel_clones.sh): the clone this process runs, and the hash of the outputs.
#pragma once

#include <cstddef>
#include <cstdint>

namespace actorpipe::kernel_check {

// The clone the loader picked, from the same CPU test the resolver makes (or the plain build).
inline const char* clone_name() {
#ifdef ACTORPIPE_NO_SIMD_CLONES
  return "plain x86-64 build";
#else
  return __builtin_cpu_supports("avx512f") ? "avx512f" : __builtin_cpu_supports("avx2") ? "avx2" : "default";
#endif
}

constexpr std::uint64_t hash_start = 1469598103934665603ULL;

// FNV-1a over `size` bytes at p, continuing from `hash`.
inline std::uint64_t hash_bytes(std::uint64_t hash, const void* p, std::size_t size) {
  const auto* b = static_cast<const unsigned char*>(p);
  for (std::size_t i = 0; i < size; ++i) hash = (hash ^ b[i]) * 1099511628211ULL;
  return hash;
}

}  // namespace actorpipe::kernel_check
