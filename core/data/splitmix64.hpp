// splitmix64 (Steele, Lea, Flood 2014): a bijective 64-bit mix. The data sources use it to
// turn (seed, step, index) into a key and as a per-sequence generator, so sampling has no
// shared state and is the same on every thread and process.
#pragma once

#include <cstdint>

namespace actorpipe {

inline std::uint64_t splitmix64(std::uint64_t x) {
  std::uint64_t z = x + 0x9e3779b97f4a7c15ULL;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

}  // namespace actorpipe
