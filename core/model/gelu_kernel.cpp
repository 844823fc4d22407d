// GELU (tanh approximation) kernels: see gelu_kernel.hpp. Built with -O3 -ffp-contract=off
// -fno-trapping-math (core/CMakeLists.txt) so that the loops vectorise and every clone rounds alike.
#include "core/model/gelu_kernel.hpp"

#include <cstring>

#include "core/simd_clones.hpp"

namespace actorpipe {
namespace {

constexpr float sqrt_2_over_pi = 0.7978845608028654f;
constexpr float cubic = 0.044715f;

// e^v for v <= 0: v = n ln2 + r with |r| <= ln2 / 2, e^r by its Taylor polynomial to r^8 / 8!
// (error below 2^-26 on that range), times 2^n built in the exponent bits; 0 below -87 (e^v
// there is under 2^-125, near float's smallest normal). Branch-free, so the loops vectorise.
inline float exp_nonpositive(float v) {
  const bool underflow = v < -87.0f;
  v = v >= -87.0f ? v : -87.0f;  // NaN too: the int conversion below must see a number (a NaN
                                 // input still comes out NaN: the callers multiply by x)
  // Round v / ln2 to an integer: adding and removing 1.5 * 2^23 rounds to nearest.
  const float n = (v * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
  const float r = (v - n * 0.693359375f) + n * 2.12194440e-4f;  // ln2 in two parts: r exact enough
  float p = 1.0f / 40320.0f;
  p = p * r + 1.0f / 5040.0f;
  p = p * r + 1.0f / 720.0f;
  p = p * r + 1.0f / 120.0f;
  p = p * r + 1.0f / 24.0f;
  p = p * r + 1.0f / 6.0f;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  const std::int32_t bits = (static_cast<std::int32_t>(n) + 127) << 23;
  float two_n;
  std::memcpy(&two_n, &bits, sizeof two_n);
  const float e = p * two_n;
  return underflow ? 0.0f : e;
}

// sigmoid(z) and sigmoid(z) * (1 - sigmoid(z)) from e = e^-|z| (never overflows):
// z >= 0: s = 1 / (1 + e); z < 0: s = e / (1 + e); in both s (1 - s) = e / (1 + e)^2.
struct sigmoid_parts {
  float s;
  float s_one_minus_s;
};
// (Both sides of each select are computed first: a select between values vectorises on every
// ISA, a conditional multiply only where the vector unit has masks.)
inline sigmoid_parts sigmoid_of(float z) {
  const float minus_z = -z;
  const float e = exp_nonpositive(z < 0.0f ? z : minus_z);
  const float d = 1.0f / (1.0f + e);
  const float ed = e * d;
  return {z >= 0.0f ? d : ed, ed * d};
}

// gelu_tanh(x) = x (1 + tanh u) / 2 = x sigmoid(2u).
inline float value(float x) {
  const float u = sqrt_2_over_pi * (x + cubic * x * x * x);
  return x * sigmoid_of(2.0f * u).s;
}

// d/dx x sigmoid(2u) = s + x s (1 - s) 2 u', u' = sqrt(2/pi) (1 + 3 * 0.044715 x^2).
inline float derivative(float x) {
  const float x2 = x * x;
  const float u = sqrt_2_over_pi * (x + cubic * x2 * x);
  const sigmoid_parts p = sigmoid_of(2.0f * u);
  const float du = sqrt_2_over_pi * (1.0f + 3.0f * cubic * x2);
  return p.s + 2.0f * x * p.s_one_minus_s * du;
}

}  // namespace

ACTORPIPE_SIMD_CLONES
void gelu_tanh_forward(const float* x, float* y, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) y[i] = value(x[i]);
}

ACTORPIPE_SIMD_CLONES
void gelu_tanh_backward(const float* grad_y, const float* x, float* grad_x, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) grad_x[i] = grad_y[i] * derivative(x[i]);
}

float gelu_tanh_value(float x) { return value(x); }
float gelu_tanh_derivative(float x) { return derivative(x); }

}  // namespace actorpipe
