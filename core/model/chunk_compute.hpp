// What the runtime asks of one virtual stage: F, B/I and W on microbatches, with a stash of
// saved activations, and its parameters. The GPT's chunk_runner is one implementation; a
// benchmark's fixed-cost stage is another. No torch here (tensors are tensor_box).
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "core/model/tensor_box.hpp"

namespace actorpipe {

struct chunk_spec {
  int virtual_stage = 0;
  int block_begin = 0;  // transformer blocks [block_begin, block_end)
  int block_end = 0;
  bool first = false;   // owns token + position embeddings; input is token ids
  bool last = false;    // owns final LayerNorm + LM head (tied to the token embedding); computes the loss
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
  virtual tensor_box backward(int microbatch, const tensor_box& grad_output, bool split) = 0;
  virtual void weight_grad(int microbatch) = 0;
  virtual int live_stashes() const = 0;
  virtual int pending_weight_grads() const = 0;
  virtual std::vector<std::pair<std::string, tensor_box>> named_parameters() const = 0;
  virtual void zero_grad() = 0;
};

}  // namespace actorpipe
