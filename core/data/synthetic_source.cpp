// The embedded default corpus: a seeded sparse Markov chain over the vocabulary whose entropy
// rate is known exactly, so a training run has a loss floor to fall towards.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/data/splitmix64.hpp"
#include "core/data/token_source.hpp"

namespace actorpipe {

namespace {


// A small counter-based generator: the i-th output is splitmix64(key + i * golden ratio).
class splitmix_stream {
 public:
  explicit splitmix_stream(std::uint64_t key) : state_(key) {}
  std::uint64_t next() {
    state_ += 0x9e3779b97f4a7c15ULL;
    std::uint64_t z = state_;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }
  // Uniform in [0, 1) from the top 53 bits.
  double uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }

 private:
  std::uint64_t state_;
};

// Distinct salts keep the chain's construction stream and the sampling streams apart.
constexpr std::uint64_t construction_salt = 0x6a09e667f3bcc908ULL;
constexpr std::uint64_t sampling_salt = 0xbb67ae8584caa73bULL;
constexpr std::uint64_t eval_salt = 0x3c6ef372fe94f82bULL;

constexpr int max_successors = 6;

// Index of the first cumulative entry > u (the last entry is pinned to 1, so u < 1 always lands).
int pick(const double* cdf, int n, double u) {
  for (int i = 0; i < n - 1; ++i)
    if (u < cdf[i]) return i;
  return n - 1;
}

// The chain. Each token t has K = min(6, vocab) distinct successors: (t + 1) mod vocab first,
// which makes the chain irreducible (so the stationary distribution is unique), then K - 1
// others drawn uniformly without repetition from the seeded construction stream. Their
// probabilities are independent Exp(1) draws normalised to sum 1 (a uniform point on the
// simplex, i.e. Dirichlet(1, ..., 1)): non-uniform, and different for every token.
//
// entropy_floor() is the chain's entropy rate H = sum_t pi_t * H(P[t, :]) in nats/token, where
// pi is the stationary distribution found by power iteration on the lazy chain (P + I) / 2. The
// lazy chain has the same stationary distribution and is aperiodic, so the iteration converges
// even if the chain itself happens to be periodic. Sequences start from pi, so every position of
// a sample is distributed as pi and the per-token cross-entropy of the true model is exactly H.
class synthetic_source final : public token_source {
 public:
  synthetic_source(int vocab, std::uint64_t seed) : vocab_(vocab), seed_(seed), k_(std::min(max_successors, vocab)) {
    if (vocab < 2) throw std::invalid_argument("synthetic source needs vocab >= 2: got vocab=" + std::to_string(vocab));
    build_chain();
    compute_stationary();
  }

  int vocab() const override { return vocab_; }

  void sequence(std::uint64_t step, std::uint64_t index, int seq_len, std::int32_t* out) const override {
    // The key depends on all of (seed, step, index) through chained mixes: a pure function,
    // safe to call from any thread, with no state shared between calls.
    draw(splitmix64(splitmix64(splitmix64(seed_ ^ sampling_salt) ^ step) ^ index), seq_len, out);
  }

  // The held-out set: keys under a salt of their own, one mix fewer (no step), so no
  // evaluation sequence is drawn from a training sample's key unless splitmix64 collides.
  void eval_sequence(std::uint64_t index, int seq_len, std::int32_t* out) const override {
    draw(splitmix64(splitmix64(seed_ ^ eval_salt) ^ index), seq_len, out);
  }
  std::uint64_t eval_sequences(int) const override { return UINT64_MAX; }

  std::string describe() const override {
    char buf[160];
    std::snprintf(buf, sizeof buf, "synthetic Markov source (vocab %d, %d successors per token, floor %.2f nats/token)",
                  vocab_, k_, floor_);
    return buf;
  }

  double entropy_floor() const override { return floor_; }

