// A dynamic ordering policy written outside the library: GPipe in waves. A rank lets at most
// `budget` microbatches into its first chunk and only when the last of them has left (the wave
// drained) lets the next wave in; inside a wave, a ready backward goes before a forward. So
// each rank holds at most `budget` activations per chunk, at the price of a fill and a drain
// per wave (with budget >= M, the first rank runs GPipe's order). Used by
// examples/custom_policy.cpp and by the tests.
//
// Each virtual stage runs its forwards and backwards in microbatch order (the policy only ever
// considers the next F and the next B of each virtual stage), so gradients accumulate in the
// same order as under any built-in schedule and training is bit-identical to 1f1b's.
#pragma once

#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/schedule/policy_registry.hpp"

namespace waves {

class waves_policy final : public actorpipe::rank_policy {
 public:
  waves_policy(const actorpipe::placement& place, int microbatches, int rank, int budget)
      : stages_(place.virtual_stages_of(rank)), M_(microbatches), budget_(budget) {
    if (budget < 1) throw std::invalid_argument("gpipe-waves: budget=" + std::to_string(budget) + " must be >= 1");
    reset();
  }

  void reset() override {
    next_f_.assign(stages_.size(), 0);
    next_b_.assign(stages_.size(), 0);
    live_ = 0;
    draining_ = false;
    remaining_ = static_cast<long>(stages_.size()) * M_ * 2;
  }

  // Bookkeeping happens when an action is handed out (the rank runs what it was handed in that
  // order), so the stage may keep a second action queued behind the running one.
  std::optional<actorpipe::action> next(const std::function<bool(const actorpipe::action&)>& ready) override {
    using actorpipe::action;
    using actorpipe::op_kind;
    // Backwards first, deepest virtual stage first: they drain the wave.
    for (size_t k = stages_.size(); k-- > 0;) {
      action a{op_kind::backward, stages_[k], next_b_[k]};
      if (next_b_[k] < M_ && ready(a)) {
        ++next_b_[k];
        if (k == 0 && --live_ == 0) draining_ = false;  // the wave has left the rank
        return a;
      }
    }
    // Forwards of microbatches already inside the rank (later chunks), then new ones while the
    // wave is filling.
    for (size_t k = stages_.size(); k-- > 0;) {
      if (next_f_[k] >= M_ || (k == 0 && draining_)) continue;
      action a{op_kind::forward, stages_[k], next_f_[k]};
      if (!ready(a)) continue;
      ++next_f_[k];
      if (k == 0 && ++live_ == budget_) draining_ = true;
      return a;
    }
    return std::nullopt;
  }

  void completed(const actorpipe::action&) override { --remaining_; }
  bool finished() const override { return remaining_ == 0; }

  std::string waiting_for() const override {
    std::string s;
    for (size_t k = 0; k < stages_.size(); ++k)
      s += (s.empty() ? "" : ", ") + std::string("virtual stage ") + std::to_string(stages_[k]) + ": F" +
           std::to_string(next_f_[k]) + " B" + std::to_string(next_b_[k]);
    return "gpipe-waves (" + std::string(draining_ ? "draining" : "filling") + "; next per " + s + ")";
  }

  std::vector<actorpipe::action> all_actions() const override {
    std::vector<actorpipe::action> out;
    for (int v : stages_)
      for (int m = 0; m < M_; ++m) {
        out.push_back({actorpipe::op_kind::forward, v, m});
        out.push_back({actorpipe::op_kind::backward, v, m});
      }
    return out;
  }

 private:
  std::vector<int> stages_;  // the rank's virtual stages, first chunk first
  int M_, budget_;
  std::vector<int> next_f_, next_b_;  // per chunk: the next microbatch to hand out
  int live_ = 0;                      // microbatches inside the first chunk (F handed out, B not)
  bool draining_ = false;             // the wave is full: no new microbatch until it is empty
  long remaining_ = 0;
};

// Registers "gpipe-waves" (budget 0, the default: waves of 2 microbatches).
inline void register_waves_policy() {
  actorpipe::register_policy(
      "gpipe-waves",
      [](const actorpipe::policy_request& r) {
        return std::make_unique<waves_policy>(r.place, r.microbatches, r.rank, r.budget > 0 ? r.budget : 2);
      },
      "GPipe in waves of --budget microbatches (default 2): a rank admits the next wave when the last has "
      "left; any chunks (loop placement)");
}

}  // namespace waves
