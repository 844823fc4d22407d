// One AdamW update of a parameter (or a run of its elements) in place: the arithmetic that
// shard_optimizer and data_parallel_optimizer share, so both give the same bits.
#pragma once

#include <torch/torch.h>

#include "core/optim/optimizer.hpp"

namespace actorpipe {

// t: the update count, from 1. p, g, m, v of one shape; decay: decoupled weight decay applies;
// grad_scale: the gradient's clip coefficient, applied as g is read (g itself is left as it is).
//   g  = grad_scale * g
//   p -= lr * wd * p                        (decay only)
//   m  = b1 * m + (1 - b1) * g
//   v  = b2 * v + (1 - b2) * g * g
//   p -= lr * (m / (1 - b1^t)) / (sqrt(v / (1 - b2^t)) + eps)
// Float tensors, contiguous, run it as one loop (core/optim/adamw_kernel.hpp), others as
// tensor ops; for floats either way g * grad_scale rounds as g.mul_(grad_scale) would.
void adamw_update(at::Tensor& p, const at::Tensor& g, at::Tensor& m, at::Tensor& v, long long t, bool decay, double lr,
                  const adamw_options& o, double grad_scale = 1.0);

// Once a parameter has a gradient, zero_grad keeps it (zeroed), so AdamW goes on updating the
// parameter by its moments in steps no gradient reaches it, as PyTorch's
// zero_grad(set_to_none=False) does; never having had one, it stays still. A resumed run
// gives a parameter with updates behind it its zeroed gradient back (undefined, it stood
// still where the run it continues had moved it).
void restore_gradient(at::Tensor& param);

// The sum of g's squared entries, in double (float and contiguous: sum_of_squares' fixed order).
double sq_sum(const at::Tensor& g);

// Checks beta1, beta2 in [0, 1), eps > 0, weight_decay >= 0 (std::invalid_argument naming it).
void check_adamw_options(const adamw_options& options);

// Checks lr (finite, >= 0), as every step does.
void check_learning_rate(double lr);

}  // namespace actorpipe
