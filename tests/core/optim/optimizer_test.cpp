// AdamW against a hand-computed two-step update, no decay on 1-D parameters, gradient
// bookkeeping (norm with skip, scaling, zeroing), the LR schedule and the clip coefficient.
#include <catch2/catch.hpp>

#include <cmath>
#include <vector>

#include "core/model/tensor_box_torch.hpp"
#include "core/optim/optimizer.hpp"

using namespace actorpipe;
using Catch::Contains;

namespace {

at::Tensor leaf(const std::vector<double>& values, std::vector<std::int64_t> shape, at::ScalarType dtype = torch::kDouble) {
  return torch::tensor(values, torch::dtype(torch::kDouble)).reshape(shape).to(dtype).requires_grad_(true);
}

void set_grad(at::Tensor& p, const std::vector<double>& g) {
  p.mutable_grad() = torch::tensor(g, torch::dtype(torch::kDouble)).reshape(p.sizes()).to(p.scalar_type());
}

std::vector<double> values(const at::Tensor& t) {
  at::Tensor c = t.detach().to(torch::kDouble).contiguous().reshape({-1});
  return std::vector<double>(c.data_ptr<double>(), c.data_ptr<double>() + c.numel());
}

// The reference: AdamW on one element, in doubles, exactly as documented in optimizer.cpp.
struct reference_adamw {
  double p, m = 0, v = 0;
  int t = 0;
  void step(double g, double lr, const adamw_options& o, bool decay) {
    ++t;
    if (decay) p -= lr * o.weight_decay * p;
    m = o.beta1 * m + (1 - o.beta1) * g;
    v = o.beta2 * v + (1 - o.beta2) * g * g;
    const double mhat = m / (1 - std::pow(o.beta1, t));
    const double vhat = v / (1 - std::pow(o.beta2, t));
    p -= lr * mhat / (std::sqrt(vhat) + o.eps);
  }
};

}  // namespace

