// Tests for core/model/split_linear: gradients against LibTorch's own linear and finite
// differences, and the I/W split through weight_grad_store (deferred, then bit-identical).
#include "core/model/split_linear.hpp"

#include <cmath>
#include <memory>
#include <stdexcept>
#include <thread>
#include <vector>

#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/variable.h>

#include <catch2/catch.hpp>

namespace {

using actorpipe::split_linear;
using actorpipe::weight_grad_accumulation;
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

  // Reference: two full backwards accumulate into .grad (as a chunk's B whole does, in place).
  auto wf = w0.clone().requires_grad_(true), bf = b0.clone().requires_grad_(true);
  auto xf = x0.clone().requires_grad_(true);
  {
    weight_grad_accumulation in_place;
    (split_linear(xf, wf, bf) * r1).sum().backward();
    (split_linear(xf, wf, bf) * r2).sum().backward();
  }

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

// A W run out of turn pauses between products for an F or I (actors/chunk_actor); the rest
// runs on the next call, in push order, and a throwing product leaves nothing to run twice.
CATCH_TEST_CASE("weight_grad_store::run_until pauses between products and resumes in order", "[model][split_linear]") {
  std::vector<int> ran;
  weight_grad_store store;
  for (int i = 0; i < 4; ++i) store.push([&ran, i] { ran.push_back(i); });
  int asked = 0;
  const auto always = [&asked] { return ++asked > 0; };
  CATCH_CHECK_FALSE(store.run_until(always));  // one product per call, even when asked to pause at once
  CATCH_CHECK(ran == std::vector<int>{0});
  CATCH_CHECK(asked == 1);
  CATCH_CHECK(store.size() == 3);
  CATCH_CHECK_FALSE(store.run_until(always));
  CATCH_CHECK(ran == std::vector<int>{0, 1});
  CATCH_CHECK(store.run_until([] { return false; }));  // the rest, no pause
  CATCH_CHECK(ran == std::vector<int>{0, 1, 2, 3});
  CATCH_CHECK(store.empty());
  CATCH_CHECK(store.run_until(always));  // nothing left: done, nothing run
  CATCH_CHECK(ran.size() == 4);

  weight_grad_store failing;
  failing.push([&ran] { ran.push_back(10); });
  failing.push([] { throw std::runtime_error("product failed"); });
  failing.push([&ran] { ran.push_back(12); });
  CATCH_CHECK_FALSE(failing.run_until(always));
  CATCH_CHECK_THROWS_WITH(failing.run_until({}), "product failed");
  CATCH_CHECK(failing.empty());
  CATCH_CHECK(failing.run_until({}));
  CATCH_CHECK(ran == std::vector<int>{0, 1, 2, 3, 10});
}

namespace {
// Counts the runs of a parameter's AccumulateGrad (as layer_chunk's gradient listeners hear them).
struct count_hook : torch::autograd::FunctionPostHook {
  explicit count_hook(std::shared_ptr<int> n) : runs(std::move(n)) {}
  torch::autograd::variable_list operator()(const torch::autograd::variable_list& outputs,
                                            const torch::autograd::variable_list&) override {
    ++*runs;
    return outputs;
  }
  std::shared_ptr<int> runs;
};
}  // namespace

CATCH_TEST_CASE("B whole adds its products into .grad in place: I then W's bits, autograd's values, every hook run",
                "[model][split_linear]") {
  // A GPT-sized product (512 tokens, 256 -> 1024): the in-place GEMM and autograd's product
  // then add round differently, so bit equality below means the same arithmetic ran.
  const int M = 3;
  const at::Tensor w0 = randn({1024, 256}, 41) * 0.05, b0 = randn({1024}, 42);
  std::vector<at::Tensor> xs, rs;
  for (int i = 0; i < M; ++i) {
    xs.push_back(randn({4, 128, 256}, 50 + i));
    rs.push_back(randn({4, 128, 1024}, 60 + i));
  }
  auto fresh = [&] {
    return std::make_pair(w0.clone().requires_grad_(true), b0.clone().requires_grad_(true));
  };
  auto [wa, ba] = fresh();  // autograd's own accumulation (no scope)
  auto [wb, bb] = fresh();  // B whole in the scope
  auto [wd, bd] = fresh();  // I, then W from the store
  auto runs = std::make_shared<int>(0);
  auto accumulator = torch::autograd::impl::grad_accumulator(wb);  // held: the tensor keeps it weakly
  accumulator->add_post_hook(std::make_unique<count_hook>(runs));
  for (int i = 0; i < M; ++i) {
    (split_linear(xs[i], wa, ba) * rs[i]).sum().backward();
    {
      weight_grad_accumulation in_place;
      CATCH_CHECK(weight_grad_accumulation::active());
      (split_linear(xs[i], wb, bb) * rs[i]).sum().backward();
    }
    weight_grad_store store;
    {
      weight_grad_deferral defer(store);
      (split_linear(xs[i], wd, bd) * rs[i]).sum().backward();
    }
    store.run();
  }
  CATCH_CHECK_FALSE(weight_grad_accumulation::active());
  CATCH_CHECK(*runs == M);  // the hooks ran after every backward, the in-place ones too
  CATCH_CHECK(torch::equal(wb.grad(), wd.grad()));
  CATCH_CHECK(torch::equal(bb.grad(), bd.grad()));
  const double scale = wa.grad().abs().max().item<double>();
  CATCH_CHECK(max_abs_diff(wb.grad(), wa.grad()) <= 1e-5 * scale);
  CATCH_CHECK(torch::equal(bb.grad(), ba.grad()));  // the bias adds the same sums either way

  // torch::autograd::grad outside the scope returns the product and leaves .grad alone.
  const at::Tensor before = wb.grad().clone();
  auto g = torch::autograd::grad({(split_linear(xs[0], wb, bb) * rs[0]).sum()}, {wb});
  CATCH_CHECK(torch::equal(wb.grad(), before));
  CATCH_CHECK(max_abs_diff(g[0], rs[0].reshape({-1, 1024}).t().mm(xs[0].reshape({-1, 256}))) <= 1e-6 * scale);
}

CATCH_TEST_CASE("a weight used twice in one graph: B whole in the scope gives I then W's bits, the first microbatch too",
                "[model][split_linear]") {
  // Both uses' products meet in the same .grad: autograd would sum them in its input buffer
  // first; in place, each goes into .grad in the order autograd reaches it, as W runs them.
  const at::Tensor w0 = randn({256, 256}, 71) * 0.05, b0 = randn({256}, 72);
  auto twice = [](const at::Tensor& x, const at::Tensor& w, const at::Tensor& b) {
    return split_linear(split_linear(x, w, b).tanh(), w, b);
  };
  auto wb = w0.clone().requires_grad_(true), bb = b0.clone().requires_grad_(true);
  auto wd = w0.clone().requires_grad_(true), bd = b0.clone().requires_grad_(true);
  for (int i = 0; i < 2; ++i) {
    const at::Tensor x = randn({4, 128, 256}, 80 + i), r = randn({4, 128, 256}, 90 + i);
    {
      weight_grad_accumulation in_place;
      (twice(x, wb, bb) * r).sum().backward();
    }
    weight_grad_store store;
    {
      weight_grad_deferral defer(store);
      (twice(x, wd, bd) * r).sum().backward();
    }
    CATCH_CHECK(store.size() == 2);
    store.run();
    CATCH_INFO("microbatch " << i << ": the weight's gradients differ by up to " << max_abs_diff(wb.grad(), wd.grad())
                              << ", the bias's by up to " << max_abs_diff(bb.grad(), bd.grad()));
    CATCH_CHECK(torch::equal(wb.grad(), wd.grad()));
    CATCH_CHECK(torch::equal(bb.grad(), bd.grad()));
  }
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
