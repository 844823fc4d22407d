// gelu_kernel's loops against its per-element function, on this process's clone of the loops
// (AVX-512, AVX2 or plain: whichever the CPU, or valgrind's emulated CPU, offers), bit for bit,
// over 100003 values across [-20, 20). Prints the clone-independent hash of every output, so
// that two runs on different clones can be compared (tests/core/kernel_clones.sh).
// Exit status 1 on any mismatch. No torch, no Catch: it must run under valgrind quickly.
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>

#include "core/model/gelu_kernel.hpp"
#include "tests/core/kernel_check.hpp"

namespace {
std::uint32_t bits_of(float f) {
  std::uint32_t b;
  std::memcpy(&b, &f, sizeof b);
  return b;
}
}  // namespace

int main() {
  const std::int64_t n = 100003;  // odd: the loops' vector part and remainder both run
  std::vector<float> x(n), g(n), y(n), gx(n);
  std::uint64_t state = 1;
  for (std::int64_t i = 0; i < n; ++i) {
    state = state * 6364136223846793005ULL + 1442695040888963407ULL;
    x[i] = static_cast<float>((static_cast<double>(state >> 40) / (1 << 24) - 0.5) * 40.0);
    g[i] = static_cast<float>((static_cast<double>(state >> 20 & 0xFFFFF) / (1 << 20) - 0.5) * 4.0);
  }
  actorpipe::gelu_tanh_forward(x.data(), y.data(), n);
  actorpipe::gelu_tanh_backward(g.data(), x.data(), gx.data(), n);
  std::uint64_t hash = actorpipe::kernel_check::hash_start;
  std::int64_t mismatches = 0;
  for (std::int64_t i = 0; i < n; ++i) {
    hash = actorpipe::kernel_check::hash_bytes(hash, &y[i], sizeof(float));
    hash = actorpipe::kernel_check::hash_bytes(hash, &gx[i], sizeof(float));
    if (bits_of(y[i]) != bits_of(actorpipe::gelu_tanh_value(x[i]))) ++mismatches;
    if (bits_of(gx[i]) != bits_of(g[i] * actorpipe::gelu_tanh_derivative(x[i]))) ++mismatches;
  }
  std::printf("clone %s\n", actorpipe::kernel_check::clone_name());
  std::printf("outputs hash %016llx, %lld of %lld differ from the per-element function\n",
              static_cast<unsigned long long>(hash), static_cast<long long>(mismatches), static_cast<long long>(2 * n));
  return mismatches == 0 ? 0 : 1;
}
