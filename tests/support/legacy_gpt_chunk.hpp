// One virtual stage of the GPT as the runtime sees it: the layers it owns and the stash of
// saved activations per microbatch. F, B, I and W are methods; the caller (a rank's compute
// thread) runs at most one at a time. Torch is behind this header's tensor_box, so actor code
// that only moves tensors around does not pay for torch headers.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/model/chunk_compute.hpp"
#include "core/model/gpt_config.hpp"
#include "core/model/tensor_box.hpp"

namespace actorpipe {

class chunk_runner final : public chunk_compute {
 public:
  chunk_runner(const gpt_config& model, const chunk_spec& spec);
  ~chunk_runner() override;
  chunk_runner(const chunk_runner&) = delete;
  chunk_runner& operator=(const chunk_runner&) = delete;

  const chunk_spec& spec() const;

  // F: input = token ids [B, S] int64 on the first stage, else hidden [B, S, H] float.
  // The last stage needs targets [B, S] int64 and scales its loss by loss_scale (1/M) before
  // backward. Stashes what backward needs under `microbatch`.
  forward_result forward(int microbatch, const tensor_box& input, const tensor_box& targets, double loss_scale) override;

  // B (split = false) or I (split = true): grad_output is d loss / d output (ignored on the
  // last stage, which starts from its loss). Returns d loss / d input (undefined on the first
  // stage). B accumulates every parameter gradient; I accumulates all but the linear weights
  // and biases, whose products wait for weight_grad(microbatch). Frees the stash.
  tensor_box backward(int microbatch, const tensor_box& grad_output, bool split) override;

  // W: the deferred weight-gradient products of `microbatch`, accumulated into .grad.
  void weight_grad(int microbatch) override;

  int live_stashes() const override;          // microbatches forwarded, not yet backpropagated
  int pending_weight_grads() const override;  // microbatches whose W has not run

  // Parameters by global name ("blocks.3.attn.qkv.weight", "tok_emb.weight", ...). The LM head
  // on a last stage that is not also first holds a copy of "tok_emb.weight", listed under
  // that same name (the tie is kept by summing the two gradients at flush).
  std::vector<std::pair<std::string, tensor_box>> named_parameters() const override;

  void zero_grad() override;

 private:
  struct impl;
  std::unique_ptr<impl> impl_;
};

// Tied-weight sync at flush: sets both gradients to their sum (first + second, in that order),
// so the embedding on the first stage and its copy in the last stage's LM head stay equal.
void sum_tied_gradients(const tensor_box& first_param, const tensor_box& second_param);

// The tied sync across processes, one side at a time: a copy of the gradient of the chunk's
// "tok_emb.weight" (throws std::invalid_argument if it has none or no gradient yet) ...
tensor_box tied_gradient_copy(const chunk_compute& chunk);
// ... and, once the other copy's arrived, own + other as the new gradient. Float addition is
// commutative, so both sides end up with the bits sum_tied_gradients gives.
void add_tied_gradient(const chunk_compute& chunk, const tensor_box& other);

}  // namespace actorpipe