CATCH_TEST_CASE("AdamW: two steps match the hand-computed update, 1-D params get no decay", "[optim]") {
  adamw_options defaults;  // beta1 0.9, beta2 0.95, eps 1e-8
  defaults.weight_decay = 0.1;
  // Other betas and an eps as large as a gradient (--adam-beta1, --adam-beta2, --adam-eps).
  adamw_options other = defaults;
  other.beta1 = 0.5;
  other.beta2 = 0.999;
  other.eps = 0.05;
  for (const adamw_options& o : {defaults, other}) {
    CATCH_INFO("beta1 " << o.beta1 << ", beta2 " << o.beta2 << ", eps " << o.eps);
    const std::vector<double> w0 = {0.5, -1.0, 2.0, 0.25}, b0 = {1.0, -2.0};
    const std::vector<double> gw1 = {0.1, -0.2, 0.3, 0.0}, gw2 = {-0.05, 0.4, 0.3, 1.0};
    const std::vector<double> gb1 = {0.5, 0.0}, gb2 = {0.25, -3.0};
    const double lr1 = 0.01, lr2 = 0.005;

    for (auto dtype : {torch::kDouble, torch::kFloat}) {
      CATCH_INFO("dtype " << c10::toString(dtype));
      at::Tensor w = leaf(w0, {2, 2}, dtype), b = leaf(b0, {2}, dtype);
      const void* storage = w.data_ptr();
      shard_optimizer opt({{"w", box(w)}, {"b", box(b)}}, o);
      CATCH_CHECK(opt.num_parameters() == 2);
      CATCH_CHECK(opt.num_elements() == 6);

      set_grad(w, gw1);
      set_grad(b, gb1);
      opt.step(lr1);
      if (dtype == torch::kDouble && o.eps == defaults.eps) {
        // Step 1 by hand: mhat = g, vhat = g^2, so p -= lr*wd*p + lr * g / (|g| + eps).
        CATCH_CHECK(values(w)[0] == Approx(0.5 - 0.01 * 0.1 * 0.5 - 0.01 * 0.1 / (0.1 + 1e-8)).epsilon(1e-14));
        CATCH_CHECK(values(w)[0] == Approx(0.489500001).epsilon(1e-12));
        CATCH_CHECK(values(w)[3] == Approx(0.25 * (1 - 0.001)).epsilon(1e-14));  // zero grad: decay only
        CATCH_CHECK(values(b)[1] == -2.0);  // 1-D, zero grad: untouched
      }
      set_grad(w, gw2);
      set_grad(b, gb2);
      opt.step(lr2);

      const double tol = dtype == torch::kDouble ? 1e-13 : 1e-6;
      const auto got_w = values(w), got_b = values(b);
      for (int i = 0; i < 4; ++i) {
        reference_adamw r{w0[i]};
        r.step(gw1[i], lr1, o, true);
        r.step(gw2[i], lr2, o, true);
        CATCH_CHECK(got_w[i] == Approx(r.p).epsilon(tol));
      }
      for (int i = 0; i < 2; ++i) {
        reference_adamw r{b0[i]}, decayed{b0[i]};
        r.step(gb1[i], lr1, o, false);
        r.step(gb2[i], lr2, o, false);
        decayed.step(gb1[i], lr1, o, true);
        decayed.step(gb2[i], lr2, o, true);
        CATCH_CHECK(got_b[i] == Approx(r.p).epsilon(tol));
        CATCH_CHECK(std::fabs(got_b[i] - decayed.p) > 1e-5);  // decay would have been visible
      }
      CATCH_CHECK(w.data_ptr() == storage);  // updated in place
      CATCH_CHECK(w.is_leaf());
      CATCH_CHECK(w.requires_grad());
    }
  }
  // The other settings give other numbers: each reaches the update.
  for (const auto& [what, changed] : {std::pair<const char*, adamw_options>{"beta1", [&] { auto x = defaults; x.beta1 = 0.5; return x; }()},
                                      {"beta2", [&] { auto x = defaults; x.beta2 = 0.5; return x; }()},
                                      {"eps", [&] { auto x = defaults; x.eps = 0.05; return x; }()}}) {
    CATCH_INFO(what);
    at::Tensor a = leaf({0.5, -1.0}, {2}), b = leaf({0.5, -1.0}, {2});
    shard_optimizer on_defaults({{"a", box(a)}}, defaults), on_changed({{"b", box(b)}}, changed);
    for (const auto& g : {std::vector<double>{0.1, -0.2}, std::vector<double>{-0.3, 0.05}}) {
      set_grad(a, g);
      set_grad(b, g);
      on_defaults.step(0.01);
      on_changed.step(0.01);
    }
    CATCH_CHECK(std::fabs(values(a)[0] - values(b)[0]) > 1e-5);
  }
}

CATCH_TEST_CASE("AdamW: a parameter without a gradient is skipped and keeps its step count", "[optim]") {
  adamw_options o;
  at::Tensor a = leaf({1.0, 2.0}, {2}), c = leaf({3.0, 4.0}, {2});
  shard_optimizer opt({{"a", box(a)}, {"c", box(c)}}, o);
  set_grad(a, {1.0, 1.0});
  opt.step(0.1);
  opt.step(0.1);
  CATCH_CHECK(values(c) == std::vector<double>{3.0, 4.0});
  // c's first update, after a's second: bias correction at t = 1, so the step is lr * sign(g).
  set_grad(c, {2.0, -0.5});
  opt.step(0.1);
  CATCH_CHECK(values(c)[0] == Approx(3.0 - 0.1 * 2.0 / (2.0 + 1e-8)).epsilon(1e-14));
  CATCH_CHECK(values(c)[1] == Approx(4.0 + 0.1 * 0.5 / (0.5 + 1e-8)).epsilon(1e-14));
}

