// Proves a plan runnable before anything runs: complete, dependency-ordered, deadlock-free;
// and reports how many microbatch activations each rank holds at its peak.
//
// Activation accounting (one unit = the stash of one microbatch on one virtual stage):
//   F allocates a unit; B frees it; with split backward, I frees it (the input-gradient pass
//   releases the layer intermediates), and what W still needs (each linear layer's input and
//   output-gradient, a fraction of the stash) is counted apart as a pending weight-grad until W.
#pragma once

#include <stdexcept>
#include <string>
#include <vector>

#include "core/schedule/plan.hpp"

namespace actorpipe {

struct validation_report {
  std::vector<std::string> errors;
  std::vector<int> peak_activations;           // per rank: live F..B/I stashes at peak
  std::vector<int> peak_pending_weight_grads;  // per rank: I done, W not yet, at peak

  bool ok() const { return errors.empty(); }
};

validation_report validate_plan(const plan& p);

// Throws std::invalid_argument with the first errors on one line when the plan is invalid.
validation_report require_valid(const plan& p);

}  // namespace actorpipe
