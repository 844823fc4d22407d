// split_linear: a custom autograd Function whose weight-gradient half can wait in a
// weight_grad_store until the schedule's W action (no second autograd pass needed).
#include "core/model/split_linear.hpp"

#include <mutex>
#include <stdexcept>
#include <unordered_map>
#include <string>
#include <utility>

namespace actorpipe {
namespace {

thread_local weight_grad_store* active_store = nullptr;
thread_local int in_place_scopes = 0;

// d/dweight = grad_y^T x and d/dbias = sum(grad_y), flattening the leading dimensions. With
// `in_place`, a leaf parameter's product goes straight into its .grad: added where there is a
// gradient already (the weight's by addmm_: the GEMM adds into .grad as it writes, with no
// temporary and no second pass over it), else the product becomes it; the returned tensor is
// then undefined. Otherwise the product is returned, for autograd (or the caller) to add. The
// deferred W and, inside a weight_grad_accumulation scope, B whole both go in place, in the
// order autograd reaches the products, so the accumulation's bits do not depend on the
// schedule, not even for a weight used twice in one chunk.
std::pair<at::Tensor, at::Tensor> weight_bias_grads(const at::Tensor& x, const at::Tensor& grad_y, const at::Tensor& weight,
                                                    const at::Tensor& bias, bool need_weight, bool need_bias,
                                                    bool in_place) {
  torch::NoGradGuard no_grad;
  const auto out = grad_y.size(-1);
  const auto in = x.size(-1);
  const at::Tensor g2 = grad_y.reshape({-1, out});
  at::Tensor grad_weight, grad_bias;
  if (need_weight) {
    const at::Tensor x2 = x.reshape({-1, in});
    if (in_place && weight.is_leaf() && weight.grad().defined())
      weight.mutable_grad().addmm_(g2.t(), x2);
    else if (in_place && weight.is_leaf())
      weight.mutable_grad() = g2.t().mm(x2);
    else
      grad_weight = g2.t().mm(x2);
  }
  if (need_bias) {
    if (in_place && bias.is_leaf() && bias.grad().defined())
      bias.mutable_grad().add_(g2.sum(0));
    else if (in_place && bias.is_leaf())
      bias.mutable_grad() = g2.sum(0);
    else
      grad_bias = g2.sum(0);
  }
  return {grad_weight, grad_bias};
}

std::mutex listeners_mutex;
std::unordered_map<const c10::TensorImpl*, std::function<void()>> accumulate_listeners;

// After weight_bias_grads outside autograd (W): a product it returned (a non-leaf weight's)
// becomes or adds to .grad, then the parameter's listener hears of it.
void accumulate_grad(const at::Tensor& param, const at::Tensor& product) {
  if (product.defined()) {
    if (param.grad().defined())
      param.mutable_grad().add_(product);
    else
      param.mutable_grad() = product;
  }
  std::function<void()> listener;
  {
    std::lock_guard<std::mutex> lock(listeners_mutex);
    auto it = accumulate_listeners.find(param.unsafeGetTensorImpl());
    if (it == accumulate_listeners.end()) return;
    listener = it->second;
  }
  listener();
}

// Backward shared by the with-bias and bias-free Functions (LibTorch 1.13 rejects undefined
// tensors as custom Function inputs, so "no bias" is a Function of its own).
torch::autograd::variable_list split_backward(torch::autograd::AutogradContext* ctx,
                                              const torch::autograd::variable_list& grads, bool has_bias) {
  const auto saved = ctx->get_saved_variables();
  const at::Tensor& x = saved[0];
  const at::Tensor& weight = saved[1];  // a leaf: unpacks to the parameter itself
  const at::Tensor bias = has_bias ? saved[2] : at::Tensor();
  const at::Tensor grad_y = grads[0];

  torch::autograd::variable_list out(has_bias ? 3 : 2);
  if (ctx->needs_input_grad(0)) out[0] = grad_y.matmul(weight);
  const bool need_weight = ctx->needs_input_grad(1);
  const bool need_bias = has_bias && ctx->needs_input_grad(2);
  if (!need_weight && !need_bias) return out;

  if (weight_grad_store* store = weight_grad_deferral::active()) {
    // Keep x and grad_y alive until W; the parameters get the products directly, so autograd
    // sees no gradient for them now.
    store->push([x, grad_y, weight, bias, need_weight, need_bias] {
      auto grads_wb = weight_bias_grads(x, grad_y, weight, bias, need_weight, need_bias, true);
      if (need_weight) accumulate_grad(weight, grads_wb.first);
      if (need_bias) accumulate_grad(bias, grads_wb.second);
    });
    return out;
  }
  // An undefined gradient here (in .grad already) leaves autograd's AccumulateGrad nothing to
  // add; its hooks still run, so gradient listeners hear of every product.
  auto grads_wb = weight_bias_grads(x, grad_y, weight, bias, need_weight, need_bias, in_place_scopes > 0);
  out[1] = grads_wb.first;
  if (has_bias) out[2] = grads_wb.second;
  return out;
}

struct split_linear_function : public torch::autograd::Function<split_linear_function> {
  static torch::autograd::variable_list forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x,
                                                const at::Tensor& weight, const at::Tensor& bias) {
    ctx->save_for_backward({x, weight, bias});
    return {at::linear(x, weight, bias)};
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    return split_backward(ctx, grads, true);
  }
};

struct split_linear_no_bias_function : public torch::autograd::Function<split_linear_no_bias_function> {
  static torch::autograd::variable_list forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x,
                                                const at::Tensor& weight) {
    ctx->save_for_backward({x, weight});
    return {at::linear(x, weight)};
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    return split_backward(ctx, grads, false);
  }
};

}  // namespace

