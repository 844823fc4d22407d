// AdamW over one shard of named parameters (a rank's, or a virtual stage's), plus the
// learning-rate schedule. Decay applies to matrices and embeddings; biases and LayerNorm
// weights (every 1-D parameter) get none.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/model/tensor_box.hpp"
#include "core/optim/moment_segments.hpp"

namespace actorpipe {

struct adamw_options {
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;
  double weight_decay = 0.1;
};

class shard_optimizer {
 public:
  shard_optimizer(std::vector<std::pair<std::string, tensor_box>> params, const adamw_options& options);
  ~shard_optimizer();
  shard_optimizer(const shard_optimizer&) = delete;
  shard_optimizer& operator=(const shard_optimizer&) = delete;

  // Each parameter's sum of squared gradient entries (in double), in parameter order; parameters
  // named in `skip` (e.g. the tied head copy) and those without a gradient are left out. Added
  // one by one in model order, these give the same norm however the model is cut.
  std::vector<double> grad_sq_sums(const std::vector<std::string>& skip = {}) const;
  // Their sum, added in that order.
  double grad_sq_sum(const std::vector<std::string>& skip = {}) const;
  void scale_grads(double factor);
  // AdamW on every parameter with a gradient. grad_scale (the clip coefficient) multiplies each
  // gradient as the update reads it, leaving .grad as it is: the same bits as
  // scale_grads(grad_scale) then step(lr), one pass fewer.
  void step(double lr, double grad_scale = 1.0);
  void zero_grad();
  // The first parameter holding a value that is not finite (an update that diverged), "" if none.
  std::string nonfinite_parameter() const;
  int num_parameters() const;  // tensors
  long long num_elements() const;
  long long state_bytes() const;  // the AdamW moments it holds
  // The moments by parameter name (copies, one whole run per parameter), and loading them from
  // runs of any layout (std::invalid_argument naming a parameter whose runs leave a gap). A
  // parameter updated before gets its gradient back, zeroed, as the run it continues had it
  // (restore_gradient).
  std::vector<moment_segment> export_moments() const;
  void import_moments(const std::vector<moment_segment>& runs);

 private:
  struct impl;
  std::unique_ptr<impl> impl_;
};

// How the learning rate falls after the warm-up (Megatron's --lr-decay-style): linearly or
// along a half cosine to base_lr * min_ratio at the last step, or not at all.
enum class lr_decay { linear, cosine, constant };
// "linear", "cosine", "constant"; and back (std::invalid_argument naming the text otherwise:
// "--lr-decay-style must be linear, cosine or constant: got 'cos'").
const char* lr_decay_name(lr_decay style);
lr_decay parse_lr_decay(const std::string& text);

// The rules of the decay's floor and AdamW's settings as their flags name them: "" when `value`
// keeps the rule of `flag` (--min-lr-ratio in [0, 1], --adam-beta1 and --adam-beta2 in [0, 1),
// --adam-eps within a float's normal range), else the line that refuses it ("--adam-beta1 must
// be in [0, 1): got 1"). One rule for the command line's flags and for train_options.
std::string optimizer_setting_error(const std::string& flag, double value);

// Linear warm-up from 0 to base_lr over warmup_steps, then the decay `style` to
// base_lr * min_ratio at step decay_steps (counted from 1, as --steps; 0: total_steps), and
// there it stays to the end of the run (Megatron's --lr-decay-iters and nanoGPT's lr_decay_iters,
// which reach the floor a step later).
// A decay_steps past total_steps ends the run mid-decay, as its first part of a longer schedule
// (a run resumed with more --steps goes on along it). step counts from 0. std::invalid_argument
// for a decay_steps below 0, or one that leaves no step to decay over (<= warmup_steps + 1);
// lr_decay_steps_error says why in the flags' words.
double lr_at(int step, double base_lr, int warmup_steps, int total_steps, double min_ratio = 0.1,
             lr_decay style = lr_decay::linear, int decay_steps = 0);
// The step the decay ends at: decay_steps, or total_steps where it is 0.
inline int lr_decay_end(int decay_steps, int total_steps) { return decay_steps > 0 ? decay_steps : total_steps; }
// "" when decay_steps suits warmup_steps (0, or past warmup_steps + 1), else the line that
// refuses it, naming --lr-decay-steps and --warmup-steps.
std::string lr_decay_steps_error(int decay_steps, int warmup_steps);

// Clip coefficient for a global gradient norm: min(1, max_norm / (norm + 1e-6)); 1 when
// max_norm <= 0 (clipping off).
double clip_coefficient(double global_norm, double max_norm);

// Why step `step` (from 0) must not update the weights: a microbatch's loss (by microbatch)
// or the gradient norm that is not a finite number, in words naming it; "" when all are.
std::string divergence_error(int step, const std::vector<double>& losses, double grad_norm);
// Why the parameters step `step` (from 0) left must not be kept: `parameter` (a
// nonfinite_parameter) holds values that are not finite.
std::string nonfinite_update_error(int step, const std::string& parameter);

}  // namespace actorpipe
