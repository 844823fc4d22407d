// What the runtime asks of one virtual stage: F, B/I and W on microbatches, with a stash of
// saved activations, and its parameters. layer_chunk (any model's slice of layers) is the one
// that trains; a benchmark's fixed-cost stage is another. No torch here (tensors are tensor_box).
#pragma once

#include <algorithm>
#include <functional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "core/model/tensor_box.hpp"

namespace actorpipe {

// A failure of a model's action that every run of the job meets again, in its first step: the
// run ends as refused (exit 2, std::invalid_argument from run_pipeline), so launch
// --max-restarts does not start it again. The runtime throws it for a layer whose forward
// updates a buffer under --activation-checkpointing; a layer of one's own may throw it for a
// failure of its own that no restart can mend. Any other exception fails the run (exit 1).
struct certain_failure : std::invalid_argument {
  using std::invalid_argument::invalid_argument;
};

// Throws `text` (what `e` says, with where) as the same kind of failure: a certain_failure
// stays one; anything else is a std::runtime_error (the run had begun).
[[noreturn]] inline void throw_as(const std::exception& e, const std::string& text) {
  if (dynamic_cast<const certain_failure*>(&e) != nullptr) throw certain_failure(text);
  throw std::runtime_error(text);
}

// How such failures read: a layer whose forward updates a buffer under
// --activation-checkpointing; a tensor at a cut that no transport frame holds (more than 8
// dimensions).
inline constexpr char refused_recompute_words[] = "which --activation-checkpointing runs again in backward";
inline constexpr char refused_frame_words[] = "a tensor no transport frame holds";

struct chunk_spec {
  int virtual_stage = 0;
  int layer_begin = 0;  // the model's layers [layer_begin, layer_end)
  int layer_end = 0;
  bool first = false;   // its input is the model's input (no input gradient to hand back)
  bool last = false;    // computes the loss against the targets
  bool activation_checkpointing = false;  // keep only the input; recompute the forward in backward
};

struct forward_result {
  tensor_box output;  // activation for the next virtual stage (undefined on the last stage)
  double loss = 0;    // last stage only: this microbatch's mean token loss (unscaled)
};

class chunk_compute {
 public:
  virtual ~chunk_compute() = default;
  virtual forward_result forward(int microbatch, const tensor_box& input, const tensor_box& targets,
                                 double loss_scale) = 0;
  // The input's gradient, undefined on the first stage and where no gradient reached the
  // input (the loss does not depend on it). `grad_output` undefined on a stage before the last:
  // none reached this stage's output, and nothing is computed (as autograd in one piece would
  // not); with `split`, the W that follows does nothing either.
  virtual tensor_box backward(int microbatch, const tensor_box& grad_output, bool split) = 0;
  virtual void weight_grad(int microbatch) = 0;
  // W in parts: runs the microbatch's weight-gradient work, asking `pause` between two pieces
  // of it; when pause() says true, stops there. True when the W is done, false when some is
  // left for the next call (which continues it). The pieces run in the same order as in
  // weight_grad, and touch only what weight_grad touches. A chunk that cannot stop part-way
  // runs it whole (the default).
  virtual bool weight_grad_until(int microbatch, const std::function<bool()>& pause) {
    (void)pause;
    weight_grad(microbatch);
    return true;
  }
  // Evaluation: the slice's output for `input` with nothing kept for a backward (the last
  // stage returns the model's output, before the loss). Stages that cannot evaluate throw.
  virtual tensor_box evaluate(int microbatch, const tensor_box& input) {
    (void)microbatch;
    (void)input;
    throw std::logic_error("this stage cannot evaluate");
  }
  virtual int live_stashes() const = 0;
  virtual int pending_weight_grads() const = 0;
  virtual std::vector<std::pair<std::string, tensor_box>> named_parameters() const = 0;
  // State of the model that is not trained but is part of it (a batch norm's running
  // statistics): saved and restored with the parameters (checkpoints, --save-final,
  // --init-from), by the same naming. A tied copy's are its owner's, and not listed.
  virtual std::vector<std::pair<std::string, tensor_box>> named_buffers() const { return {}; }
  virtual void zero_grad() = 0;
  // Names (among named_parameters) of tied copies: parameters whose owner, by the model's
  // tie keys, is an earlier virtual stage. They are trained like the others but counted once
  // (norms, saved parameters) where they are owned.
  virtual std::vector<std::string> tied_copies() const { return {}; }
  // The parameters tied under `key` that this stage holds (owned or copies), in module order.
  virtual std::vector<tensor_box> tied_parameters(const std::string& key) const {
    (void)key;
    return {};
  }
  // Data parallelism listens here: `listener(i)` runs on the thread doing the backward each
  // time a contribution has been accumulated into parameter i's gradient (i indexes
  // named_parameters()), so a bucket can leave as soon as its gradients are final. Returns
  // false where the chunk cannot tell; its gradients then leave after its last backward.
  virtual bool set_gradient_listener(std::function<void(int parameter)> listener) {
    (void)listener;
    return false;
  }
};

// What a stage saves (checkpoints, --save-final): its parameters, less tied copies (their
// owner saves them), then its buffers.
inline std::vector<std::pair<std::string, tensor_box>> saved_tensors(const chunk_compute& runner) {
  const auto copies = runner.tied_copies();
  std::vector<std::pair<std::string, tensor_box>> out;
  for (auto& p : runner.named_parameters())
    if (std::find(copies.begin(), copies.end(), p.first) == copies.end()) out.push_back(std::move(p));
  for (auto& b : runner.named_buffers()) out.push_back(std::move(b));
  return out;
}

// What a stage takes from saved weights: every parameter (tied copies too), then its buffers.
inline std::vector<std::pair<std::string, tensor_box>> loaded_tensors(const chunk_compute& runner) {
  auto out = runner.named_parameters();
  for (auto& b : runner.named_buffers()) out.push_back(std::move(b));
  return out;
}

}  // namespace actorpipe
