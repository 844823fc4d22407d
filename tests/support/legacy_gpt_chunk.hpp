// The GPT's own chunk from before the model API (commit c135c2b), kept frozen as the test
// oracle: the GPT through the model API must train bit-identically to it. Not used by the
// runtime.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/model/chunk_compute.hpp"
#include "core/model/gpt_config.hpp"
#include "core/model/chunk_compute.hpp"
#include "core/model/tensor_box.hpp"

namespace actorpipe::legacy {

struct gpt_chunk_spec {
  int virtual_stage = 0;
  int block_begin = 0;  // transformer blocks [block_begin, block_end)
  int block_end = 0;
  bool first = false;   // owns token + position embeddings
  bool last = false;    // owns final LayerNorm + LM head (tied to the token embedding)
  bool activation_checkpointing = false;
};

// The runtime's chunk_spec over the model API's GPT layer list (embed, blocks, ln_f, lm_head)
// as the legacy block range.
gpt_chunk_spec from_layers(const chunk_spec& spec, int blocks);

class chunk_runner final : public chunk_compute {
 public:
  chunk_runner(const gpt_config& model, const gpt_chunk_spec& spec);
  ~chunk_runner() override;
  chunk_runner(const chunk_runner&) = delete;
  chunk_runner& operator=(const chunk_runner&) = delete;

  const gpt_chunk_spec& spec() const;

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
  std::vector<std::string> tied_copies() const override;
  std::vector<tensor_box> tied_parameters(const std::string& key) const override;

 private:
  struct impl;
  std::unique_ptr<impl> impl_;
};

}  // namespace actorpipe::legacy
