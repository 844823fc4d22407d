// Fixed-cost stage: each action ends at a deadline measured from its start.
#include "core/train/fixed_cost_chunk.hpp"

#include <algorithm>
#include <chrono>
#include <stdexcept>
#include <thread>

namespace actorpipe {

fixed_cost_chunk::fixed_cost_chunk(const chunk_spec& spec, const fixed_costs& costs) : spec_(spec), costs_(costs) {}

void fixed_cost_chunk::spend(char op, int microbatch, double seconds) {
  const auto start = std::chrono::steady_clock::now();
  if (op == costs_.fail_op && microbatch == costs_.fail_microbatch &&
      (costs_.fail_virtual_stage < 0 || costs_.fail_virtual_stage == spec_.virtual_stage)) {
    if (costs_.stall_s > 0)
      std::this_thread::sleep_for(std::chrono::duration<double>(costs_.stall_s));
    else
      throw std::runtime_error("injected failure in " + std::string(1, op) + std::to_string(spec_.virtual_stage) + "." +
                               std::to_string(microbatch));
  }
  // Sleep most of the way (the OS oversleeps by ~0.1 ms here), then yield-spin to the deadline.
  const auto deadline =
      start + std::chrono::duration_cast<std::chrono::steady_clock::duration>(std::chrono::duration<double>(seconds));
  std::this_thread::sleep_until(deadline - std::chrono::microseconds(300));
  while (std::chrono::steady_clock::now() < deadline) std::this_thread::yield();
}

forward_result fixed_cost_chunk::forward(int microbatch, const tensor_box& input, const tensor_box&, double) {
  if (!stash_.insert(microbatch).second)
    throw std::invalid_argument("microbatch " + std::to_string(microbatch) + " is already stashed");
  spend('F', microbatch, costs_.forward_s);
  last_input_ = input;
  forward_result r;
  if (!spec_.last) r.output = input;
  return r;
}

tensor_box fixed_cost_chunk::backward(int microbatch, const tensor_box& grad_output, bool split) {
  if (!stash_.erase(microbatch)) throw std::invalid_argument("nothing stashed for microbatch " + std::to_string(microbatch));
  spend(split ? 'I' : 'B', microbatch, split ? costs_.input_grad_s : costs_.backward_s);
  if (split) deferred_.insert(microbatch);
  if (spec_.first) return {};
  return grad_output.defined() ? grad_output : last_input_;
}

void fixed_cost_chunk::weight_grad(int microbatch) { weight_grad_until(microbatch, {}); }

bool fixed_cost_chunk::weight_grad_until(int microbatch, const std::function<bool()>& pause) {
  if (!deferred_.count(microbatch))
    throw std::invalid_argument("nothing deferred for microbatch " + std::to_string(microbatch));
  const int pieces = std::max(1, costs_.weight_grad_pieces);
  auto it = w_progress_.find(microbatch);
  if (it == w_progress_.end()) {
    const bool later = costs_.later_after >= 0 && weight_grads_++ >= costs_.later_after;
    const double seconds = later ? costs_.later_weight_grad_s : costs_.weight_grad_s;
    it = w_progress_.emplace(microbatch, std::make_pair(0, seconds / pieces)).first;
  }
  for (bool first = true; it->second.first < pieces; first = false) {
    if (!first && pause && pause()) return false;
    ++it->second.first;
    spend('W', microbatch, it->second.second);
  }
  w_progress_.erase(it);
  deferred_.erase(microbatch);
  return true;
}

chunk_factory fixed_cost_factory(const fixed_costs& costs) {
  return [costs](const chunk_spec& spec) { return std::make_shared<fixed_cost_chunk>(spec, costs); };
}

}  // namespace actorpipe
