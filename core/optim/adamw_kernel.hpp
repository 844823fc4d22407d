// The optimizer's loops over contiguous float arrays, one pass each: AdamW's update of a run of
// elements (the gradient's clip scale folded in) and a gradient's sum of squares. LibTorch's
// tensor ops make nine passes over memory for the update and materialise a double copy for the
// norm; on a 3.2M-parameter stage these are ~3x faster each, and the step's tail (norm, then
// update) is on the pipeline's critical path between two steps. No torch here:
// core/optim/optimizer.cpp calls these for float tensors and keeps tensor ops for the others.
//
// Every CPU runs the same operations in the same order (no fused multiply-add, no
// reassociation: the sum keeps 16 running lanes, added up in one fixed order), so the
// AVX-512, AVX2 and plain builds of the loops give the same bits.
#pragma once

#include <cstdint>

namespace actorpipe {

// The scalars of one update, as floats (what the loop multiplies by), from the doubles of
// adamw_update: decay = 1 - lr * weight_decay (1 without decay), bias2 = 1 - beta2^t,
// step = -lr / (1 - beta1^t), grad_scale = the clip coefficient (1: none).
struct adamw_scalars {
  float decay, beta1, one_minus_beta1, beta2, one_minus_beta2, bias2, eps, step, grad_scale;
};

// For i < n, in float, each line rounded before the next:
//   g = grad[i] * grad_scale
//   m = m[i] * beta1 + g * (1 - beta1)
//   v = v[i] * beta2 + (g * g) * (1 - beta2)
//   p[i] = p[i] * decay + step * (m / (sqrt(v / bias2) + eps))
void adamw_float(float* p, const float* grad, float* m, float* v, std::int64_t n, const adamw_scalars& s);

// sum of x[i]^2 for i < n, in double (each square exact): element i goes to lane i % 16 of the
// 16-element blocks, the tail to a lane of its own, the lanes added pairwise in a fixed order.
double sum_of_squares(const float* x, std::int64_t n);

}  // namespace actorpipe
