// Zero-bubble's split backward for any autograd graph: I computes the gradient of a chunk's
// input only, keeping the graph; W later runs every weight branch from the gradient I saw
// arrive at its top, so nothing is computed twice and no weight product runs in I.
#pragma once

#include <vector>

#include <torch/torch.h>
#include <torch/csrc/autograd/edge.h>

namespace actorpipe {

// What W needs of one microbatch: per weight branch, the gradients captured at its top and
// the leaves it accumulates into. Holds the graph alive until it runs or is dropped.
class deferred_weight_pass {
 public:
  // Accumulates every weight branch into its leaves' .grad, in the order I found them; then
  // empties itself (running twice is a no-op).
  void run();
  bool empty() const { return calls_.empty(); }

 private:
  friend at::Tensor input_grad_pass(const at::Tensor&, const at::Tensor&, const at::Tensor&, deferred_weight_pass&);
  struct call {
    torch::autograd::edge_list roots;
    std::vector<at::Tensor> grads;
    torch::autograd::edge_list leaves;  // empty: everything below the roots (no input path)
  };
  std::vector<call> calls_;
};

// I: d output / d input (times grad_output; a scalar output with grad_output undefined starts
// from 1) through the input path of the graph only. Returns the input's gradient (undefined
// when `input` is undefined or needs no gradient, or when the output does not depend on it,
// as autograd leaves such a gradient) and fills `weights` with the W half. Where two weight branches share a node (one
// parameter used at two places of the chunk), the split cannot keep them apart: it then runs
// the full backward now and leaves `weights` empty, which gives the same gradients.
at::Tensor input_grad_pass(const at::Tensor& output, const at::Tensor& grad_output, const at::Tensor& input,
                           deferred_weight_pass& weights);

}  // namespace actorpipe
