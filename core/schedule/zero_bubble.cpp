// Zero-bubble schedules (Qi et al., "Zero Bubble Pipeline Parallelism", ICLR 2024): the
// backward is split into I (input-grad, on the critical path) and W (weight-grad, free to
// move), and the W passes fill what would be bubbles.
//
// Both are built by the same list scheduler, which simulates as it goes: whenever a rank is
// idle it runs, in order of preference,
//   1. an I whose output-gradient has arrived (keeps the critical path moving),
//   2. the oldest pending W, if the rank already holds w_limit of them (bounds the memory
//      that deferred W passes keep),
//   3. an F whose input has arrived, if that virtual stage holds fewer live activations than
//      its cap (the cap is the 1F1B rule applied per virtual stage: depth - v, which gives
//      zb-h1 the 1F1B peak of P - rank and ends the warm-up where 1F1B's does),
//   4. the oldest pending W,
// and records what it ran. The recorded order is the plan; it is a topological order of the
// dependency graph, so it is deadlock-free under any costs.
//
// On unit costs (F = I = W = 1, the paper's setting; no cost model given) the W limits are
// fixed: for zb-h1, w_limit = P reproduces the paper's bubble (P-1)(F+I-W) exactly with at most
// P pending W; for zbv, w_limit = P + rank + 1 keeps the bubble below zb-h1's for P in 2..8 and
// M in P..8P (a sweep), with at most 2P live activations (chunk-sized: 1F1B's rank-0 peak).
// Given real per-(op, virtual stage) costs (measured W is ~0.7 F, I ~1.1 F), the scheduler runs
// on those times, tries every smaller W limit too, and keeps the plan with the shortest
// makespan, the unit-cost plan among the candidates (timed by the simulator). Each candidate
// stays within the unit-cost plan's per-rank peaks of live activations and pending W (a rank
// at its peak runs a W before another I, and no F), so rebuilding never costs memory.
// Every plan it picks runs each virtual stage's I and W in microbatch order, so gradients
// accumulate in the same order and the trained bits do not depend on which plan was picked.
#include <algorithm>
#include <atomic>
#include <exception>
#include <system_error>
#include <thread>
#include <cmath>
#include <limits>
#include <functional>
#include <queue>
#include <stdexcept>
#include <utility>
#include <vector>

#include "core/run_room.hpp"
#include "core/schedule/builtin_schedules.hpp"
#include "core/schedule/plan_validator.hpp"
#include "core/sim/simulator.hpp"

namespace actorpipe {
namespace {

// Per-rank peaks a plan must stay within (empty: no limit beyond the per-stage caps). With
// `slot_for_deepest`, an F on a rank's shallower virtual stage never takes the rank's last
// activation slot, which stays for its deepest one: on a V it is the deepest one's F, then its
// I, that frees memory, and a rank whose slots all hold shallow activations waits for ever.
struct rank_limits {
  std::vector<int> live, pending;
  bool slot_for_deepest = false;
};

// The list scheduler: it simulates the ranks as it goes and records, on each rank that is free
// at a decision time, the action the rules above prefer.
class split_backward_scheduler {
 public:
  split_backward_scheduler(const placement& place, int microbatches, const std::vector<int>& cap,
                           const std::vector<int>& w_limit, const cost_model& costs, const rank_limits& limits)
      : place_(place), M_(microbatches), S_(place.num_virtual_stages()), cap_(cap), w_limit_(w_limit),
        costs_(costs), limits_(limits),
        f_done_(static_cast<size_t>(S_) * M_, never), i_done_(static_cast<size_t>(S_) * M_, never),
        next_f_(S_, 0), next_i_(S_, 0), live_(S_, 0), rank_live_(place.ranks, 0), pending_w_(place.ranks),
        w_head_(place.ranks, 0), stages_of_(place.ranks), free_at_(place.ranks, 0.0) {
    for (int r = 0; r < place.ranks; ++r) stages_of_[r] = place.virtual_stages_of(r);
  }

