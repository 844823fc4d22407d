// GPT modules: name-seeded parameter init and the forward math of embeddings, blocks and head.
#include "core/model/gpt_modules.hpp"

#include "core/data/splitmix64.hpp"
#include "core/model/attention_kernel.hpp"
#include "core/model/gelu_kernel.hpp"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Parallel.h>
#include <torch/version.h>

#include <cmath>
#include <limits>
#include <sstream>
#include <stdexcept>
#include <utility>

namespace actorpipe {
namespace {

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

std::string describe(const at::Tensor& t) {
  std::ostringstream os;
  os << c10::toString(t.scalar_type()) << " " << t.sizes();
  return os.str();
}

layer_norm make_layer_norm(const gpt_config& config, const std::string& prefix) {
  return {init_parameter(config, prefix + ".weight", {config.hidden}),
          init_parameter(config, prefix + ".bias", {config.hidden})};
}

split_linear_layer make_linear(const gpt_config& config, const std::string& prefix, std::int64_t in, std::int64_t out) {
  return {init_parameter(config, prefix + ".weight", {out, in}), init_parameter(config, prefix + ".bias", {out})};
}

}  // namespace

void validate_gpt_config(const gpt_config& config) {
  auto positive = [](const char* name, int v) {
    if (v <= 0) throw std::invalid_argument(std::string("gpt_config.") + name + " must be positive, got " + std::to_string(v));
  };
  positive("vocab", config.vocab);
  positive("seq_len", config.seq_len);
  positive("hidden", config.hidden);
  positive("heads", config.heads);
  positive("layers", config.layers);
  if (config.hidden % config.heads != 0) {
    throw std::invalid_argument("gpt_config.hidden must be divisible by heads: got hidden=" +
                                std::to_string(config.hidden) + ", heads=" + std::to_string(config.heads));
  }
  if (!(config.init_std >= 0)) {
    throw std::invalid_argument("gpt_config.init_std must be >= 0, got " + std::to_string(config.init_std));
  }
}

std::uint64_t parameter_seed(std::uint64_t seed, const std::string& global_name) {
  std::uint64_t h = 0xcbf29ce484222325ULL;  // FNV-1a over the name, then mixed with the seed
  for (unsigned char c : global_name) {
    h ^= c;
    h *= 0x100000001b3ULL;
  }
  return splitmix64(seed ^ splitmix64(h));
}

at::Tensor init_parameter(const gpt_config& config, const std::string& global_name, at::IntArrayRef shape) {
  torch::NoGradGuard no_grad;
  const auto options = at::TensorOptions().dtype(at::kFloat);
  at::Tensor t;
  const auto last_dot = global_name.rfind('.');
  const std::string module = global_name.substr(0, last_dot == std::string::npos ? 0 : last_dot);
  const std::string module_leaf = module.substr(module.rfind('.') == std::string::npos ? 0 : module.rfind('.') + 1);
  if (ends_with(global_name, ".bias")) {
    t = at::zeros(shape, options);
  } else if (module_leaf.rfind("ln", 0) == 0) {
    t = at::ones(shape, options);
  } else {
    double std = config.init_std;
    if (ends_with(global_name, ".proj.weight")) std /= std::sqrt(2.0 * config.layers);
    at::Generator gen = at::detail::createCPUGenerator(parameter_seed(config.seed, global_name));
    t = at::normal(0.0, std, shape, gen, options);
  }
  t.set_requires_grad(true);
  return t;
}

void check_token_ids(const gpt_config& config, const at::Tensor& ids, const std::string& what) {
  if (!ids.defined()) throw std::invalid_argument(what + " must be int64 token ids [B, S], got an undefined tensor");
  if (ids.dim() != 2 || ids.scalar_type() != at::kLong) {
    throw std::invalid_argument(what + " must be int64 token ids of shape [B, S], got " + describe(ids));
  }
  if (ids.size(1) > config.seq_len) {
    throw std::invalid_argument(what + ": sequence length " + std::to_string(ids.size(1)) +
                                " exceeds the model's seq_len=" + std::to_string(config.seq_len));
  }
  if (ids.numel() == 0) return;
  const auto hi = ids.max().item<std::int64_t>();
  const auto lo = ids.min().item<std::int64_t>();
  if (hi >= config.vocab || lo < 0) {
    throw std::invalid_argument(what + ": token id " + std::to_string(hi >= config.vocab ? hi : lo) +
                                " is out of range for vocab=" + std::to_string(config.vocab) + " (ids must be in [0, " +
                                std::to_string(config.vocab) + "))");
  }
}

at::Tensor layer_norm::forward(const at::Tensor& x) const {
  return at::layer_norm(x, {weight.size(0)}, weight, bias, 1e-5);
}

namespace {

// Causal attention on attention_kernel's loops (q, k, v read straight out of qkv, the output
// written as [B, S, H], blocks above the diagonal skipped), split over LibTorch's intra-op
// threads by (sequence, head): each pair is one thread's whole, so the bits do not depend on
// the thread count. Saves qkv and the softmax for backward.
struct causal_attention_function : public torch::autograd::Function<causal_attention_function> {
  static attention_dims dims_of(const at::Tensor& qkv, std::int64_t heads) {
    return {qkv.size(0), qkv.size(1), heads, qkv.size(2) / 3 / heads};
  }
  static float scale_of(const attention_dims& d) { return static_cast<float>(1.0 / std::sqrt(static_cast<double>(d.head_dim))); }

  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& qkv, std::int64_t heads) {
    const at::Tensor x = qkv.contiguous();
    const attention_dims d = dims_of(x, heads);
    at::Tensor out = at::empty({d.batch, d.seq, d.heads * d.head_dim}, x.options());
    at::Tensor probs = at::empty({d.batch * d.heads, d.seq, attention_padded_seq(d.seq)}, x.options());
    const float* in = x.data_ptr<float>();
    float* o = out.data_ptr<float>();
    float* p = probs.data_ptr<float>();
    at::parallel_for(0, d.batch * d.heads, 1, [&](std::int64_t begin, std::int64_t end) {
      causal_attention_forward(in, o, p, d, scale_of(d), begin, end);
    });
    ctx->save_for_backward({x, probs});
    ctx->saved_data["heads"] = heads;
    return out;
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor& x = saved[0];
    const at::Tensor& probs = saved[1];
    const attention_dims d = dims_of(x, ctx->saved_data["heads"].toInt());
    const at::Tensor g = grads[0].contiguous();
    at::Tensor gx = at::empty(x.sizes(), x.options());
    const float* in = x.data_ptr<float>();
    const float* p = probs.data_ptr<float>();
    const float* go = g.data_ptr<float>();
    float* out = gx.data_ptr<float>();
    at::parallel_for(0, d.batch * d.heads, 1, [&](std::int64_t begin, std::int64_t end) {
      causal_attention_backward(in, p, go, out, d, scale_of(d), begin, end);
    });
    return {gx, at::Tensor()};
  }
};

}  // namespace

