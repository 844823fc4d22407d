// GELU (tanh approximation) kernels: see gelu_kernel.hpp. Built with -O3 -ffp-contract=off
// -fno-trapping-math (core/CMakeLists.txt) so that the loops vectorise and every clone rounds alike.
#include "core/model/gelu_kernel.hpp"

#include <cstring>

#include "core/model/exp_kernel.hpp"
#include "core/simd_clones.hpp"

namespace actorpipe {
namespace {

constexpr float sqrt_2_over_pi = 0.7978845608028654f;
constexpr float cubic = 0.044715f;

inline float exp_nonpositive(float v) { return actorpipe::exp_nonpositive(v, [](float n) { return two_to_the(n); }); }

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
