// Which plan to run on costs measured on a shared or uneven machine. One step's per-op costs
// carry each rank's speed during that step, and a rank can run 10-35% slow for seconds (another
// tenant on its core); a zero-bubble plan built for that rank's slowness is worse than the
// unit-cost plan once the speeds even out (3-7% on this project's GPT, measured from traces).
// So a plan is chosen among candidates (the one running, one built on the costs as measured,
// one built on the same costs with the ranks' speeds made equal) by its worst slowdown, over
// both cost pictures, against the best candidate for that picture (minimax regret): a plan
// fit for one picture that loses much on the other is not chosen.
#pragma once

#include <memory>
#include <string>

#include "core/schedule/placement.hpp"
#include "core/schedule/plan.hpp"
#include "core/sim/cost_model.hpp"
#include "core/sim/simulator.hpp"

namespace actorpipe {

// `costs` with each rank's ops scaled by one factor per rank so that every rank's work per
// microbatch (F + B over its virtual stages) is the mean over ranks; the ratios between one
// rank's ops stay. Per-virtual-stage vectors in the result. Throws std::invalid_argument when
// `place` has no virtual stages or a rank's work is not positive.
cost_model equal_rank_speeds(const cost_model& costs, const placement& place);

struct plan_choice {
  std::shared_ptr<const plan> use;
  std::string built_on;    // "running" (kept), "measured" or "equal speeds"
  sim_result on_measured;  // `use` simulated on the costs as measured
  sim_result running_on_measured;
  sim_result on_equal, running_on_equal;  // the same, with the ranks' speeds made equal
  double worst_regret = 1;  // `use`'s largest makespan / the best candidate's, over the two pictures
  int candidates = 1;       // distinct plans compared (1: every candidate was the same plan)
};

// Chooses among `running` (may be null), `schedule` built on `measured` and `schedule` built on
// equal_rank_speeds(measured): the smallest worst regret over the two cost pictures; ties keep
// `running`, then prefer the plan built on the costs as measured. Candidates with the same text
// count once. Throws what make_schedule or simulate throw.
plan_choice choose_plan(const std::string& schedule, int ranks, int microbatches, const placement& place,
                        const cost_model& measured, const std::shared_ptr<const plan>& running);

}  // namespace actorpipe
