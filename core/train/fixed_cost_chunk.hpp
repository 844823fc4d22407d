// A stand-in virtual stage whose F, B, I and W take fixed wall-clock times (mostly sleep, so
// many ranks can "compute" at once on a small machine). It moves tensors through
// unchanged and has no parameters: what remains is the runtime's own cost, which the
// overhead benchmark measures against the simulator. Tests use it to inject failures.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>

#include "core/model/chunk_compute.hpp"
#include "core/train/run_setup.hpp"

namespace actorpipe {

struct fixed_costs {
  double forward_s = 0.002;
  double backward_s = 0.004;
  double input_grad_s = 0.002;
  double weight_grad_s = 0.002;
  // Test hooks: throw from this action (op letter and microbatch, e.g. {'B', 2}) ...
  char fail_op = 0;
  int fail_microbatch = -1;
  int fail_virtual_stage = -1;
  // ... or stall this long inside it.
  double stall_s = 0;
  // Costs that move: after a chunk's first `later_after` weight gradients (e.g. one step's),
  // its W takes `later_weight_grad_s` (-1: never).
  int later_after = -1;
  double later_weight_grad_s = 0;
  // W in this many equal parts, between which it may pause (weight_grad_until).
  int weight_grad_pieces = 1;
};

class fixed_cost_chunk final : public chunk_compute {
 public:
  fixed_cost_chunk(const chunk_spec& spec, const fixed_costs& costs);
  forward_result forward(int microbatch, const tensor_box& input, const tensor_box& targets, double loss_scale) override;
  tensor_box backward(int microbatch, const tensor_box& grad_output, bool split) override;
  void weight_grad(int microbatch) override;
  bool weight_grad_until(int microbatch, const std::function<bool()>& pause) override;
  int live_stashes() const override { return static_cast<int>(stash_.size()); }
  int pending_weight_grads() const override { return static_cast<int>(deferred_.size()); }
  std::vector<std::pair<std::string, tensor_box>> named_parameters() const override { return {}; }
  void zero_grad() override {}

 private:
  void spend(char op, int microbatch, double seconds);
  chunk_spec spec_;
  fixed_costs costs_;
  std::set<int> stash_, deferred_;
  std::map<int, std::pair<int, double>> w_progress_;  // a W begun: pieces run, seconds per piece
  int weight_grads_ = 0;  // W actions run so far
  tensor_box last_input_;  // handed back as the "gradient" from the last stage
};

chunk_factory fixed_cost_factory(const fixed_costs& costs);

}  // namespace actorpipe
