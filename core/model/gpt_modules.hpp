// The GPT-2 style decoder's pieces (embeddings, pre-LN blocks, final LayerNorm + tied LM head),
// each holding its parameters under their global names so any chunking of blocks lines up.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <torch/torch.h>

#include "core/model/gpt_config.hpp"
#include "core/model/split_linear.hpp"

namespace actorpipe {

// Parameters by name, as the GPT's modules list them (run_state.hpp's named_tensors hold tensor_boxes).
using named_torch_tensors = std::vector<std::pair<std::string, at::Tensor>>;

// Throws std::invalid_argument unless every size is positive, hidden % heads == 0 and
// init_std >= 0.
void validate_gpt_config(const gpt_config& config);

// Seed of one parameter's private generator: a pure function of (model seed, global name).
std::uint64_t parameter_seed(std::uint64_t seed, const std::string& global_name);

// A parameter's initial value (float32, requires_grad) from its global name alone, so every
// partition of the model starts from the same numbers: "*.bias" -> zeros; "*ln*.weight"
// (ln1, ln2, ln_f) -> ones; "*.proj.weight" -> normal(0, init_std / sqrt(2 * layers)) (GPT-2's
// residual scaling); any other weight -> normal(0, init_std).
at::Tensor init_parameter(const gpt_config& config, const std::string& global_name, at::IntArrayRef shape);

// Validates first-stage token ids: int64 [B, S], S <= seq_len, every id in [0, vocab).
// `what` names the tensor in messages ("input", "targets").
void check_token_ids(const gpt_config& config, const at::Tensor& ids, const std::string& what);

struct layer_norm {
  at::Tensor weight;
  at::Tensor bias;
  at::Tensor forward(const at::Tensor& x) const;
};

// Causal multi-head self-attention over qkv = [B, S, 3H] (q, k, v concatenated on the last
// dimension), differentiable: float32 CPU tensors go through attention_kernel.hpp's loops
// where they serve, anything else through causal_attention_libtorch. Returns [B, S, H] before
// the output projection.
at::Tensor causal_attention(const at::Tensor& qkv, int heads);

// The same on LibTorch's ops alone: 2.x's fused scaled_dot_product_attention, or on 1.x (no
// fused kernel) batched GEMMs with the scale and the mask folded into the scores' one
// (bench/own_loops measures the loops against it).
at::Tensor causal_attention_libtorch(const at::Tensor& qkv, int heads);

// GELU with the tanh approximation (GPT-2's), differentiable: float32 CPU tensors go through
// gelu_kernel.hpp's loops (~2.5x faster than at::gelu(x, "tanh"), within a few float ulps of
// it), anything else through at::gelu.
at::Tensor gelu_tanh(const at::Tensor& x);

// Token + position embedding: ids [B, S] int64 -> [B, S, hidden].
class gpt_embedding {
 public:
  explicit gpt_embedding(const gpt_config& config);
  at::Tensor forward(const at::Tensor& ids) const;
  const at::Tensor& token_weight() const { return tok_; }
  void append_parameters(named_torch_tensors& out) const;  // tok_emb.weight, pos_emb.weight

 private:
  gpt_config config_;
  at::Tensor tok_;
  at::Tensor pos_;
};

// One pre-LN transformer block with a global index: x + attn(ln1(x)), then + mlp(ln2(x)).
class gpt_block {
 public:
  gpt_block(const gpt_config& config, int index);
  at::Tensor forward(const at::Tensor& x) const;
  int index() const { return index_; }
  void append_parameters(named_torch_tensors& out) const;  // blocks.{index}.*

 private:
  int index_;
  int heads_;
  layer_norm ln1_;
  split_linear_layer qkv_;
  split_linear_layer attn_proj_;
  layer_norm ln2_;
  split_linear_layer fc_;
  split_linear_layer mlp_proj_;
};

// Final LayerNorm + LM head. The head has no bias and multiplies by `tied_weight` [vocab,
// hidden]: the token embedding itself when one chunk holds both ends, else a copy of it.
class gpt_head {
 public:
  gpt_head(const gpt_config& config, at::Tensor tied_weight);
  at::Tensor logits(const at::Tensor& h) const;                            // [B, S, vocab]
  at::Tensor loss(const at::Tensor& h, const at::Tensor& targets) const;   // mean token cross-entropy
  const at::Tensor& tied_weight() const { return tied_; }
  void append_parameters(named_torch_tensors& out) const;  // ln_f.weight, ln_f.bias (not the tied weight)

 private:
  layer_norm ln_f_;
  at::Tensor tied_;
};

}  // namespace actorpipe
