// Tests for the GELU (tanh approximation) kernel and its autograd wrapper: values against the
// exact function computed in double, derivatives against LibTorch's GELU backward in double, the
// vector loops against the per-element function bit for bit, the edge values, and gradients
// through autograd.
#include "core/model/gelu_kernel.hpp"
#include "core/model/gpt_modules.hpp"

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include <catch2/catch.hpp>

namespace {

using actorpipe::gelu_tanh;

at::Tensor randn(at::IntArrayRef shape, std::uint64_t seed) {
  return at::normal(0.0, 1.0, shape, at::detail::createCPUGenerator(seed));
}

std::uint32_t bits_of(float f) {
  std::uint32_t b;
  std::memcpy(&b, &f, sizeof b);
  return b;
}

// Values across GELU's whole shape: the flat negative tail, the dip near -0.75, zero, the
// near-linear positive side; odd length, so the loops' vector part and remainder both run.
at::Tensor spread_values() { return at::cat({at::linspace(-30.0, 30.0, 4001), randn({2999}, 7) * 3.0}); }

}  // namespace

CATCH_TEST_CASE("gelu_tanh values are within a few float ulps of GELU computed in double", "[model][gelu]") {
  const at::Tensor x = spread_values();
  // x (1 + tanh u) / 2 written as x sigmoid(2u): in double, 1 + tanh u itself loses every digit
  // once tanh u rounds to -1 (x below about -4), sigmoid(2u) does not.
  const at::Tensor xd = x.to(at::kDouble);
  const at::Tensor two_u = 2.0 * 0.7978845608028654 * (xd + 0.044715 * xd * xd * xd);
  const at::Tensor exact = xd * at::sigmoid(two_u);
  const double eps = std::numeric_limits<float>::epsilon();
  // Error in units of |value| eps, allowing for the conditioning of the negative tail: there
  // GELU ~ x e^{2u}, and float's rounding of u alone (any float code's) moves e^{2u} by |2u|
  // times as much. Down to where the value leaves float's normal range (the kernel flushes e^-87
  // and below to 0: values under 1e-36 in magnitude).
  auto error = [&](const at::Tensor& y) {
    const at::Tensor scale = exact.abs() * eps * (1.0 + two_u.clamp_max(0.0).abs()) + 1e-36;
    return ((y.to(at::kDouble) - exact).abs() / scale).max().item<double>();
  };
  const double err = error(gelu_tanh(x));
  CATCH_INFO("ours " << err << ", at::gelu " << error(at::gelu(x, "tanh")) << " (eps x (1 + |2u| where u < 0))");
  CATCH_CHECK(err < 4);
  CATCH_CHECK(gelu_tanh(x).index({x < -12.0}).abs().max().item<double>() < 1e-36);
}

CATCH_TEST_CASE("gelu_tanh derivative matches GELU's computed in double", "[model][gelu]") {
  const at::Tensor x = spread_values();
  const at::Tensor g = randn({x.size(0)}, 11);
  const at::Tensor exact = at::gelu_backward(g.to(at::kDouble), x.to(at::kDouble), "tanh");
  at::Tensor ours = at::empty_like(x);
  actorpipe::gelu_tanh_backward(g.data_ptr<float>(), x.data_ptr<float>(), ours.data_ptr<float>(), x.numel());
  // The derivative lies in about [-0.17, 1.13]: errors relative to |g| (the scale of the result).
  const double eps = std::numeric_limits<float>::epsilon();
  const double err = ((ours.to(at::kDouble) - exact).abs() / (g.to(at::kDouble).abs() + 1e-30)).max().item<double>();
  const double torch_err =
      ((at::gelu_backward(g, x, "tanh").to(at::kDouble) - exact).abs() / (g.to(at::kDouble).abs() + 1e-30)).max().item<double>();
  CATCH_INFO("ours " << err / eps << " eps, at::gelu_backward " << torch_err / eps << " eps");
  CATCH_CHECK(err < 8 * eps);
}