  plan run() {
    plan p;
    p.place = place_;
    p.microbatches = M_;
    p.ranks.resize(place_.ranks);
    long remaining = 3L * S_ * M_;
    for (auto& list : p.ranks) list.reserve(3 * static_cast<size_t>(M_) * stages_of_[0].size());
    times_.push(0.0);
    while (remaining > 0) {
      // Nothing will ever finish again, yet actions remain: a bug in the rules above.
      if (times_.empty()) throw std::logic_error("zero-bubble list scheduler stalled with actions left");
      const double t = times_.top();
      do times_.pop();
      while (!times_.empty() && times_.top() == t);  // each moment once
      for (int r = 0; r < place_.ranks; ++r) {
        action chosen{};
        if (free_at_[r] > t || !choose(r, t, chosen)) continue;
        record(r, t, chosen);
        p.ranks[r].push_back(chosen);
        --remaining;
      }
    }
    return p;
  }

 private:
  static constexpr double never = std::numeric_limits<double>::infinity();

  size_t idx(int v, int m) const { return static_cast<size_t>(v) * M_ + m; }
  // When virtual stage `to` has the output of `from` that finished at `done`.
  double arrival(double done, int from, int to) const {
    return done + (place_.rank_of[from] != place_.rank_of[to] ? costs_.send_latency : 0.0);
  }
  int pending(int r) const { return static_cast<int>(pending_w_[r].size() - w_head_[r]); }

  // Rank r's action at time t, by the rules' preference; false if it has nothing to run now.
  bool choose(int r, double t, action& chosen) {
    const bool pending_full = !limits_.pending.empty() && pending(r) >= limits_.pending[r];
    // An I would put its W over the rank's limit: run a W first.
    if (!pending_full && pick_input_grad(r, t, chosen)) return true;
    if ((pending(r) >= w_limit_[r] || pending_full) && pending(r) > 0) return take_weight_grad(r, chosen);
    const bool live_full = !limits_.live.empty() && rank_live_[r] >= limits_.live[r];
    if (!live_full && pick_forward(r, t, chosen)) return true;
    return take_weight_grad(r, chosen);
  }

  // 1. I: lowest microbatch first, then the deeper virtual stage.
  bool pick_input_grad(int r, double t, action& chosen) const {
    bool found = false;
    for (int v : stages_of_[r]) {
      const int m = next_i_[v];
      if (m >= M_ || f_done_[idx(v, m)] > t) continue;
      if (v + 1 < S_ && arrival(i_done_[idx(v + 1, m)], v + 1, v) > t) continue;
      if (!found || m < chosen.microbatch || (m == chosen.microbatch && v > chosen.virtual_stage)) {
        chosen = {op_kind::input_grad, v, m};
        found = true;
      }
    }
    return found;
  }

  // 3. F under the cap: the deeper virtual stage first (it leads to a backward sooner).
  bool pick_forward(int r, double t, action& chosen) const {
    for (auto it = stages_of_[r].rbegin(); it != stages_of_[r].rend(); ++it) {
      const int v = *it, m = next_f_[v];
      if (m >= M_ || live_[v] >= cap_[v]) continue;
      if (limits_.slot_for_deepest && !limits_.live.empty() && v != stages_of_[r].back() &&
          rank_live_[r] + 1 >= limits_.live[r])
        continue;  // the last slot is the deepest stage's
      if (v > 0 && arrival(f_done_[idx(v - 1, m)], v - 1, v) > t) continue;
      chosen = {op_kind::forward, v, m};
      return true;
    }
    return false;
  }

  // 2. and 4. W: the rank's oldest pending one.
  bool take_weight_grad(int r, action& chosen) {
    if (pending(r) == 0) return false;
    chosen = pending_w_[r][w_head_[r]++];
    return true;
  }

