// e^v for v <= 0, branch-free, for the kernels' loops (gelu_kernel: scalar code the compiler
// vectorises; attention_kernel: 16-float GCC vectors). v = n ln2 + r with |r| <= ln2 / 2, e^r by
// its Taylor polynomial to r^8 / 8! (error below 2^-26 on that range), times 2^n built in the
// exponent bits; 0 below -87 (e^v there is under 2^-125, near float's smallest normal). Each
// kernel's compile flags decide whether multiply-adds fuse (GELU: never; attention: always).
#pragma once

#include <cstdint>
#include <cstring>

namespace actorpipe {

// F: float or a GCC vector of floats; two_to_the(n) returns 2^n (lane-wise) for integral n in
// [-126, 0], F-typed.
template <class F, class TwoTo>
inline __attribute__((always_inline)) F exp_nonpositive(F v, TwoTo two_to_the) {
  const F lo = F{} + -87.0f;
  const auto underflow = v < lo;
  v = v >= lo ? v : lo;  // NaN too: the int conversion must see a number (a NaN input still comes
                         // out NaN where the callers multiply by it)
  // Round v / ln2 to an integer: adding and removing 1.5 * 2^23 rounds to nearest.
  const F shifter = F{} + 12582912.0f;
  const F n = (v * 1.44269504088896341f + shifter) - shifter;
  const F r = (v - n * 0.693359375f) + n * 2.12194440e-4f;  // ln2 in two parts: r exact enough
  F p = F{} + 1.0f / 40320.0f;
  p = p * r + 1.0f / 5040.0f;
  p = p * r + 1.0f / 720.0f;
  p = p * r + 1.0f / 120.0f;
  p = p * r + 1.0f / 24.0f;
  p = p * r + 1.0f / 6.0f;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  const F e = p * two_to_the(n);
  return underflow ? F{} : e;
}

// 2^n for one float n (integral, in [-126, 127]).
inline float two_to_the(float n) {
  const std::int32_t bits = (static_cast<std::int32_t>(n) + 127) << 23;
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

}  // namespace actorpipe