CATCH_TEST_CASE("gelu_tanh loops give the per-element function's bits", "[model][gelu]") {
  // This CPU's clone of the loops (AVX-512, AVX2 or plain) against the scalar code: no fused
  // multiply-add and no reordering, so every CPU computes the same bits.
  const at::Tensor x = spread_values();
  const at::Tensor g = randn({x.size(0)}, 3);
  std::vector<float> y(x.numel()), gx(x.numel());
  actorpipe::gelu_tanh_forward(x.data_ptr<float>(), y.data(), x.numel());
  actorpipe::gelu_tanh_backward(g.data_ptr<float>(), x.data_ptr<float>(), gx.data(), x.numel());
  int value_mismatches = 0, derivative_mismatches = 0;
  for (std::int64_t i = 0; i < x.numel(); ++i) {
    const float xi = x.data_ptr<float>()[i];
    if (bits_of(y[i]) != bits_of(actorpipe::gelu_tanh_value(xi))) ++value_mismatches;
    if (bits_of(gx[i]) != bits_of(g.data_ptr<float>()[i] * actorpipe::gelu_tanh_derivative(xi))) ++derivative_mismatches;
  }
  CATCH_CHECK(value_mismatches == 0);
  CATCH_CHECK(derivative_mismatches == 0);
}

CATCH_TEST_CASE("gelu_tanh edge values: zero, infinities, NaN", "[model][gelu]") {
  const float inf = std::numeric_limits<float>::infinity();
  CATCH_CHECK(actorpipe::gelu_tanh_value(0.0f) == 0.0f);
  CATCH_CHECK(actorpipe::gelu_tanh_value(inf) == inf);
  CATCH_CHECK(actorpipe::gelu_tanh_value(-100.0f) == 0.0f);
  CATCH_CHECK(actorpipe::gelu_tanh_value(100.0f) == 100.0f);
  CATCH_CHECK(std::isnan(actorpipe::gelu_tanh_value(std::numeric_limits<float>::quiet_NaN())));
  // As LibTorch's: -inf * (1 + tanh(-inf)) is NaN.
  CATCH_CHECK(std::isnan(actorpipe::gelu_tanh_value(-inf)));
  CATCH_CHECK(std::isnan(at::gelu(at::full({1}, -inf), "tanh").item<float>()));
  CATCH_CHECK(actorpipe::gelu_tanh_derivative(0.0f) == 0.5f);
  CATCH_CHECK(actorpipe::gelu_tanh_derivative(100.0f) == 1.0f);
  CATCH_CHECK(actorpipe::gelu_tanh_derivative(-100.0f) == 0.0f);
}

CATCH_TEST_CASE("gelu_tanh through autograd: the kernel's gradient, non-contiguous input, other dtypes", "[model][gelu]") {
  const at::Tensor x0 = randn({4, 6, 10}, 5) * 2.0;
  const at::Tensor g = randn({4, 6, 10}, 6);
  at::Tensor x = x0.clone().requires_grad_();
  const at::Tensor y = gelu_tanh(x);
  y.backward(g);
  at::Tensor expected_grad = at::empty_like(x0);
  actorpipe::gelu_tanh_backward(g.data_ptr<float>(), x0.data_ptr<float>(), expected_grad.data_ptr<float>(), x0.numel());
  CATCH_CHECK(x.grad().equal(expected_grad));
  // Against LibTorch's GELU: the same function.
  at::Tensor xt = x0.clone().requires_grad_();
  at::gelu(xt, "tanh").backward(g);
  CATCH_CHECK(at::allclose(y, at::gelu(x0, "tanh"), 1e-6, 1e-7));
  CATCH_CHECK(at::allclose(x.grad(), xt.grad(), 1e-5, 1e-6));

  // A transposed view: the same values and gradients as the contiguous copy, laid out as the view.
  at::Tensor base = x0.clone().requires_grad_();
  const at::Tensor view = base.transpose(0, 2);
  const at::Tensor yv = gelu_tanh(view);
  CATCH_CHECK(yv.sizes() == view.sizes());
  CATCH_CHECK(yv.equal(y.detach().transpose(0, 2)));
  yv.backward(g.transpose(0, 2));
  CATCH_CHECK(base.grad().equal(expected_grad));

  // Double goes through LibTorch's GELU, bit for bit.
  const at::Tensor xd = x0.to(at::kDouble);
  CATCH_CHECK(gelu_tanh(xd).equal(at::gelu(xd, "tanh")));
  // No grad mode: the same values, nothing recorded.
  at::NoGradGuard no_grad;
  const at::Tensor yn = gelu_tanh(x);
  CATCH_CHECK_FALSE(yn.requires_grad());
  CATCH_CHECK(yn.equal(y.detach()));
}
