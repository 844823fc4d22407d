// Event-driven simulation of rank policies.
#include "core/sim/policy_simulator.hpp"

#include <algorithm>
#include <limits>
#include <queue>
#include <stdexcept>

#include "core/schedule/plan_validator.hpp"

namespace actorpipe {

policy_sim_result simulate_policies(const placement& place, int microbatches,
                                    std::vector<std::unique_ptr<rank_policy>>& policies, const cost_model& costs,
                                    const std::string& name) {
  const int P = place.ranks, S = place.num_virtual_stages(), M = microbatches;
  if (static_cast<int>(policies.size()) != P)
    throw std::invalid_argument("simulate_policies: " + std::to_string(policies.size()) + " policies for " +
                                std::to_string(P) + " ranks");
  constexpr double never = std::numeric_limits<double>::infinity();
  auto idx = [M](int v, int m) { return static_cast<size_t>(v) * M + m; };
  const size_t n = static_cast<size_t>(S) * M;
  std::vector<double> input_at(n, never), grad_at(n, never), f_done(n, never), i_done(n, never);
  for (int m = 0; m < M; ++m) input_at[idx(0, m)] = 0;  // the feeder hands every microbatch over at once

  std::priority_queue<double, std::vector<double>, std::greater<>> events;
  events.push(0);
  std::vector<double> busy_until(P, 0);
  std::vector<std::optional<timeline_event>> running(P);
  policy_sim_result out;
  out.executed.name = name;
  out.executed.place = place;
  out.executed.microbatches = M;
  out.executed.ranks.resize(P);
  std::vector<std::vector<timeline_event>> per_rank(P);
  for (auto& p : policies) p->reset();
  // What a policy throws, named as train names it: "rank 1: policy 'mine' failed: ...".
  const auto policy_call = [&name](int r, auto&& call) {
    try {
      return call();
    } catch (const std::exception& e) {
      throw std::runtime_error("rank " + std::to_string(r) + ": policy '" + name + "' failed: " + e.what());
    } catch (...) {
      throw std::runtime_error("rank " + std::to_string(r) + ": policy '" + name +
                               "' failed: an exception that is not a std::exception");
    }
  };

  // Rank r's output for microbatch m, ready at `ready`, reaches virtual stage to_v's table
  // (plus the send latency when to_v lives on another rank).
  auto deliver = [&](int r, int to_v, int m, std::vector<double>& table, double ready) {
    const double t = ready + (place.rank_of[to_v] != r ? costs.send_latency : 0.0);
    table[idx(to_v, m)] = t;
    events.push(t);
  };
  // One that says it is finished before its rank ran all it lists fails the run in train (the
  // step would wait for what never comes): the same here, where it simulated cleanly.
  auto check_finished = [&](int r) {
    if (!policy_call(r, [&] { return policies[r]->finished(); })) return;
    const std::size_t listed = policy_call(r, [&] { return policies[r]->all_actions().size(); });
    if (per_rank[r].size() < listed)
      throw std::runtime_error("rank " + std::to_string(r) + ": policy '" + name + "' said it was finished after " +
                               std::to_string(per_rank[r].size()) + " of the " + std::to_string(listed) +
                               " actions it lists");
  };
  auto finish = [&](int r) {
    const timeline_event& e = *running[r];
    const action& a = e.act;
    const int v = a.virtual_stage, m = a.microbatch;
    if (a.op == op_kind::forward) {
      f_done[idx(v, m)] = e.end;
      if (v + 1 < S) deliver(r, v + 1, m, input_at, e.end);
    } else if (produces_input_grad(a.op)) {
      i_done[idx(v, m)] = e.end;
      if (v > 0 && e.output_at < 0) deliver(r, v - 1, m, grad_at, e.end);  // an early B delivered at its start
    }
    policy_call(r, [&] { policies[r]->completed(a); });
    per_rank[r].push_back(e);
    running[r].reset();
    check_finished(r);
  };

  while (!events.empty()) {
    const double t = events.top();
    while (!events.empty() && events.top() <= t) events.pop();
    for (int r = 0; r < P; ++r)
      if (running[r] && running[r]->end <= t) finish(r);
    auto ready = [&](const action& a) {
      return action_ready(a, S, [&](awaited d, int v, int m) {
        const size_t k = idx(v, m);
        switch (d) {
          case awaited::input: return input_at[k] <= t;
          case awaited::forward_done: return f_done[k] <= t;
          case awaited::gradient: return grad_at[k] <= t;
          case awaited::input_grad_done: return i_done[k] <= t;
        }
        return false;
      });
    };
    for (int r = 0; r < P; ++r) {
      if (running[r]) continue;
      auto a = policy_call(r, [&] { return policies[r]->next(ready); });
      // Nothing to start: the policy may fill the wait, as it may in train (where the stage
      // asks it only when the input it waits for is not already on its way).
      if (!a) a = policy_call(r, [&] { return policies[r]->fill(ready); });
      if (!a) continue;
      if (place.rank_of.at(a->virtual_stage) != r)
        throw std::logic_error("policy of rank " + std::to_string(r) + " chose " + to_string(*a) +
                               " of another rank");
      const double start = std::max(t, busy_until[r]);
      const double end = end_time(r, *a, start, costs.cost(*a)), output = start + costs.output_after(*a);
      running[r] = timeline_event{r, *a, place.chunk_of[a->virtual_stage], start, end, output < end ? output : -1};
      if (output < end) deliver(r, a->virtual_stage - 1, a->microbatch, grad_at, output);  // before its W part
      busy_until[r] = end;
      out.executed.ranks[r].push_back(*a);
      events.push(end);
      check_finished(r);
    }
  }
  std::string stuck;
  for (int r = 0; r < P; ++r) {
    if (policy_call(r, [&] { return policies[r]->finished(); })) continue;
    // Every action it lists ran, and it does not say it is finished: not a deadlock (as train
    // says it).
    const std::size_t listed = policy_call(r, [&] { return policies[r]->all_actions().size(); });
    if (listed > 0 && out.executed.ranks[r].size() >= listed)
      throw std::runtime_error("rank " + std::to_string(r) + ": policy '" + name + "' ran all " + std::to_string(listed) +
                               " actions it lists but does not say it is finished");
    stuck += (stuck.empty() ? "" : "; ") + std::string("rank ") + std::to_string(r) + " waits for " +
             policy_call(r, [&] { return policies[r]->waiting_for(); });
  }
  if (!stuck.empty()) throw std::runtime_error("policies deadlocked: " + stuck);

  auto rep = require_valid(out.executed);
  sim_result& res = out.timeline;
  res.schedule = name;
  res.stages = P;
  res.chunks = place.chunks();
  res.microbatches = M;
  for (int r = 0; r < P; ++r) res.events.insert(res.events.end(), per_rank[r].begin(), per_rank[r].end());
  summarize_timeline(res);
  res.peak_activations = rep.peak_activations;
  res.peak_pending_weight_grads = rep.peak_pending_weight_grads;
  return out;
}

}  // namespace actorpipe