CATCH_TEST_CASE("grad_sq_sum(s), scale_grads and zero_grad", "[optim]") {
  at::Tensor a = leaf({1.0, 2.0}, {2}), b = leaf({1.0}, {1}), c = leaf({5.0}, {1});
  at::Tensor w = leaf({1.0, -2.0, 3.0, 0.5}, {2, 2}, torch::kFloat);
  shard_optimizer opt({{"a", box(a)}, {"b", box(b)}, {"c", box(c)}, {"w", box(w)}}, adamw_options{});
  CATCH_CHECK(opt.grad_sq_sum() == 0);  // nothing has a gradient yet

  set_grad(a, {1.0, 2.0});
  set_grad(b, {3.0});
  (w * w).sum().backward();  // a real autograd gradient: 2w = {2, -4, 6, 1}, squares sum 57
  CATCH_CHECK(opt.grad_sq_sum() == 1 + 4 + 9 + 57);  // c: undefined, counts as zero
  CATCH_CHECK(opt.grad_sq_sum({"b"}) == 1 + 4 + 57);
  CATCH_CHECK(opt.grad_sq_sum({"w", "a", "not-a-param"}) == 9);
  // Per parameter, in parameter order: c (no gradient) and skipped ones are left out.
  CATCH_CHECK(opt.grad_sq_sums() == std::vector<double>{5, 9, 57});
  CATCH_CHECK(opt.grad_sq_sums({"a"}) == std::vector<double>{9, 57});

  opt.scale_grads(0.5);
  CATCH_CHECK(opt.grad_sq_sum() == Approx((1 + 4 + 9 + 57) * 0.25));
  CATCH_CHECK(values(b.grad()) == std::vector<double>{1.5});

  opt.zero_grad();  // zeroed in place: still defined, same buffers
  CATCH_CHECK(a.grad().defined());
  CATCH_CHECK(w.grad().defined());
  CATCH_CHECK_FALSE(c.grad().defined());  // never had one
  CATCH_CHECK(opt.grad_sq_sum() == 0);
  CATCH_CHECK_THROWS_WITH(opt.scale_grads(std::nan("")), Contains("factor=nan"));
  CATCH_CHECK_THROWS_WITH(opt.step(-1), Contains("lr=-1"));
}

// Float parameters run AdamW as one loop (core/optim/adamw_kernel.hpp) with the clip scale
// folded in; a parameter laid out non-contiguously takes the tensor-op path.
CATCH_TEST_CASE("AdamW on floats: the clip scale folded into step gives the bits of scale_grads then step", "[optim]") {
  torch::manual_seed(11);
  const at::Tensor w0 = torch::randn({37, 19}), b0 = torch::randn({19});
  const std::vector<at::Tensor> gw = {torch::randn({37, 19}), torch::randn({37, 19})};
  const std::vector<at::Tensor> gb = {torch::randn({19}), torch::randn({19})};
  auto param = [](const at::Tensor& t) { return t.clone().requires_grad_(true); };
  at::Tensor w_scaled = param(w0), b_scaled = param(b0), w_folded = param(w0), b_folded = param(b0);
  // The same matrix stored transposed (a leaf whose strides are not contiguous).
  at::Tensor w_strided = torch::empty_strided({37, 19}, {1, 37});
  w_strided.copy_(w0);
  w_strided.requires_grad_(true);
  CATCH_REQUIRE_FALSE(w_strided.is_contiguous());
  adamw_options o;
  shard_optimizer scaled({{"w", box(w_scaled)}, {"b", box(b_scaled)}}, o);
  shard_optimizer folded({{"w", box(w_folded)}, {"b", box(b_folded)}}, o);
  shard_optimizer strided({{"w", box(w_strided)}}, o);
  for (int k = 0; k < 2; ++k) {
    w_scaled.mutable_grad() = gw[k].clone();
    b_scaled.mutable_grad() = gb[k].clone();
    w_folded.mutable_grad() = gw[k].clone();
    b_folded.mutable_grad() = gb[k].clone();
    w_strided.mutable_grad() = gw[k].clone();
    scaled.scale_grads(0.3);
    scaled.step(3e-3);
    folded.step(3e-3, 0.3);
    strided.step(3e-3, 0.3);
    CATCH_CHECK(torch::equal(w_folded.grad(), gw[k]));  // read scaled, left as it was
  }
  CATCH_CHECK(torch::equal(w_folded, w_scaled));
  CATCH_CHECK(torch::equal(b_folded, b_scaled));
  const auto ms = scaled.export_moments(), mf = folded.export_moments();
  CATCH_REQUIRE(ms.size() == mf.size());
  for (size_t i = 0; i < ms.size(); ++i) {
    CATCH_CHECK(torch::equal(unbox(ms[i].exp_avg), unbox(mf[i].exp_avg)));
    CATCH_CHECK(torch::equal(unbox(ms[i].exp_avg_sq), unbox(mf[i].exp_avg_sq)));
  }
  CATCH_CHECK_FALSE(torch::equal(w_folded, w0));
  // The tensor-op path: the same update up to float rounding.
  CATCH_CHECK(torch::allclose(w_strided, w_folded, 1e-6, 1e-7));
  CATCH_CHECK_THROWS_WITH(folded.step(1e-3, std::nan("")), Contains("grad_scale=nan"));
}

