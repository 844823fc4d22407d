// A linear layer whose backward can split in two (Zero-Bubble's I and W): the input gradient
// now, the weight/bias gradient products later from a per-microbatch weight_grad_store.
#pragma once

#include <cstddef>
#include <functional>
#include <vector>

#include <torch/torch.h>

namespace actorpipe {

// The deferred weight-gradient products of one (chunk, microbatch), in the order autograd
// produced them. Running them in that order keeps the accumulation bit-for-bit repeatable.
class weight_grad_store {
 public:
  void push(std::function<void()> product);
  // Runs every deferred product in push order, then empties the store.
  void run();
  // Runs the products in push order, asking `pause` before each one after the first: when it
  // says true, stops there and keeps the rest for the next call. True once the store is empty.
  // Every call runs at least one product (if any are left), so repeated calls finish.
  bool run_until(const std::function<bool()>& pause);
  std::size_t size() const { return products_.size() - next_; }
  bool empty() const { return size() == 0; }

 private:
  std::vector<std::function<void()>> products_;
  std::size_t next_ = 0;  // products_[0, next_) have run
};

// Called after each weight or bias product a deferring split_linear accumulates into a
// parameter's .grad (W), with that parameter: autograd's own accumulations have hooks, these
// do not. One listener per parameter (by its TensorImpl), any thread; empty removes it.
void set_accumulate_listener(const at::Tensor& param, std::function<void()> listener);

// While alive, split_linear backward on THIS thread defers its weight/bias products into
// `store` instead of computing them. Thread-local because CPU autograd runs backward on the
// thread that called torch::autograd::backward, and two ranks' compute threads may be in
// backward at once. Scopes nest (the innermost wins) and restore the outer one on exit.
class weight_grad_deferral {
 public:
  explicit weight_grad_deferral(weight_grad_store& store);
  ~weight_grad_deferral();
  weight_grad_deferral(const weight_grad_deferral&) = delete;
  weight_grad_deferral& operator=(const weight_grad_deferral&) = delete;

  // The store of the innermost active scope on this thread, or nullptr.
  static weight_grad_store* active();

 private:
  weight_grad_store* previous_;
};

// While alive, split_linear backward on THIS thread (not deferring) puts its weight/bias
// products straight into the leaf parameters' .grad (added inside the GEMM by addmm_ where
// there is one already: one pass instead of a product then an add) and hands autograd an
// undefined gradient for them, whose AccumulateGrad then adds nothing but still runs its
// hooks. Only for a backward that accumulates into .grad (torch::autograd::backward), never
// around torch::autograd::grad. The deferred W always accumulates this way, in the same
// order, so B whole inside this scope and I then W give the same bits. Scopes nest.
class weight_grad_accumulation {
 public:
  weight_grad_accumulation();
  ~weight_grad_accumulation();
  weight_grad_accumulation(const weight_grad_accumulation&) = delete;
  weight_grad_accumulation& operator=(const weight_grad_accumulation&) = delete;
  static bool active();
};

// y = x @ weight^T + bias over the last dimension of x (bias may be undefined). Backward
// always returns d/dx = grad_y @ weight; d/dweight = grad_y^T x and d/dbias = sum(grad_y) are
// returned to autograd too (put into .grad directly inside a weight_grad_accumulation scope),
// unless a weight_grad_deferral is active, in which case a closure holding x and grad_y is
// pushed to its store and, when the store runs, puts them into weight.grad() / bias.grad()
// as that scope would.
at::Tensor split_linear(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias);

// Parameters of one split linear layer: weight [out, in], bias [out] (or undefined).
struct split_linear_layer {
  at::Tensor weight;
  at::Tensor bias;
  at::Tensor forward(const at::Tensor& x) const { return split_linear(x, weight, bias); }
};

}  // namespace actorpipe
