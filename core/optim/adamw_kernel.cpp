// AdamW and sum-of-squares loops: see adamw_kernel.hpp. Built with -O3 -ffp-contract=off
// -fno-math-errno (core/CMakeLists.txt) so that the loops vectorise (sqrt without errno) and
// every clone rounds alike.
#include "core/optim/adamw_kernel.hpp"

#include <cmath>

#include "core/simd_clones.hpp"

namespace actorpipe {

ACTORPIPE_SIMD_CLONES
void adamw_float(float* p, const float* grad, float* m, float* v, std::int64_t n, const adamw_scalars& s) {
  const adamw_scalars c = s;  // by value: the loop must not reload through a pointer it may alias
  for (std::int64_t i = 0; i < n; ++i) {
    const float g = grad[i] * c.grad_scale;
    const float mi = m[i] * c.beta1 + g * c.one_minus_beta1;
    const float vi = v[i] * c.beta2 + (g * g) * c.one_minus_beta2;
    const float denom = std::sqrt(vi / c.bias2) + c.eps;
    p[i] = p[i] * c.decay + c.step * (mi / denom);
    m[i] = mi;
    v[i] = vi;
  }
}

ACTORPIPE_SIMD_CLONES
double sum_of_squares(const float* x, std::int64_t n) {
  constexpr int lanes = 16;
  double acc[lanes] = {};
  std::int64_t i = 0;
  for (; i + lanes <= n; i += lanes)
    for (int j = 0; j < lanes; ++j) {
      const double d = x[i + j];
      acc[j] += d * d;
    }
  double tail = 0;
  for (; i < n; ++i) {
    const double d = x[i];
    tail += d * d;
  }
  for (int width = lanes / 2; width >= 1; width /= 2)
    for (int j = 0; j < width; ++j) acc[j] += acc[j + width];
  return acc[0] + tail;
}

}  // namespace actorpipe