void set_accumulate_listener(const at::Tensor& param, std::function<void()> listener) {
  std::lock_guard<std::mutex> lock(listeners_mutex);
  if (listener)
    accumulate_listeners[param.unsafeGetTensorImpl()] = std::move(listener);
  else
    accumulate_listeners.erase(param.unsafeGetTensorImpl());
}

void weight_grad_store::push(std::function<void()> product) { products_.push_back(std::move(product)); }

void weight_grad_store::run() { run_until({}); }

bool weight_grad_store::run_until(const std::function<bool()>& pause) {
  const std::size_t first = next_;
  while (next_ < products_.size()) {
    if (next_ > first && pause && pause()) return false;
    auto product = std::move(products_[next_++]);
    try {
      product();
    } catch (...) {
      // Nothing half-run is left to run twice: the store is spent.
      products_.clear();
      next_ = 0;
      throw;
    }
  }
  products_.clear();
  next_ = 0;
  return true;
}

weight_grad_deferral::weight_grad_deferral(weight_grad_store& store) : previous_(active_store) {
  active_store = &store;
}

weight_grad_deferral::~weight_grad_deferral() { active_store = previous_; }

weight_grad_store* weight_grad_deferral::active() { return active_store; }

weight_grad_accumulation::weight_grad_accumulation() { ++in_place_scopes; }

weight_grad_accumulation::~weight_grad_accumulation() { --in_place_scopes; }

bool weight_grad_accumulation::active() { return in_place_scopes > 0; }

at::Tensor split_linear(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias) {
  if (!x.defined() || !weight.defined()) throw std::invalid_argument("split_linear: x and weight must be defined");
  if (weight.dim() != 2) {
    throw std::invalid_argument("split_linear: weight must be 2-D [out, in], got " + std::to_string(weight.dim()) +
                                "-D");
  }
  if (x.dim() < 1 || x.size(-1) != weight.size(1)) {
    throw std::invalid_argument("split_linear: x's last dimension must equal weight's in=" +
                                std::to_string(weight.size(1)) + ", got x of " + std::to_string(x.dim()) +
                                "-D with last dimension " + (x.dim() ? std::to_string(x.size(-1)) : std::string("none")));
  }
  if (bias.defined() && (bias.dim() != 1 || bias.size(0) != weight.size(0))) {
    throw std::invalid_argument("split_linear: bias must be [out=" + std::to_string(weight.size(0)) + "]");
  }
  if (!bias.defined()) return split_linear_no_bias_function::apply(x, weight)[0];
  return split_linear_function::apply(x, weight, bias)[0];
}

}  // namespace actorpipe
