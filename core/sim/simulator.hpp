// Discrete-event simulator: runs a validated plan against a cost model. Each rank executes
// its list in order, one action at a time; an action starts when its rank is free and its
// inputs have arrived (plus send latency when they come from another rank). The result is
// the yardstick measured runs are compared with.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "core/schedule/plan.hpp"
#include "core/sim/cost_model.hpp"

namespace actorpipe {

struct timeline_event {
  int rank = 0;
  action act;
  int chunk = 0;  // chunk slot of act's virtual stage on its rank
  double start = 0;
  double end = 0;
  // B only: when its input gradient left, before its weight part ran (see cost_model's
  // early_input_grad); < 0 where the output left at the end.
  double output_at = -1;
  // A W that paused part-way (a W run out of turn lets an F or I go first): this part
  // continues in a later event of the same action on the same rank, which ends it.
  bool continues = false;
};

struct sim_result {
  std::string schedule;
  int stages = 0;
  int chunks = 0;
  int microbatches = 0;
  double makespan = 0;
  double ideal_time = 0;    // the busiest rank's total compute: the makespan with no bubble
  double bubble_ratio = 0;  // 1 - total busy / (stages * makespan)
  std::vector<double> busy;  // per rank
  std::vector<double> idle;  // per rank: makespan - busy
  std::vector<int> peak_activations;           // per rank, see plan_validator.hpp
  std::vector<int> peak_pending_weight_grads;  // per rank
  std::vector<timeline_event> events;          // in execution order per rank, ranks in order
};

// Validates first (throws std::invalid_argument for an invalid plan). Also throws
// std::invalid_argument, naming the action, its start and its cost, when a time grows so large
// next to a cost that adding the cost rounds more than a thousandth of it away (a time ~1e13
// times the cost; costs and latency within max_cost_ratio never get there): a wrong timeline
// is never returned.
sim_result simulate(const plan& p, const cost_model& costs);

// simulate(p, costs).makespan, the same number, without validating the plan or keeping its
// timeline: for a search that times many plans a generator built (zb-h1's and zbv's list
// scheduler), which validates the one it keeps. The costs are checked as simulate checks them;
// a plan that cannot run to its end throws std::logic_error.
double plan_makespan(const plan& p, const cost_model& costs);

// start + cost, the end of action `a` on `rank`; the simulators' one way to add a cost to a
// time. Throws std::invalid_argument as simulate does when the sum loses more than a thousandth
// of the cost to rounding.
double end_time(int rank, const action& a, double start, double cost);

// Per-(op, virtual stage) mean durations of a timeline (measured or simulated) as a cost model
// for S virtual stages; B is I + W where no full backward ran, and an op that never ran costs 0.
// B events that sent their gradient early (output_at set) make the model's early_input_grad
// true and give I and W their split where no I or W action ran on that virtual stage.
cost_model mean_costs(const std::vector<timeline_event>& events, int virtual_stages);

// The same with medians: what an op takes in steady state, robust to a few slow actions (the
// first forwards of a process's first step pay for first-touch allocations: up to 2x here).
// The plans rebuilt on measured costs use these.
cost_model median_costs(const std::vector<timeline_event>& events, int virtual_stages);

// How many actions the events record: a paused W's earlier parts (`continues`) not counted.
std::size_t actions_in(const std::vector<timeline_event>& events);

// Fills busy, idle, makespan (the last end), ideal_time and bubble_ratio from r.events and
// r.stages; shared by the simulators and the runtime's measured timeline.
void summarize_timeline(sim_result& r);

}  // namespace actorpipe
