// AdamW over one shard of named parameters, written out step by step (not torch::optim::AdamW)
// so the update is fixed by this file, whatever the LibTorch version.
#include "core/optim/optimizer.hpp"
#include "core/number_text.hpp"

#include <algorithm>
#include <cmath>
#include <sstream>
#include <stdexcept>
#include <unordered_map>

#include "core/model/tensor_box_torch.hpp"
#include "core/optim/adamw_kernel.hpp"
#include "core/optim/adamw_update.hpp"
#include "core/optim/moment_stitch.hpp"

namespace actorpipe {

namespace {

void require_beta(const char* name, double b) {
  if (!(b >= 0 && b < 1)) throw std::invalid_argument(std::string("adamw ") + name + "=" + number_text(b) + " must be in [0, 1)");
}
}  // namespace

void check_adamw_options(const adamw_options& options) {
  require_beta("beta1", options.beta1);
  require_beta("beta2", options.beta2);
  if (!(options.eps > 0) || !std::isfinite(options.eps))
    throw std::invalid_argument("adamw eps=" + number_text(options.eps) + " must be a finite number > 0");
  if (!(options.weight_decay >= 0) || !std::isfinite(options.weight_decay))
    throw std::invalid_argument("adamw weight_decay=" + number_text(options.weight_decay) + " must be a finite number >= 0");
}

struct shard_optimizer::impl {
  struct slot {
    std::string name;
    at::Tensor param;
    at::Tensor exp_avg;     // m
    at::Tensor exp_avg_sq;  // v
    long long steps = 0;    // updates this parameter has had (bias correction is per parameter)
    bool decay = false;     // dim >= 2: matrices and embeddings
  };
  adamw_options options;
  std::vector<slot> slots;
};

shard_optimizer::shard_optimizer(std::vector<std::pair<std::string, tensor_box>> params, const adamw_options& options)
    : impl_(std::make_unique<impl>()) {
  check_adamw_options(options);
  impl_->options = options;

  std::unordered_map<std::string, std::size_t> seen;
  impl_->slots.reserve(params.size());
  for (std::size_t i = 0; i < params.size(); ++i) {
    const std::string& name = params[i].first;
    auto [it, inserted] = seen.emplace(name, i);
    if (!inserted)
      throw std::invalid_argument("duplicate parameter name '" + name + "' (positions " + std::to_string(it->second) +
                                  " and " + std::to_string(i) + ")");
    const at::Tensor& p = unbox(params[i].second);
    if (!p.defined()) throw std::invalid_argument("parameter '" + name + "' is undefined");
    if (!p.is_floating_point())
      throw std::invalid_argument("parameter '" + name + "' has dtype " + std::string(c10::toString(p.scalar_type())) +
                                  ": AdamW needs a floating-point tensor");
    impl::slot s;
    s.name = name;
    s.param = p;  // shares storage: the update lands in the model's own tensor
    // Moments allocated up front, so the memory a shard needs is known at construction.
    s.exp_avg = torch::zeros_like(p, at::MemoryFormat::Contiguous);
    s.exp_avg_sq = torch::zeros_like(p, at::MemoryFormat::Contiguous);
    s.decay = p.dim() >= 2;
    impl_->slots.push_back(std::move(s));
  }
}

shard_optimizer::~shard_optimizer() = default;

std::vector<double> shard_optimizer::grad_sq_sums(const std::vector<std::string>& skip) const {
  torch::NoGradGuard no_grad;
  std::vector<double> out;
  for (const auto& s : impl_->slots) {
    if (std::find(skip.begin(), skip.end(), s.name) != skip.end()) continue;
    const at::Tensor& g = s.param.grad();
    if (!g.defined()) continue;  // no gradient counts as zero
    out.push_back(sq_sum(g));
  }
  return out;
}

double shard_optimizer::grad_sq_sum(const std::vector<std::string>& skip) const {
  double total = 0;
  for (double sq : grad_sq_sums(skip)) total += sq;
  return total;
}

void shard_optimizer::scale_grads(double factor) {
  if (!std::isfinite(factor)) throw std::invalid_argument("scale_grads: factor=" + number_text(factor) + " must be finite");
  torch::NoGradGuard no_grad;
  for (auto& s : impl_->slots) {
    const at::Tensor& g = s.param.grad();
    if (g.defined()) g.mul_(factor);
  }
}

void check_learning_rate(double lr) {
  if (!(lr >= 0) || !std::isfinite(lr)) throw std::invalid_argument("step: lr=" + number_text(lr) + " must be a finite number >= 0");
}

namespace {
bool float_run(const at::Tensor& t) { return t.scalar_type() == torch::kFloat && t.is_contiguous() && t.device().is_cpu(); }
}  // namespace

double sq_sum(const at::Tensor& g) {
  if (float_run(g)) return sum_of_squares(g.data_ptr<float>(), g.numel());
  return g.to(torch::kDouble).pow(2).sum().item<double>();
}

void adamw_update(at::Tensor& p, const at::Tensor& g, at::Tensor& m, at::Tensor& v, long long t, bool decay, double lr,
                  const adamw_options& o, double grad_scale) {
  const double bias1 = 1.0 - std::pow(o.beta1, static_cast<double>(t));
  const double bias2 = 1.0 - std::pow(o.beta2, static_cast<double>(t));
  const bool decays = decay && o.weight_decay != 0;
  if (float_run(p) && float_run(g) && float_run(m) && float_run(v) && g.numel() == p.numel() && m.numel() == p.numel() &&
      v.numel() == p.numel()) {
    const adamw_scalars s{decays ? static_cast<float>(1.0 - lr * o.weight_decay) : 1.0f,
                          static_cast<float>(o.beta1),
                          static_cast<float>(1.0 - o.beta1),
                          static_cast<float>(o.beta2),
                          static_cast<float>(1.0 - o.beta2),
                          static_cast<float>(bias2),
                          static_cast<float>(o.eps),
                          static_cast<float>(-lr / bias1),
                          static_cast<float>(grad_scale)};
    adamw_float(p.data_ptr<float>(), g.data_ptr<float>(), m.data_ptr<float>(), v.data_ptr<float>(), p.numel(), s);
    p.unsafeGetTensorImpl()->bump_version();  // as an in-place op would: autograd sees p changed
    return;
  }
  const at::Tensor gs = grad_scale == 1.0 ? g : g * grad_scale;
  if (decays) p.mul_(1.0 - lr * o.weight_decay);
  m.mul_(o.beta1).add_(gs, 1.0 - o.beta1);
  v.mul_(o.beta2).addcmul_(gs, gs, 1.0 - o.beta2);
  at::Tensor denom = (v / bias2).sqrt_().add_(o.eps);
  p.addcdiv_(m, denom, -lr / bias1);
}

// Per parameter with a defined gradient (adamw_update; t counts that parameter's updates).
// Parameters whose gradient is undefined are left alone: no decay, no moment update, t unchanged.
void shard_optimizer::step(double lr, double grad_scale) {
  check_learning_rate(lr);
  if (!std::isfinite(grad_scale)) throw std::invalid_argument("step: grad_scale=" + number_text(grad_scale) + " must be finite");
  torch::NoGradGuard no_grad;
  for (auto& s : impl_->slots) {
    const at::Tensor& g = s.param.grad();
    if (!g.defined()) continue;
    ++s.steps;
    adamw_update(s.param, g, s.exp_avg, s.exp_avg_sq, s.steps, s.decay, lr, impl_->options, grad_scale);
  }
}

// Zeroes gradients in place rather than dropping them: the buffers stay allocated, backward
// accumulates into the same memory every step, and tied-gradient sums and data-parallel
// reductions always find a tensor. A gradient that was never created stays undefined.
void shard_optimizer::zero_grad() {
  torch::NoGradGuard no_grad;
  for (auto& s : impl_->slots) {
    const at::Tensor& g = s.param.grad();
    if (g.defined()) g.zero_();
  }
}

std::string shard_optimizer::nonfinite_parameter() const {
  torch::NoGradGuard no_grad;
  for (const auto& s : impl_->slots)
    if (!s.param.isfinite().all().item<bool>()) return "'" + s.name + "'";
  return "";
}

int shard_optimizer::num_parameters() const { return static_cast<int>(impl_->slots.size()); }

long long shard_optimizer::num_elements() const {
  long long n = 0;
  for (const auto& s : impl_->slots) n += s.param.numel();
  return n;
}

std::vector<moment_segment> shard_optimizer::export_moments() const {
  torch::NoGradGuard no_grad;
  std::vector<moment_segment> out;
  for (const auto& s : impl_->slots)
    out.push_back({s.name, 0, box(s.exp_avg.reshape({-1}).clone()), box(s.exp_avg_sq.reshape({-1}).clone()), s.steps});
  return out;
}

void restore_gradient(at::Tensor& param) {
  if (!param.grad().defined()) param.mutable_grad() = at::zeros_like(param);
}

void shard_optimizer::import_moments(const std::vector<moment_segment>& runs) {
  for (auto& s : impl_->slots) {
    s.steps = stitch_moments(runs, s.name, 0, s.exp_avg.view({-1}), s.exp_avg_sq.view({-1}));
    if (s.steps > 0) restore_gradient(s.param);
  }
}

long long shard_optimizer::state_bytes() const {
  long long n = 0;
  for (const auto& s : impl_->slots) n += s.exp_avg.nbytes() + s.exp_avg_sq.nbytes();
  return n;
}

}  // namespace actorpipe
