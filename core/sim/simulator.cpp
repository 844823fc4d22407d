// Static-plan simulator: the same progress loop as the validator, carrying finish times.
#include "core/sim/simulator.hpp"

#include <algorithm>
#include <cmath>
#include <map>
#include <tuple>
#include <stdexcept>
#include <utility>

#include "core/median.hpp"
#include "core/number_text.hpp"
#include "core/schedule/plan_validator.hpp"

namespace actorpipe {

namespace {

// The cost tables fit the plan (one per virtual stage, or one for all) and hold finite
// numbers >= 0, and so does the send latency.
void check_costs(const plan& p, const cost_model& costs) {
  const std::pair<const char*, const std::vector<double>*> tables[] = {{"forward", &costs.forward},
                                                                        {"backward", &costs.backward},
                                                                        {"input_grad", &costs.input_grad},
                                                                        {"weight_grad", &costs.weight_grad}};
  for (auto& [what, table] : tables) {
    if (table->size() != 1 && static_cast<int>(table->size()) != p.num_virtual_stages())
      throw std::invalid_argument("cost model has " + std::to_string(table->size()) + " " + what +
                                  " costs but the plan has " + std::to_string(p.num_virtual_stages()) +
                                  " virtual stages (give one cost per virtual stage, or a single one for all)");
    // NaN compared false everywhere: a makespan of 0 (or inf, bubble NaN) came back.
    for (std::size_t v = 0; v < table->size(); ++v)
      if (!((*table)[v] >= 0) || !std::isfinite((*table)[v]))
        throw std::invalid_argument(std::string("cost model: ") + what + " cost " + number_text((*table)[v]) +
                                    (table->size() > 1 ? " of virtual stage " + std::to_string(v) : std::string()) +
                                    " must be a finite number >= 0");
  }
  if (!(costs.send_latency >= 0) || !std::isfinite(costs.send_latency))
    throw std::invalid_argument("cost model: send latency " + number_text(costs.send_latency) +
                                " must be a finite number >= 0");
}

// Runs the plan on the costs (ranks in their lists' order, each action once its rank is free
// and its inputs have arrived) and hands `timed` each action with its rank, start, end and
// output time. Returns how many actions it ran (fewer than listed: the plan deadlocks).
template <class Timed>
std::size_t timed_walk(const plan& p, const cost_model& costs, Timed&& timed) {
  const int P = p.num_ranks(), S = p.num_virtual_stages(), M = p.microbatches;
  std::vector<double> fwd_end(static_cast<size_t>(S) * M, 0.0), grad_end(static_cast<size_t>(S) * M, 0.0);
  auto idx = [M](int v, int m) { return static_cast<size_t>(v) * M + m; };
  std::vector<double> free_at(P, 0.0);
  std::size_t ran = 0;
  // walk_plan only visits an action once its dependencies have finished.
  walk_plan(p, [&](int r, const action& a) {
    dependency deps[2];
    int n = dependencies_of(a, S, deps);
    double start = free_at[r];
    for (int k = 0; k < n; ++k) {
      const auto& d = deps[k];
      double t = (d.what == dependency::kind::forward ? fwd_end : grad_end)[idx(d.virtual_stage, d.microbatch)];
      if (p.place.rank_of[d.virtual_stage] != r) t += costs.send_latency;
      start = std::max(start, t);
    }
    const double end = end_time(r, a, start, costs.cost(a)), output = start + costs.output_after(a);
    if (a.op == op_kind::forward) fwd_end[idx(a.virtual_stage, a.microbatch)] = end;
    if (produces_input_grad(a.op)) grad_end[idx(a.virtual_stage, a.microbatch)] = output;
    free_at[r] = end;
    ++ran;
    timed(r, a, start, end, output);
  });
  return ran;
}

}  // namespace

sim_result simulate(const plan& p, const cost_model& costs) {
  auto rep = require_valid(p);
  check_costs(p, costs);
  const int P = p.num_ranks();
  sim_result res;
  res.schedule = p.name;
  res.stages = P;
  res.chunks = p.chunks();
  res.microbatches = p.microbatches;
  res.peak_activations = rep.peak_activations;
  res.peak_pending_weight_grads = rep.peak_pending_weight_grads;
  std::vector<std::vector<timeline_event>> per_rank(P);
  for (int r = 0; r < P; ++r) per_rank[r].reserve(p.ranks[r].size());
  timed_walk(p, costs, [&](int r, const action& a, double start, double end, double output) {
    per_rank[r].push_back({r, a, p.place.chunk_of[a.virtual_stage], start, end, output < end ? output : -1});
  });
  for (auto& evs : per_rank) res.events.insert(res.events.end(), evs.begin(), evs.end());
  summarize_timeline(res);
  return res;
}

double plan_makespan(const plan& p, const cost_model& costs) {
  check_costs(p, costs);
  // Not validated, but never read out of its tables: every action within the plan's shape.
  const int P = p.num_ranks(), S = p.num_virtual_stages();
  if (static_cast<int>(p.ranks.size()) != P || static_cast<int>(p.place.chunk_of.size()) != S ||
      static_cast<long long>(S) * p.microbatches > max_plan_forwards)
    throw std::invalid_argument("plan_makespan: plan '" + p.name +
                                "' is not the shape its placement says (validate_plan names why)");
  for (int r = 0; r < P; ++r)
    for (const action& a : p.ranks[r])
      if ((a.op != op_kind::forward && a.op != op_kind::backward && a.op != op_kind::input_grad &&
           a.op != op_kind::weight_grad) ||
          a.virtual_stage < 0 || a.virtual_stage >= S || a.microbatch < 0 || a.microbatch >= p.microbatches ||
          p.place.rank_of[a.virtual_stage] != r)
        throw std::invalid_argument("plan_makespan: plan '" + p.name + "' lists " + to_string(a) + " on rank " +
                                    std::to_string(r) + ", outside its shape (validate_plan names why)");
  double makespan = 0;
  const std::size_t ran =
      timed_walk(p, costs, [&](int, const action&, double, double end, double) { makespan = std::max(makespan, end); });
  std::size_t listed = 0;
  for (const auto& list : p.ranks) listed += list.size();
  if (ran != listed)
    throw std::logic_error("plan_makespan: plan '" + p.name + "' stops after " + std::to_string(ran) + " of its " +
                           std::to_string(listed) + " actions (validate_plan names why)");
  return makespan;
}

double end_time(int rank, const action& a, double start, double cost) {
  const double end = start + cost;
  if (std::fabs((end - start) - cost) > 1e-3 * cost)
    throw std::invalid_argument(to_string(a) + " on rank " + std::to_string(rank) + " starts at " + number_text(start) +
                                ", where its cost " + number_text(cost) + " rounds to " + number_text(end - start) +
                                ": the costs and send latency are too far apart to simulate (keep the largest within " +
                                number_text(max_cost_ratio) + " times the smallest)");
  return end;
}

void summarize_timeline(sim_result& r) {
  r.busy.assign(r.stages, 0.0);
  r.idle.clear();
  r.makespan = 0;
  for (const auto& e : r.events) {
    r.busy.at(e.rank) += e.end - e.start;
    r.makespan = std::max(r.makespan, e.end);
  }
  double total = 0;
  for (double b : r.busy) {
    r.idle.push_back(r.makespan - b);
    total += b;
  }
  r.ideal_time = r.busy.empty() ? 0 : *std::max_element(r.busy.begin(), r.busy.end());
  r.bubble_ratio = r.makespan > 0 && r.stages > 0 ? 1.0 - total / (r.stages * r.makespan) : 0.0;
}

namespace {

double mean_of(std::vector<double> v) {
  double sum = 0;
  for (double x : v) sum += x;
  return v.empty() ? 0.0 : sum / static_cast<double>(v.size());
}

double median_of(std::vector<double> v) { return median(std::move(v)); }

// Per-(op, virtual stage) durations reduced by `stat` (mean or median) into a cost model.
cost_model costs_of(const std::vector<timeline_event>& events, int virtual_stages,
                    double (*stat)(std::vector<double>)) {
  const int S = virtual_stages;
  std::map<std::pair<char, int>, std::vector<double>> took;  // (op, v) -> durations
  // Early-sending B's parts, kept apart from I and W actions: v -> (I parts, W parts).
  std::map<int, std::pair<std::vector<double>, std::vector<double>>> parts;
  // A W that paused: its earlier parts' time, added to the event that ends it.
  std::map<std::tuple<int, char, int, int>, double> carried;  // (rank, op, v, microbatch)
  for (auto& e : events) {
    const auto key = std::make_tuple(e.rank, static_cast<char>(e.act.op), e.act.virtual_stage, e.act.microbatch);
    if (e.continues) {
      carried[key] += e.end - e.start;
      continue;
    }
    double earlier = 0;
    if (auto it = carried.find(key); it != carried.end()) earlier = it->second, carried.erase(it);
    took[{static_cast<char>(e.act.op), e.act.virtual_stage}].push_back(earlier + e.end - e.start);
    if (e.act.op == op_kind::backward && e.output_at >= 0) {
      auto& [i, w] = parts[e.act.virtual_stage];
      i.push_back(e.output_at - e.start), w.push_back(e.end - e.output_at);
    }
  }
  auto of = [&](op_kind op, int v) {
    auto it = took.find({static_cast<char>(op), v});
    return it == took.end() ? 0.0 : stat(it->second);
  };
  auto ran = [&](op_kind op, int v) { return took.count({static_cast<char>(op), v}) > 0; };
  cost_model costs;
  costs.forward.assign(S, 0), costs.backward.assign(S, 0), costs.input_grad.assign(S, 0), costs.weight_grad.assign(S, 0);
  for (int v = 0; v < S; ++v) {
    costs.forward[v] = of(op_kind::forward, v);
    costs.input_grad[v] = of(op_kind::input_grad, v);
    costs.weight_grad[v] = of(op_kind::weight_grad, v);
    costs.backward[v] = ran(op_kind::backward, v) ? of(op_kind::backward, v) : costs.input_grad[v] + costs.weight_grad[v];
    const bool split_ran = ran(op_kind::input_grad, v) || ran(op_kind::weight_grad, v);
    if (auto it = parts.find(v); it != parts.end() && !split_ran)
      costs.input_grad[v] = stat(it->second.first), costs.weight_grad[v] = stat(it->second.second);
  }
  costs.early_input_grad = !parts.empty();
  return costs;
}

}  // namespace

std::size_t actions_in(const std::vector<timeline_event>& events) {
  return std::count_if(events.begin(), events.end(), [](const timeline_event& e) { return !e.continues; });
}

cost_model mean_costs(const std::vector<timeline_event>& events, int virtual_stages) {
  return costs_of(events, virtual_stages, mean_of);
}

cost_model median_costs(const std::vector<timeline_event>& events, int virtual_stages) {
  return costs_of(events, virtual_stages, median_of);
}

}  // namespace actorpipe