at::Tensor causal_attention(const at::Tensor& qkv, int heads) {
  const auto b = qkv.size(0);
  const auto s = qkv.size(1);
  const auto h = qkv.size(2) / 3;
  const auto d = h / heads;
  // actorpipe's own loops wherever they serve (float on a CPU with AVX-512 or AVX2 + FMA, head
  // size a multiple of 16): F + B of one block's attention (4 x 128 tokens, 4 heads of 64) 1.4
  // ms on AVX-512, against 3.9 ms for LibTorch 1.13's batched GEMMs (causal_attention_libtorch)
  // and ~3 ms for LibTorch 2's fused kernel; bench/own_loops measures it.
  if (qkv.scalar_type() == at::kFloat && qkv.device().is_cpu() &&
      causal_attention_kernel_serves({b, s, heads, d}))
    return causal_attention_function::apply(qkv, heads);
  return causal_attention_libtorch(qkv, heads);
}

at::Tensor causal_attention_libtorch(const at::Tensor& qkv, int heads) {
  const auto b = qkv.size(0);
  const auto s = qkv.size(1);
  const auto h = qkv.size(2) / 3;
  const auto d = h / heads;
#if TORCH_VERSION_MAJOR >= 2
  // LibTorch 2.x: the fused kernel (one pass, no [S, S] score tensor kept for backward); the
  // same scale 1/sqrt(d) and causal mask as below.
  auto parts = qkv.split(h, -1);
  // [B, S, H] -> [B, heads, S, d]
  auto per_head = [&](const at::Tensor& t) { return t.view({b, s, heads, d}).transpose(1, 2); };
  const at::Tensor out =
      at::scaled_dot_product_attention(per_head(parts[0]), per_head(parts[1]), per_head(parts[2]), {}, 0.0,
                                       /*is_causal=*/true);
  return out.transpose(1, 2).contiguous().view({b, s, h});
#else
  // LibTorch 1.x: one copy lays q, k and v out as [B * heads, S, d] blocks, and the scores'
  // batched GEMM takes the scale and the causal mask (-inf above the diagonal) itself
  // (baddbmm: mask + scale * q k^T), so there is no multiply and no masked_fill pass, forward or
  // backward.
  const auto qkv3 = qkv.view({b, s, 3, heads, d}).permute({2, 0, 3, 1, 4}).contiguous().view({3, b * heads, s, d}).unbind(0);
  const at::Tensor mask = at::full({s, s}, -std::numeric_limits<float>::infinity(), qkv.options()).triu(1);
  const double scale = 1.0 / std::sqrt(static_cast<double>(d));
  const at::Tensor att = at::baddbmm(mask, qkv3[0], qkv3[1].transpose(1, 2), 1.0, scale).softmax(-1);
  return at::bmm(att, qkv3[2]).view({b, heads, s, d}).transpose(1, 2).contiguous().view({b, s, h});
#endif
}

