// Simulator for policies (static or dynamic): event-driven, each idle rank asks its policy
// what to run among the actions whose inputs have arrived by now. For a static plan it agrees
// with simulate(); for a dynamic policy it predicts the order the runtime will follow.
#pragma once

#include <memory>
#include <vector>

#include "core/schedule/policy.hpp"
#include "core/sim/simulator.hpp"

namespace actorpipe {

struct policy_sim_result {
  sim_result timeline;
  plan executed;  // what each rank ran, in order: a plan you can print, validate and replay
};

// policies[r] drives rank r; they are reset first. Throws std::runtime_error naming every
// stuck rank and what it waits for when the policies deadlock (naming the rank whose policy
// ran all the actions it lists and does not say it is finished), and std::invalid_argument as
// simulate does when a time is so large that a cost rounds away next to it (end_time).
policy_sim_result simulate_policies(const placement& place, int microbatches,
                                    std::vector<std::unique_ptr<rank_policy>>& policies, const cost_model& costs,
                                    const std::string& name = "policy");

}  // namespace actorpipe