 private:
  // seq_len + 1 tokens of the chain from the stream of `key`: the first from the stationary
  // distribution, each next from its predecessor's successors.
  void draw(std::uint64_t key, int seq_len, std::int32_t* out) const {
    if (seq_len < 1) throw std::invalid_argument("seq_len must be >= 1: got seq_len=" + std::to_string(seq_len));
    if (out == nullptr) throw std::invalid_argument("synthetic source: out must not be null");
    splitmix_stream rng(key);
    // Binary search: the stationary table has vocab entries, the successor tables only k.
    const double u0 = rng.uniform();
    int t = static_cast<int>(std::upper_bound(stationary_cdf_.begin(), stationary_cdf_.end(), u0) - stationary_cdf_.begin());
    if (t >= vocab_) t = vocab_ - 1;
    out[0] = t;
    for (int i = 1; i <= seq_len; ++i) {
      const std::size_t row = static_cast<std::size_t>(t) * k_;
      t = successors_[row + pick(&cdf_[row], k_, rng.uniform())];
      out[i] = t;
    }
  }

  void build_chain() {
    splitmix_stream rng(splitmix64(seed_ ^ construction_salt));
    const std::size_t n = static_cast<std::size_t>(vocab_) * k_;
    successors_.resize(n);
    probs_.resize(n);
    cdf_.resize(n);
    for (int t = 0; t < vocab_; ++t) {
      int* succ = &successors_[static_cast<std::size_t>(t) * k_];
      succ[0] = (t + 1) % vocab_;
      for (int j = 1; j < k_; ++j) {
        int c;
        do {
          c = static_cast<int>(rng.next() % static_cast<std::uint64_t>(vocab_));
        } while (std::find(succ, succ + j, c) != succ + j);
        succ[j] = c;
      }
      double* p = &probs_[static_cast<std::size_t>(t) * k_];
      double sum = 0;
      for (int j = 0; j < k_; ++j) {
        // 1 - u is in (0, 1], so the log is finite.
        p[j] = -std::log(1.0 - rng.uniform());
        sum += p[j];
      }
      double* c = &cdf_[static_cast<std::size_t>(t) * k_];
      double acc = 0;
      for (int j = 0; j < k_; ++j) {
        p[j] /= sum;
        acc += p[j];
        c[j] = acc;
      }
      c[k_ - 1] = 1.0;
    }
  }

  void compute_stationary() {
    std::vector<double> pi(vocab_, 1.0 / vocab_), next(vocab_);
    // The lazy chain's L1 change shrinks geometrically; 1e-14 is at double rounding level for
    // the entropy sum. The iteration cap only guards against pathological seeds.
    for (int it = 0; it < 100000; ++it) {
      for (int t = 0; t < vocab_; ++t) next[t] = 0.5 * pi[t];
      for (int t = 0; t < vocab_; ++t) {
        const std::size_t row = static_cast<std::size_t>(t) * k_;
        const double half = 0.5 * pi[t];
        for (int j = 0; j < k_; ++j) next[successors_[row + j]] += half * probs_[row + j];
      }
      double change = 0, total = 0;
      for (int t = 0; t < vocab_; ++t) {
        change += std::fabs(next[t] - pi[t]);
        total += next[t];
      }
      for (int t = 0; t < vocab_; ++t) pi[t] = next[t] / total;
      if (change < 1e-14) break;
    }
    stationary_cdf_.resize(vocab_);
    double acc = 0;
    floor_ = 0;
    for (int t = 0; t < vocab_; ++t) {
      acc += pi[t];
      stationary_cdf_[t] = acc;
      double h = 0;
      for (int j = 0; j < k_; ++j) {
        const double p = probs_[static_cast<std::size_t>(t) * k_ + j];
        if (p > 0) h -= p * std::log(p);
      }
      floor_ += pi[t] * h;
    }
    stationary_cdf_[vocab_ - 1] = 1.0;
  }

  int vocab_;
  std::uint64_t seed_;
  int k_;
  std::vector<int> successors_;  // [vocab, k]
  std::vector<double> probs_;    // [vocab, k]
  std::vector<double> cdf_;      // [vocab, k], running sums of probs_, last entry 1
  std::vector<double> stationary_cdf_;
  double floor_ = 0;
};

}  // namespace

std::unique_ptr<token_source> make_synthetic_source(int vocab, std::uint64_t seed) {
  return std::make_unique<synthetic_source>(vocab, seed);
}

}  // namespace actorpipe