  // Rank r runs `a` from t: its end, and the arrival of its output, become decision times.
  void record(int r, double t, const action& a) {
    const int v = a.virtual_stage, m = a.microbatch;
    const double end = t + costs_.cost(a);
    if (a.op == op_kind::forward) {
      f_done_[idx(v, m)] = end;
      ++next_f_[v];
      ++live_[v];
      ++rank_live_[r];
      if (v + 1 < S_) times_.push(arrival(end, v, v + 1));
    } else if (a.op == op_kind::input_grad) {
      i_done_[idx(v, m)] = end;
      ++next_i_[v];
      --live_[v];
      --rank_live_[r];
      pending_w_[r].push_back({op_kind::weight_grad, v, m});
      if (v > 0) times_.push(arrival(end, v, v - 1));
    }
    times_.push(end);
    free_at_[r] = end;
  }

  const placement& place_;
  const int M_, S_;
  const std::vector<int>& cap_;
  const std::vector<int>& w_limit_;
  const cost_model& costs_;
  const rank_limits& limits_;
  std::vector<double> f_done_, i_done_;  // per (virtual stage, microbatch): when its F / I ended
  std::vector<int> next_f_, next_i_, live_, rank_live_;
  std::vector<std::vector<action>> pending_w_;  // FIFO per rank
  std::vector<size_t> w_head_;
  std::vector<std::vector<int>> stages_of_;
  std::vector<double> free_at_;
  // When something finishes or arrives: the moments to decide, earliest first (a moment pushed
  // twice is taken once).
  std::priority_queue<double, std::vector<double>, std::greater<double>> times_;
};

plan list_schedule_split_backward(const placement& place, int microbatches, const std::vector<int>& cap,
                                  const std::vector<int>& w_limit, const cost_model& costs,
                                  const rank_limits& limits = {}) {
  return split_backward_scheduler(place, microbatches, cap, w_limit, costs, limits).run();
}

// Measured costs carry noise: a stage 0.4% slower than its twin would steer the list
// scheduler's ties one way or the other. So the plans are built on the raw costs and on them
// rounded to a twentieth and to an eighth of the mean forward; every candidate is timed on the
// raw costs.
std::vector<cost_model> cost_variants(const cost_model& costs) {
  std::vector<cost_model> variants{costs};
  double mean_f = 0;
  for (double f : costs.forward) mean_f += f / costs.forward.size();
  for (double parts : {20.0, 8.0}) {
    const double grain = mean_f / parts;
    if (!(grain > 0)) break;
    auto round = [grain](std::vector<double> v, bool positive) {
      for (double& x : v) x = std::max(positive ? grain : 0.0, grain * std::round(x / grain));
      return v;
    };
    cost_model c = costs;
    c.forward = round(c.forward, true);
    c.input_grad = round(c.input_grad, false);
    c.weight_grad = round(c.weight_grad, false);
    c.send_latency = grain * std::round(c.send_latency / grain);
    variants.push_back(c);
  }
  return variants;
}

// Unit costs: the fixed W limits. Given costs: the best of those limits and every smaller one,
// each held to the unit-cost plan's per-rank peaks (live activations and pending W), so a plan
// built for costs never needs more memory, each with and without a rank's last activation
// slot kept for its deepest virtual stage. A candidate that cannot finish within those peaks
// is dropped; the unit-cost plan itself is always one. (Without the kept slot, every
// candidate stalled on some measured zbv costs, leaving the unit-cost plan's 8% bubble where
// 0.7% was to be had.)
plan build_split_backward(const placement& place, int microbatches, const std::vector<int>& cap,
                          const std::vector<int>& w_limit, const std::shared_ptr<const cost_model>& costs) {
  const cost_model unit_costs = cost_model::uniform(1, 2, 1, 1);
  plan best = list_schedule_split_backward(place, microbatches, cap, w_limit, unit_costs);
  if (!costs) return best;
  // The costs checked (finite, >= 0, one per virtual stage) before any candidate runs on them.
  double best_makespan = plan_makespan(best, *costs);
  const validation_report peaks = validate_plan(best);
  const int most = *std::max_element(w_limit.begin(), w_limit.end());
  struct candidate {
    const cost_model* variant;
    rank_limits limits;
    std::vector<int> w_limit;
  };
  const std::vector<cost_model> variants = cost_variants(*costs);
  std::vector<candidate> candidates;
  for (const cost_model& variant : variants)
    for (bool slot_for_deepest : {false, true}) {
      if (slot_for_deepest && place.chunks() == 1) continue;  // one virtual stage per rank: the same rule
      const rank_limits limits{peaks.peak_activations, peaks.peak_pending_weight_grads, slot_for_deepest};
      for (int k = most; k >= 1; --k) {
        std::vector<int> lower(w_limit.size());
        for (size_t r = 0; r < w_limit.size(); ++r) lower[r] = std::min(w_limit[r], k);
        candidates.push_back({&variant, limits, std::move(lower)});
      }
    }
  // Each candidate's makespan on the costs as given (infinite where it stalled within the
  // unit-cost plan's peaks: not a candidate), on the CPUs this process may use: the pipeline
  // waits for the rebuild, and a large plan has hundreds of candidates of seconds in all.
  auto build = [&](const candidate& c) {
    return list_schedule_split_backward(place, microbatches, cap, c.w_limit, *c.variant, c.limits);
  };
  std::vector<double> makespan(candidates.size(), std::numeric_limits<double>::infinity());
  std::vector<std::exception_ptr> failed(candidates.size());
  std::atomic<std::size_t> next{0};
  auto work = [&] {
    for (std::size_t i; (i = next.fetch_add(1)) < candidates.size();) {
      try {
        makespan[i] = plan_makespan(build(candidates[i]), *costs);
      } catch (const std::logic_error&) {
        // stalled within the unit-cost plan's peaks
      } catch (...) {
        failed[i] = std::current_exception();
      }
    }
  };
  const std::size_t plan_actions = 3 * static_cast<std::size_t>(place.num_virtual_stages()) * microbatches;
  std::size_t threads = plan_actions < 4096 ? 1 : std::min<std::size_t>(std::max<std::size_t>(1, usable_cpus()), candidates.size());
  std::vector<std::thread> helpers;
  for (std::size_t t = 1; t < threads; ++t) {
    try {
      helpers.emplace_back(work);
    } catch (const std::system_error&) {
      break;  // no more threads to be had: the others do the rest
    }
  }
  work();
  for (auto& h : helpers) h.join();
  // The choice, in the candidates' order as one thread would make it: the first strictly
  // shorter one replaces the best so far (the unit-cost plan first).
  std::size_t chosen = candidates.size();
  for (std::size_t i = 0; i < candidates.size(); ++i) {
    if (failed[i]) std::rethrow_exception(failed[i]);
    if (makespan[i] < best_makespan * (1 - 1e-9)) best_makespan = makespan[i], chosen = i;
  }
  return chosen < candidates.size() ? build(candidates[chosen]) : best;
}

}  // namespace

plan make_zb_h1(const schedule_request& r) {
  if (r.chunks != 1) reject_request("zb-h1", "chunks == 1 (use zbv for 2 chunks per rank)", r);
  if (r.microbatches < r.stages) reject_request("zb-h1", "microbatches >= stages", r);
  std::vector<int> cap(r.stages);
  for (int v = 0; v < r.stages; ++v) cap[v] = r.stages - v;
  std::vector<int> w_limit(r.stages);
  for (int rank = 0; rank < r.stages; ++rank) w_limit[rank] = r.stages;
  return build_split_backward(loop_placement(r.stages, 1), r.microbatches, cap, w_limit, r.costs);
}

plan make_zbv(const schedule_request& r) {
  if (r.chunks != 2) reject_request("zbv", "chunks == 2 (V-shape placement)", r);
  const int S = 2 * r.stages;
  std::vector<int> cap(S);
  for (int v = 0; v < S; ++v) cap[v] = S - v;
  std::vector<int> w_limit(r.stages);
  for (int rank = 0; rank < r.stages; ++rank) w_limit[rank] = r.stages + rank + 1;
  return build_split_backward(v_shape_placement(r.stages, 2), r.microbatches, cap, w_limit, r.costs);
}

}  // namespace actorpipe
