// The frozen pre-model-API GPT chunk (the bit-identity oracle of the tests).
#include "tests/support/legacy_gpt_chunk.hpp"

#include <algorithm>
#include <cmath>
#include <map>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <utility>

#include "core/model/gpt_modules.hpp"
#include "core/model/split_linear.hpp"
#include "core/model/tensor_box_torch.hpp"

namespace actorpipe::legacy {
namespace {

std::string describe(const at::Tensor& t) {
  if (!t.defined()) return "an undefined tensor";
  std::ostringstream os;
  os << c10::toString(t.scalar_type()) << " " << t.sizes();
  return os.str();
}

std::string shape_text(const std::vector<std::int64_t>& shape) {
  std::ostringstream os;
  os << at::IntArrayRef(shape);
  return os.str();
}

// What backward needs for one microbatch. Under activation checkpointing `output` stays
// undefined and the forward is recomputed from `input`.
struct stash {
  at::Tensor input;    // token ids (first stage) or a leaf that collects d loss / d input
  at::Tensor targets;  // last stage only
  double loss_scale = 1.0;
  at::Tensor output;   // hidden output, or the scaled loss on the last stage
};

}  // namespace

struct chunk_runner::impl {
  gpt_config model;
  gpt_chunk_spec spec;
  std::optional<gpt_embedding> embedding;
  std::vector<gpt_block> blocks;
  at::Tensor head_copy;  // last-but-not-first stage's own copy of tok_emb.weight
  std::optional<gpt_head> head;
  std::map<int, stash> stashes;
  std::map<int, weight_grad_store> stores;

  std::string where(const char* op, int microbatch) const {
    return std::string(op) + " of microbatch " + std::to_string(microbatch) + " on virtual stage " +
           std::to_string(spec.virtual_stage);
  }

  // The chunk's forward: the hidden output, or the unscaled mean loss on the last stage.
  at::Tensor run(const at::Tensor& input, const at::Tensor& targets) const {
    at::Tensor h = spec.first ? embedding->forward(input) : input;
    for (const auto& block : blocks) h = block.forward(h);
    return spec.last ? head->loss(h, targets) : h;
  }

