// adamw_kernel's loops against their per-element definition, on this process's clone of the
// loops (AVX-512, AVX2 or plain: whichever the CPU, or valgrind's emulated CPU, offers), bit for
// bit: one AdamW update of 100003 elements and the sum of squares of the gradients. Prints the
// clone-independent hash of every output, so that two runs on different clones can be compared
// (tests/core/kernel_clones.sh). Built with -ffp-contract=off, as the kernel is: the definition
// here must round each line as the loop does. Exit status 1 on any mismatch. No torch, no Catch:
// it must run under valgrind quickly.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>

#include "core/optim/adamw_kernel.hpp"
#include "tests/core/kernel_check.hpp"

using actorpipe::kernel_check::hash_bytes;

int main() {
  const std::int64_t n = 100003;  // odd: the loops' vector part and remainder both run
  std::vector<float> p(n), g(n), m(n), v(n);
  std::uint64_t state = 7;
  auto uniform = [&state](double lo, double hi) {
    state = state * 6364136223846793005ULL + 1442695040888963407ULL;
    return static_cast<float>(lo + (hi - lo) * static_cast<double>(state >> 40) / (1 << 24));
  };
  for (std::int64_t i = 0; i < n; ++i) {
    p[i] = uniform(-2, 2);
    g[i] = uniform(-0.5, 0.5) * (i % 7 == 0 ? 1e-4f : 1.0f);
    m[i] = uniform(-0.1, 0.1);
    v[i] = i % 11 == 0 ? 0.0f : uniform(0, 0.01);
  }
  // Step 3 at lr 3e-3, weight decay 0.1, beta1 0.9, beta2 0.95, the gradient clipped by 0.37.
  const double lr = 3e-3, b1 = 0.9, b2 = 0.95;
  const actorpipe::adamw_scalars s{static_cast<float>(1.0 - lr * 0.1), static_cast<float>(b1), static_cast<float>(1.0 - b1),
                                   static_cast<float>(b2), static_cast<float>(1.0 - b2), static_cast<float>(1.0 - std::pow(b2, 3)),
                                   1e-8f, static_cast<float>(-lr / (1.0 - std::pow(b1, 3))), 0.37f};
  const double sum = actorpipe::sum_of_squares(g.data(), n);
  std::vector<float> p1 = p, m1 = m, v1 = v;
  actorpipe::adamw_float(p1.data(), g.data(), m1.data(), v1.data(), n, s);

  std::int64_t mismatches = 0;
  for (std::int64_t i = 0; i < n; ++i) {  // the definition, element by element
    const float gi = g[i] * s.grad_scale;
    const float mi = m[i] * s.beta1 + gi * s.one_minus_beta1;
    const float vi = v[i] * s.beta2 + (gi * gi) * s.one_minus_beta2;
    const float denom = std::sqrt(vi / s.bias2) + s.eps;
    const float pi = p[i] * s.decay + s.step * (mi / denom);
    mismatches += std::memcmp(&pi, &p1[i], 4) != 0;
    mismatches += std::memcmp(&mi, &m1[i], 4) != 0;
    mismatches += std::memcmp(&vi, &v1[i], 4) != 0;
  }
  double lanes[16] = {}, tail = 0;  // sum_of_squares' order: lane i % 16, the tail apart
  std::int64_t i = 0;
  for (; i + 16 <= n; i += 16)
    for (int j = 0; j < 16; ++j) lanes[j] += static_cast<double>(g[i + j]) * static_cast<double>(g[i + j]);
  for (; i < n; ++i) tail += static_cast<double>(g[i]) * static_cast<double>(g[i]);
  for (int width = 8; width >= 1; width /= 2)
    for (int j = 0; j < width; ++j) lanes[j] += lanes[j + width];
  const double expected = lanes[0] + tail;
  mismatches += std::memcmp(&expected, &sum, sizeof sum) != 0;

  std::uint64_t hash = actorpipe::kernel_check::hash_start;
  hash = hash_bytes(hash, p1.data(), n * sizeof(float));
  hash = hash_bytes(hash, m1.data(), n * sizeof(float));
  hash = hash_bytes(hash, v1.data(), n * sizeof(float));
  hash = hash_bytes(hash, &sum, sizeof sum);
  std::printf("clone %s\n", actorpipe::kernel_check::clone_name());
  std::printf("outputs hash %016llx, %lld of %lld differ from the per-element definition\n",
              static_cast<unsigned long long>(hash), static_cast<long long>(mismatches), static_cast<long long>(3 * n + 1));
  return mismatches == 0 ? 0 : 1;
}
