// Static-plan and greedy rank policies.
#include "core/schedule/policy.hpp"

#include <stdexcept>

namespace actorpipe {
namespace {

class static_policy final : public rank_policy {
 public:
  static_policy(const plan& p, int rank, bool fill) : actions_(p.ranks.at(rank)), fill_(fill) { reset(); }
  void reset() override {
    next_ = handed_ = 0;
    in_flight_ = 0;
    done_.assign(actions_.size(), false);
    taken_.assign(actions_.size(), false);
  }
  // Hands out the listed actions in order; the next one may go out before the previous one
  // completes (the rank's compute thread runs them one after another).
  std::optional<action> next(const std::function<bool(const action&)>& ready) override {
    if (handed_ >= actions_.size() || !ready(actions_[handed_])) return std::nullopt;
    return take(handed_);
  }
  // The first W not yet handed out, if it comes after the next listed action and is ready,
  // and no whole B of its virtual stage is listed before it (a plan that mixes B with I and W
  // on one virtual stage): both add into the same weight gradients, which must add up in the
  // plan's order (it varied with the timing, and the trained bits with it).
  std::optional<action> fill(const std::function<bool(const action&)>& ready) override {
    if (!fill_ || in_flight_ > 0) return std::nullopt;
    for (size_t i = handed_; i < actions_.size(); ++i) {
      if (taken_[i] || actions_[i].op != op_kind::weight_grad) continue;
      if (i == handed_ || !ready(actions_[i])) return std::nullopt;  // the next listed one, or not ready
      for (size_t j = handed_; j < i; ++j)
        if (!taken_[j] && actions_[j].op == op_kind::backward && actions_[j].virtual_stage == actions_[i].virtual_stage)
          return std::nullopt;
      return take(i);
    }
    return std::nullopt;
  }
  std::optional<action> next_listed() const override {
    if (handed_ >= actions_.size()) return std::nullopt;
    return actions_[handed_];
  }
  // Completions may be reported out of order (they reach the stage through different chunk
  // actors); any handed-out action may complete.
  void completed(const action& a) override {
    size_t i = next_;
    while (i < actions_.size() && (!taken_[i] || done_[i] || actions_[i] != a)) ++i;
    if (i >= actions_.size())
      throw std::logic_error("static policy: completed " + to_string(a) + ", which was not handed out");
    done_[i] = true;
    --in_flight_;
    while (next_ < actions_.size() && done_[next_]) ++next_;
  }
  bool finished() const override { return next_ >= actions_.size(); }
  std::string waiting_for() const override {
    if (handed_ >= actions_.size()) return finished() ? "nothing (done)" : "its last actions to finish";
    return to_string(actions_[handed_]) + " (position " + std::to_string(handed_) + ")";
  }
  std::vector<action> all_actions() const override { return actions_; }

 private:
  action take(size_t i) {
    taken_[i] = true;
    ++in_flight_;
    while (handed_ < actions_.size() && taken_[handed_]) ++handed_;
    return actions_[i];
  }

  std::vector<action> actions_;
  bool fill_ = false;
  size_t next_ = 0;    // first action not completed
  size_t handed_ = 0;  // first action not handed out
  int in_flight_ = 0;  // handed out, not completed
  std::vector<bool> done_, taken_;
};

class greedy_policy final : public rank_policy {
 public:
  greedy_policy(const placement& place, int microbatches, int rank, int budget, bool split)
      : stages_(place.virtual_stages_of(rank)), M_(microbatches), budget_(budget), split_(split) {
    if (budget < 1) throw std::invalid_argument("greedy policy: budget=" + std::to_string(budget) + " must be >= 1");
    reset();
  }
  void reset() override {
    next_f_.assign(stages_.size(), 0);
    next_b_.assign(stages_.size(), 0);
    next_w_.assign(stages_.size(), 0);
    live_first_ = 0;
    remaining_ = static_cast<long>(stages_.size()) * M_ * (split_ ? 3 : 2);
    busy_ = false;
  }
  std::optional<action> next(const std::function<bool(const action&)>& ready) override {
    if (busy_) return std::nullopt;
    const op_kind back = split_ ? op_kind::input_grad : op_kind::backward;
    std::optional<action> pick;
    // 1. Backward: lowest microbatch, then deepest stage.
    for (size_t k = stages_.size(); k-- > 0;) {
      if (next_b_[k] >= M_) continue;
      action a{back, stages_[k], next_b_[k]};
      if (ready(a) && (!pick || a.microbatch < pick->microbatch)) pick = a;
    }
    // 2. Weight-grad.
    for (size_t k = stages_.size(); !pick && split_ && k-- > 0;)
      if (next_w_[k] < next_b_[k]) pick = action{op_kind::weight_grad, stages_[k], next_w_[k]};
    // 3./4. Forward: deeper chunks first; the first chunk only under the budget.
    for (size_t k = stages_.size(); !pick && k-- > 0;) {
      if (next_f_[k] >= M_ || (k == 0 && live_first_ >= budget_)) continue;
      action a{op_kind::forward, stages_[k], next_f_[k]};
      if (ready(a)) pick = a;
    }
    if (pick) busy_ = true, last_ = *pick;
    return pick;
  }
  void completed(const action& a) override {
    if (!busy_ || a != last_) throw std::logic_error("greedy policy: completed " + to_string(a) + " unexpectedly");
    busy_ = false;
    --remaining_;
    size_t k = 0;
    while (stages_[k] != a.virtual_stage) ++k;
    switch (a.op) {
      case op_kind::forward:
        ++next_f_[k];
        if (k == 0) ++live_first_;
        break;
      case op_kind::backward:
      case op_kind::input_grad:
        ++next_b_[k];
        if (k == 0) --live_first_;
        break;
      case op_kind::weight_grad: ++next_w_[k]; break;
    }
  }
  bool finished() const override { return remaining_ == 0; }
  std::string waiting_for() const override {
    std::string s;
    for (size_t k = 0; k < stages_.size(); ++k) {
      if (!s.empty()) s += ", ";
      s += "virtual stage " + std::to_string(stages_[k]) + ": F" + std::to_string(next_f_[k]) + " B" +
           std::to_string(next_b_[k]) + (split_ ? " W" + std::to_string(next_w_[k]) : "");
    }
    return "greedy (next per " + s + ")";
  }
  std::vector<action> all_actions() const override {
    std::vector<action> out;
    for (int v : stages_)
      for (int m = 0; m < M_; ++m) {
        out.push_back({op_kind::forward, v, m});
        out.push_back({split_ ? op_kind::input_grad : op_kind::backward, v, m});
        if (split_) out.push_back({op_kind::weight_grad, v, m});
      }
    return out;
  }

 private:
  std::vector<int> stages_;
  int M_, budget_;
  bool split_;
  std::vector<int> next_f_, next_b_, next_w_;
  int live_first_ = 0;
  long remaining_ = 0;
  bool busy_ = false;
  action last_{};
};

}  // namespace

std::unique_ptr<rank_policy> make_static_policy(const plan& p, int rank, bool fill_weight_grads) {
  if (rank < 0 || rank >= p.num_ranks())
    throw std::invalid_argument("static policy: rank " + std::to_string(rank) + " is not in the plan's 0.." +
                                std::to_string(p.num_ranks() - 1));
  return std::make_unique<static_policy>(p, rank, fill_weight_grads);
}

std::unique_ptr<rank_policy> make_greedy_policy(const placement& place, int microbatches, int rank, int budget,
                                                bool split_backward) {
  return std::make_unique<greedy_policy>(place, microbatches, rank, budget, split_backward);
}

}  // namespace actorpipe