  std::vector<std::int64_t> output_shape(const at::Tensor& input) const {
    return {input.size(0), input.size(1), model.hidden};
  }
};

chunk_runner::chunk_runner(const gpt_config& model, const gpt_chunk_spec& spec) : impl_(std::make_unique<impl>()) {
  validate_gpt_config(model);
  if (spec.block_begin > spec.block_end) {
    throw std::invalid_argument("chunk_spec: block_begin=" + std::to_string(spec.block_begin) +
                                " is after block_end=" + std::to_string(spec.block_end));
  }
  if (spec.block_begin < 0 || spec.block_end > model.layers) {
    throw std::invalid_argument("chunk_spec: block range [" + std::to_string(spec.block_begin) + ", " +
                                std::to_string(spec.block_end) + ") is outside the model's [0, layers=" +
                                std::to_string(model.layers) + ")");
  }
  impl_->model = model;
  impl_->spec = spec;
  if (spec.first) impl_->embedding.emplace(model);
  impl_->blocks.reserve(static_cast<std::size_t>(spec.block_end - spec.block_begin));
  for (int i = spec.block_begin; i < spec.block_end; ++i) impl_->blocks.emplace_back(model, i);
  if (spec.last) {
    if (spec.first) {
      impl_->head.emplace(model, impl_->embedding->token_weight());
    } else {
      // Same name, same seed, so the copy starts equal to the first stage's embedding.
      impl_->head_copy = init_parameter(model, "tok_emb.weight", {model.vocab, model.hidden});
      impl_->head.emplace(model, impl_->head_copy);
    }
  }
}

chunk_runner::~chunk_runner() = default;

const gpt_chunk_spec& chunk_runner::spec() const { return impl_->spec; }

forward_result chunk_runner::forward(int microbatch, const tensor_box& input, const tensor_box& targets,
                                     double loss_scale) {
  torch::AutoGradMode enable_grad(true);  // grad mode is thread-local; the caller's is unknown
  auto& m = *impl_;
  if (m.stashes.count(microbatch)) {
    throw std::invalid_argument(m.where("forward", microbatch) + ": microbatch " + std::to_string(microbatch) +
                                " is already stashed (run its backward first)");
  }
  const at::Tensor& in = unbox(input);
  at::Tensor x;
  if (m.spec.first) {
    check_token_ids(m.model, in, "input");
    x = in;
  } else {
    if (!in.defined() || in.dim() != 3 || !in.is_floating_point() || in.size(2) != m.model.hidden) {
      throw std::invalid_argument(m.where("forward", microbatch) + ": input must be a float hidden state [B, S, hidden=" +
                                  std::to_string(m.model.hidden) + "], got " + describe(in));
    }
    if (in.size(1) > m.model.seq_len) {
      throw std::invalid_argument(m.where("forward", microbatch) + ": sequence length " + std::to_string(in.size(1)) +
                                  " exceeds the model's seq_len=" + std::to_string(m.model.seq_len));
    }
    // Our own leaf: the caller's tensor is never touched, and backward's d/dinput lands here.
    x = in.detach().requires_grad_(true);
  }
  stash s;
  s.input = x;
  if (m.spec.last) {
    const at::Tensor& t = unbox(targets);
    check_token_ids(m.model, t, "targets");
    if (t.size(0) != x.size(0) || t.size(1) != x.size(1)) {
      throw std::invalid_argument(m.where("forward", microbatch) + ": targets " + describe(t) +
                                  " do not match the input's [B, S] = [" + std::to_string(x.size(0)) + ", " +
                                  std::to_string(x.size(1)) + "]");
    }
    if (!std::isfinite(loss_scale)) {
      throw std::invalid_argument(m.where("forward", microbatch) + ": loss_scale must be finite, got " +
                                  std::to_string(loss_scale));
    }
    s.targets = t;
    s.loss_scale = loss_scale;
  }

  forward_result result;
  at::Tensor out;
  if (m.spec.activation_checkpointing) {
    torch::NoGradGuard no_grad;  // nothing saved; backward recomputes the same ops
    out = m.run(x, s.targets);
  } else {
    out = m.run(x, s.targets);
  }
  if (m.spec.last) {
    result.loss = out.item<double>();
    if (!m.spec.activation_checkpointing) s.output = out * loss_scale;
  } else {
    result.output = box(out.detach());
    if (!m.spec.activation_checkpointing) s.output = out;
  }
  m.stashes.emplace(microbatch, std::move(s));
  return result;
}

tensor_box chunk_runner::backward(int microbatch, const tensor_box& grad_output, bool split) {
  torch::AutoGradMode enable_grad(true);
  auto& m = *impl_;
  auto it = m.stashes.find(microbatch);
  if (it == m.stashes.end()) {
    throw std::invalid_argument(m.where("backward", microbatch) + ": nothing stashed (run its forward first)");
  }
  at::Tensor g;
  if (!m.spec.last) {
    g = unbox(grad_output);
    const auto expected = m.output_shape(it->second.input);
    if (!g.defined() || g.sizes() != at::IntArrayRef(expected)) {
      throw std::invalid_argument(m.where("backward", microbatch) + ": grad_output must be " + shape_text(expected) +
                                  " like the forward output, got " + describe(g));
    }
  }
  stash s = std::move(it->second);
  m.stashes.erase(it);

  at::Tensor out = s.output;
  if (m.spec.activation_checkpointing) {
    out = m.run(s.input, s.targets);
    if (m.spec.last) out = out * s.loss_scale;
  }
  {
    std::optional<weight_grad_deferral> defer;
    if (split) defer.emplace(m.stores[microbatch]);  // W(microbatch) is valid even if nothing was deferred
    if (m.spec.last) {
      torch::autograd::backward({out});
    } else {
      torch::autograd::backward({out}, {g});
    }
  }
  if (m.spec.first) return tensor_box();
  return box(s.input.grad());
}

void chunk_runner::weight_grad(int microbatch) {
  auto& m = *impl_;
  auto it = m.stores.find(microbatch);
  if (it == m.stores.end()) {
    throw std::invalid_argument(m.where("weight_grad", microbatch) +
                                ": nothing deferred (run backward with split=true first)");
  }
  weight_grad_store store = std::move(it->second);
  m.stores.erase(it);
  store.run();
}

int chunk_runner::live_stashes() const { return static_cast<int>(impl_->stashes.size()); }

int chunk_runner::pending_weight_grads() const { return static_cast<int>(impl_->stores.size()); }

std::vector<std::pair<std::string, tensor_box>> chunk_runner::named_parameters() const {
  const auto& m = *impl_;
  named_torch_tensors params;
  if (m.embedding) m.embedding->append_parameters(params);
  for (const auto& block : m.blocks) block.append_parameters(params);
  if (m.head) {
    m.head->append_parameters(params);
    if (m.head_copy.defined()) params.emplace_back("tok_emb.weight", m.head_copy);
  }
  std::vector<std::pair<std::string, tensor_box>> out;
  out.reserve(params.size());
  for (auto& p : params) out.emplace_back(p.first, box(p.second));
  return out;
}

void chunk_runner::zero_grad() {
  // Drop the gradients (PyTorch's set_to_none): the next accumulation starts from the first
  // product itself, and an undefined grad reads as zero everywhere in actorpipe.
  for (const auto& p : named_parameters()) {
    const at::Tensor& t = unbox(p.second);
    if (t.grad().defined()) t.mutable_grad() = at::Tensor();
  }
}

std::vector<std::string> chunk_runner::tied_copies() const {
  if (impl_->head_copy.defined()) return {"tok_emb.weight"};
  return {};
}

std::vector<tensor_box> chunk_runner::tied_parameters(const std::string& key) const {
  if (key != "tok_emb") return {};
  if (impl_->embedding) return {box(impl_->embedding->token_weight())};
  if (impl_->head_copy.defined()) return {box(impl_->head_copy)};
  return {};
}

gpt_chunk_spec from_layers(const chunk_spec& spec, int blocks) {
  gpt_chunk_spec g;
  g.virtual_stage = spec.virtual_stage;
  g.first = spec.first;
  g.last = spec.last;
  g.activation_checkpointing = spec.activation_checkpointing;
  // layer 0 is the embedding, block i is layer i + 1, then ln_f and lm_head
  g.block_begin = std::max(0, spec.layer_begin - 1);
  g.block_end = std::min(blocks, spec.layer_end - 1);
  return g;
}

}  // namespace actorpipe::legacy