CATCH_TEST_CASE("shard_optimizer: constructor errors", "[optim]") {
  at::Tensor a = leaf({1.0}, {1});
  CATCH_CHECK_THROWS_WITH(shard_optimizer({{"w", box(a)}, {"x", box(a)}, {"w", box(a)}}, adamw_options{}),
                          Contains("duplicate parameter name 'w' (positions 0 and 2)"));
  CATCH_CHECK_THROWS_WITH(shard_optimizer({{"w", box(a)}, {"x", tensor_box()}}, adamw_options{}),
                          "parameter 'x' is undefined");
  CATCH_CHECK_THROWS_WITH(shard_optimizer({{"ids", box(torch::zeros({2}, torch::kInt64))}}, adamw_options{}),
                          Contains("parameter 'ids' has dtype Long"));
  adamw_options bad;
  bad.beta1 = 1.0;
  CATCH_CHECK_THROWS_WITH(shard_optimizer({{"w", box(a)}}, bad), Contains("beta1=1 must be in [0, 1)"));
  bad = adamw_options{};
  bad.eps = 0;
  CATCH_CHECK_THROWS_WITH(shard_optimizer({{"w", box(a)}}, bad), Contains("eps=0"));
  bad = adamw_options{};
  bad.weight_decay = -0.1;
  CATCH_CHECK_THROWS_WITH(shard_optimizer({{"w", box(a)}}, bad), Contains("weight_decay=-0.1"));
  shard_optimizer empty({}, adamw_options{});
  CATCH_CHECK(empty.num_parameters() == 0);
  CATCH_CHECK(empty.grad_sq_sum() == 0);
}

CATCH_TEST_CASE("lr_at: linear warm-up, then linear decay to min_ratio at the last step", "[optim]") {
  // warmup 4, total 14: warm-up steps 0..3, decay over steps 4..13 (9 intervals).
  CATCH_CHECK(lr_at(0, 1.0, 4, 14) == Approx(0.25));
  CATCH_CHECK(lr_at(1, 1.0, 4, 14) == Approx(0.5));
  CATCH_CHECK(lr_at(3, 1.0, 4, 14) == Approx(1.0));
  CATCH_CHECK(lr_at(4, 1.0, 4, 14) == Approx(1.0));
  CATCH_CHECK(lr_at(9, 1.0, 4, 14) == Approx(1.0 - 0.9 * 5.0 / 9.0));
  CATCH_CHECK(lr_at(13, 1.0, 4, 14) == Approx(0.1));
  CATCH_CHECK(lr_at(13, 3e-4, 4, 14, 0.0) == Approx(0.0).margin(1e-18));
  CATCH_CHECK(lr_at(13, 3e-4, 4, 14, 0.5) == Approx(1.5e-4));
  // No warm-up: step 0 is base_lr; one step total: base_lr.
  CATCH_CHECK(lr_at(0, 2.0, 0, 11) == Approx(2.0));
  CATCH_CHECK(lr_at(5, 2.0, 0, 11) == Approx(2.0 * (1 - 0.9 * 0.5)));
  CATCH_CHECK(lr_at(10, 2.0, 0, 11) == Approx(0.2));
  CATCH_CHECK(lr_at(0, 2.0, 0, 1) == Approx(2.0));
  // Warm-up longer than the run (config allows it with a note): lr never reaches base_lr.
  CATCH_CHECK(lr_at(9, 1.0, 20, 10) == Approx(0.5));
  // Warm-up ends on the last step: nothing left to decay.
  CATCH_CHECK(lr_at(4, 1.0, 4, 5) == Approx(1.0));

  CATCH_CHECK_THROWS_WITH(lr_at(-1, 1.0, 4, 14), Contains("step=-1 must be >= 0"));
  CATCH_CHECK_THROWS_WITH(lr_at(14, 1.0, 4, 14), Contains("step=14 is past the schedule (total_steps=14"));
  CATCH_CHECK_THROWS_WITH(lr_at(0, 1.0, -2, 14), Contains("warmup_steps=-2"));
  CATCH_CHECK_THROWS_WITH(lr_at(0, 1.0, 0, 0), Contains("total_steps=0 must be >= 1"));
  CATCH_CHECK_THROWS_WITH(lr_at(0, -1.0, 0, 5), Contains("base_lr=-1"));
  CATCH_CHECK_THROWS_WITH(lr_at(0, 1.0, 0, 5, 1.5), Contains("min_ratio=1.5 must be in [0, 1]"));
}

