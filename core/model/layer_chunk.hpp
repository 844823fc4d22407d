// One virtual stage of any model: a contiguous slice of its layer list, the stash of saved
// activations per microbatch, and the deferred weight-gradient halves. F, B, I and W are
// methods; the caller (a rank's compute thread) runs at most one at a time. Torch stays
// behind tensor_box, so actor code that only moves tensors around does not pay for it.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/model/chunk_compute.hpp"
#include "core/model/tensor_box.hpp"

namespace actorpipe {

struct model_definition;

class layer_chunk : public chunk_compute {
 public:
  // Builds the modules of layers [spec.layer_begin, spec.layer_end), each under its seed. A
  // tied layer whose key's first layer lies on an earlier stage builds that layer's module as
  // a copy and holds only the tied parameters of it. Throws std::invalid_argument for a range
  // outside the model or a parameter name two layers share.
  layer_chunk(std::shared_ptr<const model_definition> model, const chunk_spec& spec);
  ~layer_chunk() override;
  layer_chunk(const layer_chunk&) = delete;
  layer_chunk& operator=(const layer_chunk&) = delete;

  const chunk_spec& spec() const;

  // F: runs the slice on `input` (the model's input on the first stage, else the previous
  // stage's output, which must be floating-point). The last stage computes the loss against
  // `targets`, scales it by loss_scale (1/M) for backward and reports it unscaled.
  forward_result forward(int microbatch, const tensor_box& input, const tensor_box& targets, double loss_scale) override;

  // B (split = false) or I (split = true): grad_output is d loss / d output (ignored on the
  // last stage). Returns d loss / d input (undefined on the first stage). B accumulates every
  // parameter gradient; I only the input path's, keeping what W needs. Frees the stash.
  tensor_box backward(int microbatch, const tensor_box& grad_output, bool split) override;

  // W: the weight gradients I left for later, accumulated into .grad.
  void weight_grad(int microbatch) override;
  // Pauses between two deferred weight/bias products (modules that defer them); a W from a
  // second autograd pass (generic split) runs whole.
  bool weight_grad_until(int microbatch, const std::function<bool()>& pause) override;

  // Evaluation: the slice on `input` without autograd and without a stash; the last stage
  // returns its last layer's output (the loss is left to whoever has every microbatch).
  tensor_box evaluate(int microbatch, const tensor_box& input) override;

  int live_stashes() const override;
  int pending_weight_grads() const override;
  // Hooks after each parameter's gradient accumulator (autograd's, and a deferring
  // split_linear's W): see chunk_compute.
  bool set_gradient_listener(std::function<void(int parameter)> listener) override;
  // By global name (the layer's param prefix + the module's name), in layer order; a tied
  // module once, at its first layer in this slice.
  std::vector<std::pair<std::string, tensor_box>> named_parameters() const override;
  std::vector<std::pair<std::string, tensor_box>> named_buffers() const override;
  void zero_grad() override;
  std::vector<std::string> tied_copies() const override;

  std::vector<tensor_box> tied_parameters(const std::string& key) const override;

 private:
  struct impl;
  std::unique_ptr<impl> impl_;
};

// The tied sync at flush, one holder at a time: copies of this holder's gradients of `key`'s
// tied parameters (undefined where none reached it) ...
std::vector<tensor_box> tied_gradient_copies(const chunk_compute& chunk, const std::string& key);
// ... and, with every holder's copies in virtual-stage order (this one's among them), their
// sum as the new gradient (undefined copies left out; undefined if every one is). Every holder
// adds in the same order, so all end with equal bits.
void set_tied_gradient_sums(const chunk_compute& chunk, const std::string& key,
                            const std::vector<std::vector<tensor_box>>& per_holder);

}  // namespace actorpipe
