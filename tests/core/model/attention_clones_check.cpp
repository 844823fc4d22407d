// attention_kernel's loops on the build this CPU runs (AVX-512 natively on an AVX-512 CPU, AVX2
// + FMA on others and under valgrind's emulated CPU), forward and backward over two shapes (one
// with a sequence that is not a multiple of 16), against attention computed in double: every
// output within 2e-5 of the largest. Prints the hash of every output bit, which must be the
// same on both builds (tests/core/kernel_clones.sh; the loops do not serve CPUs without FMA, so
// there is no plain build to compare). Exit status 1 on a wrong value. No torch, no Catch: it
// runs under valgrind.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <vector>

#include "core/model/attention_kernel.hpp"
#include "tests/core/kernel_check.hpp"

namespace {

using actorpipe::attention_dims;

// out[b, i, head * d + c] and grad_qkv from grad_out, in double, straight from the definition.
void reference(const std::vector<float>& qkv, const std::vector<float>& grad_out, const attention_dims& a,
               std::vector<double>& out, std::vector<double>& grad_qkv) {
  const std::int64_t S = a.seq, d = a.head_dim, H = a.heads * d, row = 3 * H;
  const double scale = 1.0 / std::sqrt(static_cast<double>(d));
  out.assign(a.batch * S * H, 0.0);
  grad_qkv.assign(a.batch * S * row, 0.0);
  for (std::int64_t b = 0; b < a.batch; ++b)
    for (std::int64_t h = 0; h < a.heads; ++h) {
      auto q = [&](std::int64_t i, std::int64_t c) { return double(qkv[(b * S + i) * row + h * d + c]); };
      auto k = [&](std::int64_t i, std::int64_t c) { return double(qkv[(b * S + i) * row + H + h * d + c]); };
      auto v = [&](std::int64_t i, std::int64_t c) { return double(qkv[(b * S + i) * row + 2 * H + h * d + c]); };
      auto go = [&](std::int64_t i, std::int64_t c) { return double(grad_out[(b * S + i) * H + h * d + c]); };
      auto g = [&](std::int64_t i, std::int64_t part, std::int64_t c) -> double& {
        return grad_qkv[(b * S + i) * row + part * H + h * d + c];
      };
      for (std::int64_t i = 0; i < S; ++i) {
        std::vector<double> p(i + 1), dp(i + 1);
        double m = -INFINITY, sum = 0;
        for (std::int64_t j = 0; j <= i; ++j) {
          double s = 0;
          for (std::int64_t c = 0; c < d; ++c) s += q(i, c) * k(j, c);
          p[j] = s * scale;
          m = std::max(m, p[j]);
        }
        for (std::int64_t j = 0; j <= i; ++j) sum += p[j] = std::exp(p[j] - m);
        for (std::int64_t j = 0; j <= i; ++j) p[j] /= sum;
        for (std::int64_t c = 0; c < d; ++c)
          for (std::int64_t j = 0; j <= i; ++j) out[(b * S + i) * H + h * d + c] += p[j] * v(j, c);
        double D = 0;
        for (std::int64_t j = 0; j <= i; ++j) {
          dp[j] = 0;
          for (std::int64_t c = 0; c < d; ++c) dp[j] += go(i, c) * v(j, c);
          D += p[j] * dp[j];
        }
        for (std::int64_t j = 0; j <= i; ++j) {
          const double ds = p[j] * (dp[j] - D) * scale;
          for (std::int64_t c = 0; c < d; ++c) {
            g(i, 0, c) += ds * k(j, c);
            g(j, 1, c) += ds * q(i, c);
            g(j, 2, c) += p[j] * go(i, c);
          }
        }
      }
    }
}

// Largest |got - want| over the largest |want|.
template <class T>
double relative_error(const std::vector<T>& got, const std::vector<double>& want) {
  double err = 0, big = 0;
  for (std::size_t i = 0; i < want.size(); ++i) {
    err = std::max(err, std::abs(double(got[i]) - want[i]));
    big = std::max(big, std::abs(want[i]));
  }
  return err / big;
}

}  // namespace

int main() {
  std::uint64_t hash = actorpipe::kernel_check::hash_start, state = 7;
  auto next = [&] {
    state = state * 6364136223846793005ULL + 1442695040888963407ULL;
    return static_cast<float>((static_cast<double>(state >> 40) / (1 << 24) - 0.5) * 4.0);
  };
  bool ok = true;
  for (const attention_dims a : {attention_dims{2, 37, 3, 16}, attention_dims{1, 128, 2, 64}}) {
    if (!actorpipe::causal_attention_kernel_serves(a)) {
      std::printf("this CPU has no FMA: the loops do not serve it\n");
      return 1;
    }
    const std::int64_t H = a.heads * a.head_dim, Sp = actorpipe::attention_padded_seq(a.seq);
    std::vector<float> qkv(a.batch * a.seq * 3 * H), grad_out(a.batch * a.seq * H);
    for (auto& x : qkv) x = next();
    for (auto& x : grad_out) x = next();
    std::vector<float> out(grad_out.size()), probs(a.batch * a.heads * a.seq * Sp), grad_qkv(qkv.size());
    const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(a.head_dim)));
    actorpipe::causal_attention_forward(qkv.data(), out.data(), probs.data(), a, scale, 0, a.batch * a.heads);
    actorpipe::causal_attention_backward(qkv.data(), probs.data(), grad_out.data(), grad_qkv.data(), a, scale, 0,
                                         a.batch * a.heads);
    std::vector<double> want_out, want_grad;
    reference(qkv, grad_out, a, want_out, want_grad);
    const double e_out = relative_error(out, want_out), e_grad = relative_error(grad_qkv, want_grad);
    std::printf("B %lld S %lld heads %lld d %lld: output within %.1e, gradient within %.1e of double\n",
                static_cast<long long>(a.batch), static_cast<long long>(a.seq), static_cast<long long>(a.heads),
                static_cast<long long>(a.head_dim), e_out, e_grad);
    ok = ok && e_out < 2e-5 && e_grad < 2e-5;
    hash = actorpipe::kernel_check::hash_bytes(hash, out.data(), out.size() * sizeof(float));
    hash = actorpipe::kernel_check::hash_bytes(hash, probs.data(), probs.size() * sizeof(float));
    hash = actorpipe::kernel_check::hash_bytes(hash, grad_qkv.data(), grad_qkv.size() * sizeof(float));
  }
  std::printf("build %s\n", actorpipe::causal_attention_kernel_isa());
  std::printf("outputs hash %016llx\n", static_cast<unsigned long long>(hash));
  return ok ? 0 : 1;
}