namespace {

// GELU (tanh approximation) on gelu_kernel's loops, split over LibTorch's intra-op threads.
struct gelu_tanh_function : public torch::autograd::Function<gelu_tanh_function> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x) {
    const at::Tensor xc = x.contiguous();
    at::Tensor y = at::empty(xc.sizes(), xc.options());
    const float* in = xc.data_ptr<float>();
    float* out = y.data_ptr<float>();
    at::parallel_for(0, xc.numel(), 1 << 15,
                     [&](std::int64_t begin, std::int64_t end) { gelu_tanh_forward(in + begin, out + begin, end - begin); });
    ctx->save_for_backward({xc});
    return y;
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const at::Tensor x = ctx->get_saved_variables()[0];
    const at::Tensor g = grads[0].contiguous();
    at::Tensor gx = at::empty(x.sizes(), x.options());
    const float* gy = g.data_ptr<float>();
    const float* in = x.data_ptr<float>();
    float* out = gx.data_ptr<float>();
    at::parallel_for(0, x.numel(), 1 << 15, [&](std::int64_t begin, std::int64_t end) {
      gelu_tanh_backward(gy + begin, in + begin, out + begin, end - begin);
    });
    return {gx};
  }
};

}  // namespace

at::Tensor gelu_tanh(const at::Tensor& x) {
  if (x.scalar_type() != at::kFloat || !x.device().is_cpu()) return at::gelu(x, "tanh");
  return gelu_tanh_function::apply(x);
}

gpt_embedding::gpt_embedding(const gpt_config& config)
    : config_(config),
      tok_(init_parameter(config, "tok_emb.weight", {config.vocab, config.hidden})),
      pos_(init_parameter(config, "pos_emb.weight", {config.seq_len, config.hidden})) {}

