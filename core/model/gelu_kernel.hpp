// GELU with the tanh approximation (GPT-2's), forward and backward over contiguous float arrays.
// LibTorch's own kernel spends most of its time in a high-precision vector tanh (~1 ms per
// 512 x 1024 floats on one core, in 1.13 and 2.x alike); this one computes the same function as
// x * sigmoid(2u), u = sqrt(2/pi) (x + 0.044715 x^3), with its own exp, ~2.5x faster, within a
// few float ulps of the exact value. No torch here: the model wraps it in an autograd Function.
//
// Every CPU runs the same operations in the same order (no fused multiply-add, no reassociation),
// so the AVX-512, AVX2 and plain builds of the loops give the same bits.
#pragma once

#include <cstdint>

namespace actorpipe {

// y[i] = gelu_tanh(x[i]) for i < n.
void gelu_tanh_forward(const float* x, float* y, std::int64_t n);

// grad_x[i] = grad_y[i] * gelu_tanh'(x[i]) for i < n.
void gelu_tanh_backward(const float* grad_y, const float* x, float* grad_x, std::int64_t n);

// One element of each, as the loops compute it (for tests: the loops' vector code must agree).
float gelu_tanh_value(float x);
float gelu_tanh_derivative(float x);

}  // namespace actorpipe
