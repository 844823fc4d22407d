// Tests for core/model/split_linear: gradients against LibTorch's own linear and finite
// differences, and the I/W split through weight_grad_store (deferred, then bit-identical).
#include "core/model/split_linear.hpp"

#include <cmath>
#include <stdexcept>
#include <thread>

#include <catch2/catch.hpp>

namespace {

using actorpipe::split_linear;
using actorpipe::weight_grad_deferral;
using actorpipe::weight_grad_store;

at::Generator gen(std::uint64_t seed) { return at::detail::createCPUGenerator(seed); }

at::Tensor randn(at::IntArrayRef shape, std::uint64_t seed, at::ScalarType type = at::kFloat) {
  return at::normal(0.0, 1.0, shape, gen(seed), at::TensorOptions().dtype(type));
}

double max_abs_diff(const at::Tensor& a, const at::Tensor& b) { return (a - b).abs().max().item<double>(); }

}  // namespace

CATCH_TEST_CASE("split_linear matches torch's linear: output and every gradient", "[model][split_linear]") {
  const at::Tensor x0 = randn({2, 3, 4}, 1);
  const at::Tensor w0 = randn({5, 4}, 2);
  const at::Tensor b0 = randn({5}, 3);
  const at::Tensor r = randn({2, 3, 5}, 4);  // d loss / d y

  auto x = x0.clone().requires_grad_(true), w = w0.clone().requires_grad_(true), b = b0.clone().requires_grad_(true);
  at::Tensor y = split_linear(x, w, b);
  (y * r).sum().backward();

  auto xr = x0.clone().requires_grad_(true), wr = w0.clone().requires_grad_(true), br = b0.clone().requires_grad_(true);
  at::Tensor yr = torch::nn::functional::linear(xr, wr, br);
  (yr * r).sum().backward();

  CATCH_CHECK(max_abs_diff(y, yr) < 1e-6);
  CATCH_CHECK(max_abs_diff(x.grad(), xr.grad()) < 1e-5);
  CATCH_CHECK(max_abs_diff(w.grad(), wr.grad()) < 1e-5);
  CATCH_CHECK(max_abs_diff(b.grad(), br.grad()) < 1e-5);
  // And the bias-free form.
  auto w2 = w0.clone().requires_grad_(true);
  (split_linear(x0, w2, at::Tensor()) * r).sum().backward();
  CATCH_CHECK(max_abs_diff(w2.grad(), wr.grad()) < 1e-5);
}

CATCH_TEST_CASE("split_linear gradients agree with central finite differences (float64)", "[model][split_linear]") {
  const at::Tensor r = randn({3, 2}, 10, at::kDouble);
  auto x = randn({3, 4}, 11, at::kDouble).requires_grad_(true);
  auto w = randn({2, 4}, 12, at::kDouble).requires_grad_(true);
  auto b = randn({2}, 13, at::kDouble).requires_grad_(true);
  (split_linear(x, w, b) * r).sum().backward();

  auto loss_at = [&] {
    torch::NoGradGuard no_grad;
    return (split_linear(x, w, b) * r).sum().item<double>();
  };
  const double h = 1e-6;
  for (at::Tensor* p : {&x, &w, &b}) {
    at::Tensor flat = p->detach().view({-1});  // shares storage: perturbs the parameter in place
    at::Tensor grad = p->grad().reshape({-1});
    for (int64_t i = 0; i < flat.numel(); ++i) {
      const double v = flat[i].item<double>();
      flat[i] = v + h;
      const double up = loss_at();
      flat[i] = v - h;
      const double down = loss_at();
      flat[i] = v;
      CATCH_CHECK(grad[i].item<double>() == Approx((up - down) / (2 * h)).margin(1e-7));
    }
  }
}

CATCH_TEST_CASE("split backward defers weight and bias products until the store runs", "[model][split_linear]") {
  const at::Tensor x0 = randn({2, 3, 4}, 21);
  const at::Tensor r1 = randn({2, 3, 5}, 22);
  const at::Tensor r2 = randn({2, 3, 5}, 23);
  const at::Tensor w0 = randn({5, 4}, 24);
  const at::Tensor b0 = randn({5}, 25);

  // Reference: two full backwards accumulate into .grad.
  auto wf = w0.clone().requires_grad_(true), bf = b0.clone().requires_grad_(true);
  auto xf = x0.clone().requires_grad_(true);
  (split_linear(xf, wf, bf) * r1).sum().backward();
  (split_linear(xf, wf, bf) * r2).sum().backward();

  auto ws = w0.clone().requires_grad_(true), bs = b0.clone().requires_grad_(true);
  auto xs = x0.clone().requires_grad_(true);
  weight_grad_store store;
  {
    weight_grad_deferral scope(store);
    CATCH_CHECK(weight_grad_deferral::active() == &store);
    (split_linear(xs, ws, bs) * r1).sum().backward();
    (split_linear(xs, ws, bs) * r2).sum().backward();
  }
  CATCH_CHECK(weight_grad_deferral::active() == nullptr);
  // I is done: the input gradient is there, the parameter gradients are not.
  CATCH_CHECK(torch::equal(xs.grad(), xf.grad()));
  CATCH_CHECK_FALSE(ws.grad().defined());
  CATCH_CHECK_FALSE(bs.grad().defined());
  CATCH_CHECK(store.size() == 2);

  store.run();  // W
  CATCH_CHECK(store.empty());
  CATCH_REQUIRE(ws.grad().defined());
  CATCH_CHECK(torch::equal(ws.grad(), wf.grad()));
  CATCH_CHECK(torch::equal(bs.grad(), bf.grad()));
}

CATCH_TEST_CASE("weight_grad_deferral is per thread and nests", "[model][split_linear]") {
  weight_grad_store outer, inner;
  CATCH_CHECK(weight_grad_deferral::active() == nullptr);
  {
    weight_grad_deferral a(outer);
    weight_grad_store* seen_elsewhere = &outer;
    std::thread([&] { seen_elsewhere = weight_grad_deferral::active(); }).join();
    CATCH_CHECK(seen_elsewhere == nullptr);
    {
      weight_grad_deferral b(inner);
      CATCH_CHECK(weight_grad_deferral::active() == &inner);
    }
    CATCH_CHECK(weight_grad_deferral::active() == &outer);
  }
  CATCH_CHECK(weight_grad_deferral::active() == nullptr);
}

CATCH_TEST_CASE("split_linear rejects mismatched shapes", "[model][split_linear]") {
  const at::Tensor x = randn({2, 4}, 31);
  CATCH_CHECK_THROWS_WITH(split_linear(x, randn({5, 3}, 32), at::Tensor()), Catch::Contains("in=3"));
  CATCH_CHECK_THROWS_WITH(split_linear(x, randn({4}, 33), at::Tensor()), Catch::Contains("2-D"));
  CATCH_CHECK_THROWS_WITH(split_linear(x, randn({5, 4}, 34), randn({4}, 35)), Catch::Contains("out=5"));
}
