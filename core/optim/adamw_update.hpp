// One AdamW update of a parameter (or a run of its elements) in place: the arithmetic that
// shard_optimizer and data_parallel_optimizer share, so both give the same bits.
#pragma once

#include <torch/torch.h>

#include "core/optim/optimizer.hpp"

namespace actorpipe {

// t: the update count, from 1. p, g, m, v of one shape; decay: decoupled weight decay applies.
//   p -= lr * wd * p                        (decay only)
//   m  = b1 * m + (1 - b1) * g
//   v  = b2 * v + (1 - b2) * g * g
//   p -= lr * (m / (1 - b1^t)) / (sqrt(v / (1 - b2^t)) + eps)
void adamw_update(at::Tensor& p, const at::Tensor& g, at::Tensor& m, at::Tensor& v, long long t, bool decay, double lr,
                  const adamw_options& o);

// Checks beta1, beta2 in [0, 1), eps > 0, weight_decay >= 0 (std::invalid_argument naming it).
void check_adamw_options(const adamw_options& options);

// Checks lr (finite, >= 0), as every step does.
void check_learning_rate(double lr);

}  // namespace actorpipe
