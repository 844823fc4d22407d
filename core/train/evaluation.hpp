// Evaluation passes: what a forward-only pass over a model's eval data yields. The pieces come
// from the last virtual stage one microbatch at a time (in any order, any process); the
// summary concatenates them in eval order and asks the model for its loss and metrics.
#pragma once

#include <cstdint>
#include <vector>

#include "core/model/tensor_box.hpp"
#include "core/train/train_options.hpp"

namespace actorpipe {

struct model_definition;

// One microbatch's outputs (float32) and targets (int64), as plain numbers that can cross
// processes.
struct eval_piece {
  std::vector<std::int64_t> shape;
  std::vector<float> outputs;
  std::vector<std::int64_t> target_shape;
  std::vector<std::int64_t> targets;
};

// Throws std::invalid_argument unless the output is floating-point and the targets int64.
eval_piece make_eval_piece(const tensor_box& output, const tensor_box& targets);
// The piece the model keeps of a microbatch: with eval_target_losses, each target's loss in
// place of the output (checked to have the targets' shape); else the output.
eval_piece make_eval_piece(const model_definition& model, const tensor_box& output, const tensor_box& targets);

// Whether a pass is due after `done` steps: every options.eval_every steps, and after the last.
inline bool eval_due(const train_options& o, int done) {
  return (o.eval_every > 0 && done % o.eval_every == 0) || done == o.steps;
}

// The record of a pass after `step` steps: pieces [0, model.eval_microbatches) in order (any
// beyond, padding of the last round, are left out). Its loss: with eval_target_losses, the
// mean of the kept losses over the targets that are not -100 (summed in double, in order);
// else model.loss of every output and target.
eval_record summarize_eval(const model_definition& model, int step, const std::vector<eval_piece>& pieces);

}  // namespace actorpipe
