// Minimax-regret choice between the running plan and plans rebuilt on measured costs.
#include "core/sim/plan_choice.hpp"

#include <algorithm>
#include <stdexcept>
#include <vector>

#include "core/schedule/schedule_registry.hpp"

namespace actorpipe {

namespace {

// One entry per virtual stage.
std::vector<double> per_stage(const std::vector<double>& v, int stages) {
  if (v.size() == 1) return std::vector<double>(stages, v[0]);
  if (static_cast<int>(v.size()) != stages)
    throw std::invalid_argument("equal_rank_speeds: the cost model has " + std::to_string(v.size()) +
                                " entries for " + std::to_string(stages) + " virtual stages");
  return v;
}

}  // namespace

cost_model equal_rank_speeds(const cost_model& costs, const placement& place) {
  const int stages = place.num_virtual_stages();
  if (stages == 0 || place.ranks < 1) throw std::invalid_argument("equal_rank_speeds: the placement has no virtual stages");
  cost_model out = costs;
  out.forward = per_stage(costs.forward, stages);
  out.backward = per_stage(costs.backward, stages);
  out.input_grad = per_stage(costs.input_grad, stages);
  out.weight_grad = per_stage(costs.weight_grad, stages);
  std::vector<double> work(place.ranks, 0.0);
  for (int v = 0; v < stages; ++v) work[place.rank_of[v]] += out.forward[v] + out.backward[v];
  double mean = 0;
  for (int r = 0; r < place.ranks; ++r) {
    if (!(work[r] > 0))
      throw std::invalid_argument("equal_rank_speeds: rank " + std::to_string(r) + " has no work (F + B = " +
                                  std::to_string(work[r]) + ")");
    mean += work[r] / place.ranks;
  }
  for (int v = 0; v < stages; ++v) {
    const double f = mean / work[place.rank_of[v]];
    out.forward[v] *= f;
    out.backward[v] *= f;
    out.input_grad[v] *= f;
    out.weight_grad[v] *= f;
  }
  return out;
}

plan_choice choose_plan(const std::string& schedule, int ranks, int microbatches, const placement& place,
                        const cost_model& measured, const std::shared_ptr<const plan>& running) {
  const cost_model equal = equal_rank_speeds(measured, place);
  struct candidate {
    std::shared_ptr<const plan> p;
    std::string built_on, text;
    sim_result on[2];  // on measured, on equal
  };
  std::vector<candidate> cands;
  const auto add = [&](std::shared_ptr<const plan> p, const char* built_on) {
    std::string text = format_plan(*p);
    for (const auto& c : cands)
      if (c.text == text) return;
    sim_result on_measured = simulate(*p, measured), on_equal = simulate(*p, equal);
    cands.push_back({std::move(p), built_on, std::move(text), {std::move(on_measured), std::move(on_equal)}});
  };
  if (running) add(running, "running");
  const int chunks = place.chunks();
  add(std::make_shared<const plan>(
          make_schedule(schedule, schedule_request{ranks, microbatches, chunks, std::make_shared<const cost_model>(measured)})),
      "measured");
  add(std::make_shared<const plan>(
          make_schedule(schedule, schedule_request{ranks, microbatches, chunks, std::make_shared<const cost_model>(equal)})),
      "equal speeds");
  double best[2] = {cands[0].on[0].makespan, cands[0].on[1].makespan};
  for (const auto& c : cands)
    for (int s = 0; s < 2; ++s) best[s] = std::min(best[s], c.on[s].makespan);
  const auto regret = [&](const candidate& c) {
    return std::max(c.on[0].makespan / best[0], c.on[1].makespan / best[1]);
  };
  size_t chosen = 0;
  for (size_t i = 1; i < cands.size(); ++i)
    if (regret(cands[i]) < regret(cands[chosen]) * (1 - 1e-9)) chosen = i;
  plan_choice out;
  out.use = cands[chosen].p;
  out.built_on = cands[chosen].built_on;
  out.on_measured = cands[chosen].on[0];
  out.running_on_measured = running ? cands[0].on[0] : out.on_measured;
  out.on_equal = cands[chosen].on[1];
  out.running_on_equal = running ? cands[0].on[1] : out.on_equal;
  out.worst_regret = regret(cands[chosen]);
  out.candidates = static_cast<int>(cands.size());
  return out;
}

}  // namespace actorpipe