at::Tensor gpt_embedding::forward(const at::Tensor& ids) const {
  check_token_ids(config_, ids, "input");
  return at::embedding(tok_, ids) + pos_.slice(0, 0, ids.size(1));
}

void gpt_embedding::append_parameters(named_torch_tensors& out) const {
  out.emplace_back("tok_emb.weight", tok_);
  out.emplace_back("pos_emb.weight", pos_);
}

gpt_block::gpt_block(const gpt_config& config, int index)
    : index_(index),
      heads_(config.heads),
      ln1_(make_layer_norm(config, "blocks." + std::to_string(index) + ".ln1")),
      qkv_(make_linear(config, "blocks." + std::to_string(index) + ".attn.qkv", config.hidden, 3 * config.hidden)),
      attn_proj_(make_linear(config, "blocks." + std::to_string(index) + ".attn.proj", config.hidden, config.hidden)),
      ln2_(make_layer_norm(config, "blocks." + std::to_string(index) + ".ln2")),
      fc_(make_linear(config, "blocks." + std::to_string(index) + ".mlp.fc", config.hidden, 4 * config.hidden)),
      mlp_proj_(make_linear(config, "blocks." + std::to_string(index) + ".mlp.proj", 4 * config.hidden, config.hidden)) {}

at::Tensor gpt_block::forward(const at::Tensor& x) const {
  at::Tensor h = x + attn_proj_.forward(causal_attention(qkv_.forward(ln1_.forward(x)), heads_));
  return h + mlp_proj_.forward(gelu_tanh(fc_.forward(ln2_.forward(h))));
}

void gpt_block::append_parameters(named_torch_tensors& out) const {
  const std::string p = "blocks." + std::to_string(index_) + ".";
  out.emplace_back(p + "ln1.weight", ln1_.weight);
  out.emplace_back(p + "ln1.bias", ln1_.bias);
  out.emplace_back(p + "attn.qkv.weight", qkv_.weight);
  out.emplace_back(p + "attn.qkv.bias", qkv_.bias);
  out.emplace_back(p + "attn.proj.weight", attn_proj_.weight);
  out.emplace_back(p + "attn.proj.bias", attn_proj_.bias);
  out.emplace_back(p + "ln2.weight", ln2_.weight);
  out.emplace_back(p + "ln2.bias", ln2_.bias);
  out.emplace_back(p + "mlp.fc.weight", fc_.weight);
  out.emplace_back(p + "mlp.fc.bias", fc_.bias);
  out.emplace_back(p + "mlp.proj.weight", mlp_proj_.weight);
  out.emplace_back(p + "mlp.proj.bias", mlp_proj_.bias);
}

gpt_head::gpt_head(const gpt_config& config, at::Tensor tied_weight)
    : ln_f_(make_layer_norm(config, "ln_f")), tied_(std::move(tied_weight)) {
  if (!tied_.defined() || tied_.dim() != 2 || tied_.size(0) != config.vocab || tied_.size(1) != config.hidden) {
    throw std::invalid_argument("gpt_head: tied_weight must be [vocab=" + std::to_string(config.vocab) +
                                ", hidden=" + std::to_string(config.hidden) + "]");
  }
}

at::Tensor gpt_head::logits(const at::Tensor& h) const { return ln_f_.forward(h).matmul(tied_.t()); }

at::Tensor gpt_head::loss(const at::Tensor& h, const at::Tensor& targets) const {
  const at::Tensor l = logits(h);
  return torch::nn::functional::cross_entropy(l.reshape({-1, l.size(-1)}), targets.reshape({-1}));
}

void gpt_head::append_parameters(named_torch_tensors& out) const {
  out.emplace_back("ln_f.weight", ln_f_.weight);
  out.emplace_back("ln_f.bias", ln_f_.bias);
}

}  // namespace actorpipe