CATCH_TEST_CASE("lr_at: the decay ends at decay_steps, before the last step or after it", "[optim]") {
  // warmup 2, decay to 0.1 at step 6 (index 5) of 10: steps 2..5 decay (3 intervals), 5..9 held.
  for (const lr_decay style : {lr_decay::linear, lr_decay::cosine}) {
    CATCH_CAPTURE(lr_decay_name(style));
    CATCH_CHECK(lr_at(1, 1.0, 2, 10, 0.1, style, 6) == Approx(1.0));
    CATCH_CHECK(lr_at(2, 1.0, 2, 10, 0.1, style, 6) == Approx(1.0));
    CATCH_CHECK(lr_at(5, 1.0, 2, 10, 0.1, style, 6) == Approx(0.1));
    for (int step = 6; step < 10; ++step) CATCH_CHECK(lr_at(step, 1.0, 2, 10, 0.1, style, 6) == Approx(0.1));
    // A decay past the run: its steps are those of the longer run's, which goes on from there.
    for (int step = 0; step < 10; ++step)
      CATCH_CHECK(lr_at(step, 1.0, 2, 10, 0.1, style, 30) == lr_at(step, 1.0, 2, 30, 0.1, style));
    // decay_steps equal to total_steps is the default.
    for (int step = 0; step < 10; ++step)
      CATCH_CHECK(lr_at(step, 1.0, 2, 10, 0.1, style, 10) == lr_at(step, 1.0, 2, 10, 0.1, style));
  }
  CATCH_CHECK(lr_at(3, 1.0, 2, 10, 0.1, lr_decay::linear, 6) == Approx(1.0 - 0.9 / 3));
  CATCH_CHECK(lr_at(7, 1.0, 2, 10, 0.1, lr_decay::constant, 6) == Approx(1.0));
  CATCH_CHECK_THROWS_WITH(lr_at(0, 1.0, 2, 10, 0.1, lr_decay::linear, -1),
                          "lr_at: --lr-decay-steps must be >= 0 (0 = the decay ends at the last of --steps): got -1");
  CATCH_CHECK_THROWS_WITH(lr_at(0, 1.0, 2, 10, 0.1, lr_decay::linear, 3),
                          "lr_at: --lr-decay-steps 3 leaves no step to decay over after --warmup-steps 2: the decay starts "
                          "at the full --lr at step 3 and reaches the floor at the step it names, so at least 4");
  // The largest warm-up: counted past int, and no decay end can follow it.
  CATCH_CHECK(lr_decay_steps_error(5, 2147483647) ==
              "--lr-decay-steps 5 leaves no step to decay over after --warmup-steps 2147483647: the decay starts at the "
              "full --lr at step 2147483648 and reaches the floor at the step it names, so no step count can (lower "
              "--warmup-steps)");
  CATCH_CHECK(lr_decay_steps_error(4, 2).empty());
  CATCH_CHECK(lr_decay_steps_error(0, 100).empty());
}

// Megatron's and nanoGPT's cosine: min + (1 - min) x (1 + cos(pi x progress)) / 2 after the
// same warm-up; constant stays at base_lr.
CATCH_TEST_CASE("lr_at: cosine and constant decay after the same warm-up", "[optim]") {
  const double pi = std::acos(-1.0);
  for (lr_decay style : {lr_decay::linear, lr_decay::cosine, lr_decay::constant}) {
    CATCH_CAPTURE(lr_decay_name(style));
    CATCH_CHECK(parse_lr_decay(lr_decay_name(style)) == style);
    CATCH_CHECK(lr_at(0, 1.0, 4, 14, 0.1, style) == Approx(0.25));
    CATCH_CHECK(lr_at(3, 1.0, 4, 14, 0.1, style) == Approx(1.0));
    CATCH_CHECK(lr_at(4, 1.0, 4, 14, 0.1, style) == Approx(1.0));
    CATCH_CHECK(lr_at(4, 1.0, 4, 5, 0.1, style) == Approx(1.0));  // nothing left to decay
  }
  // warmup 4, total 14: the decay over steps 4..13, 9 intervals.
  for (int k = 0; k <= 9; ++k) {
    CATCH_CAPTURE(k);
    CATCH_CHECK(lr_at(4 + k, 2.0, 4, 14, 0.1, lr_decay::cosine) ==
                Approx(2.0 * (0.1 + 0.9 * 0.5 * (1 + std::cos(pi * k / 9.0)))).epsilon(1e-14));
    CATCH_CHECK(lr_at(4 + k, 2.0, 4, 14, 0.1, lr_decay::constant) == 2.0);
  }
  CATCH_CHECK(lr_at(13, 2.0, 4, 14, 0.1, lr_decay::cosine) == Approx(0.2).epsilon(1e-15));
  CATCH_CHECK(lr_at(13, 2.0, 4, 14, 0.0, lr_decay::cosine) == Approx(0.0).margin(1e-15));
  // Halfway, cosine and linear meet; before it cosine is higher, after it lower.
  CATCH_CHECK(lr_at(5, 1.0, 0, 11, 0.1, lr_decay::cosine) == Approx(lr_at(5, 1.0, 0, 11, 0.1)).epsilon(1e-14));
  CATCH_CHECK(lr_at(2, 1.0, 0, 11, 0.1, lr_decay::cosine) > lr_at(2, 1.0, 0, 11, 0.1));
  CATCH_CHECK(lr_at(8, 1.0, 0, 11, 0.1, lr_decay::cosine) < lr_at(8, 1.0, 0, 11, 0.1));
  // The settings' rules, one for flags and train_options.
  CATCH_CHECK(optimizer_setting_error("--min-lr-ratio", 1).empty());
  CATCH_CHECK(optimizer_setting_error("--min-lr-ratio", 1.0000001) ==
              "--min-lr-ratio must be in [0, 1] (a fraction of --lr): got 1.0000001");
  CATCH_CHECK(optimizer_setting_error("--adam-beta2", 0).empty());
  CATCH_CHECK(optimizer_setting_error("--adam-beta2", 1) == "--adam-beta2 must be in [0, 1): got 1");
  CATCH_CHECK(optimizer_setting_error("--adam-eps", 1e-30).empty());
  CATCH_CHECK(optimizer_setting_error("--adam-eps", 1e-39) ==
              "--adam-eps must be a number > 0 within a float's normal range, 1.18e-38 to 3.4e38: got 1e-39");
  CATCH_CHECK_THROWS_WITH(optimizer_setting_error("--lr", 1), "optimizer_setting_error: no rule for '--lr'");
  CATCH_CHECK_THROWS_WITH(parse_lr_decay("cos"), "--lr-decay-style must be linear, cosine or constant: got 'cos'");
  CATCH_CHECK_THROWS_WITH(parse_lr_decay(""), "--lr-decay-style must be linear, cosine or constant: got ''");
  CATCH_CHECK_THROWS_WITH(lr_at(0, 1.0, 0, 5, 0.1, static_cast<lr_decay>(7)), "lr_at: style=7 is no lr_decay");
}

CATCH_TEST_CASE("clip_coefficient", "[optim]") {
  CATCH_CHECK(clip_coefficient(10.0, 1.0) == Approx(1.0 / (10.0 + 1e-6)).epsilon(1e-15));
  CATCH_CHECK(clip_coefficient(4.0, 2.0) == Approx(0.5).epsilon(1e-6));
  CATCH_CHECK(clip_coefficient(0.5, 1.0) == 1.0);
  CATCH_CHECK(clip_coefficient(0.0, 1.0) == 1.0);
  CATCH_CHECK(clip_coefficient(10.0, 0.0) == 1.0);   // clipping off
  CATCH_CHECK(clip_coefficient(10.0, -1.0) == 1.0);  // clipping off
  CATCH_CHECK(clip_coefficient(INFINITY, 1.0) == 0.0);
  CATCH_CHECK_THROWS_WITH(clip_coefficient(std::nan(""), 1.0), Contains("global_norm=nan"));
  CATCH_CHECK_THROWS_WITH(clip_coefficient(-1.0, 1.0), Contains("global_norm=-1"));
}
