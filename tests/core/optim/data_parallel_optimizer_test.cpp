// The data-parallel optimizer: the reduction is the replicas' sum in replica order, ZeRO-0 and
// ZeRO-1 end with the same bits, both match shard_optimizer on the summed gradients, ZeRO-1
// holds 1/D of the state, the norm leaves tied copies out, buckets leave early once final,
// and AdamW state moves between layouts by parameter name.
#include <catch2/catch.hpp>

#include "core/model/tensor_box_torch.hpp"
#include "core/optim/data_parallel_optimizer.hpp"

using namespace actorpipe;
using Catch::Contains;

namespace {

// One replica's parameters: same values on every replica, its own gradients.
struct replica_params {
  std::vector<at::Tensor> tensors;
  std::vector<std::pair<std::string, tensor_box>> named() const {
    std::vector<std::pair<std::string, tensor_box>> out;
    const char* names[] = {"w", "b", "head"};
    for (size_t i = 0; i < tensors.size(); ++i) out.emplace_back(names[i], box(tensors[i]));
    return out;
  }
};

replica_params make_replica(int replica, int step) {
  torch::manual_seed(7);
  replica_params r;
  r.tensors = {torch::randn({6, 5}).requires_grad_(true), torch::randn({5}).requires_grad_(true),
               torch::randn({3, 4}).requires_grad_(true)};
  torch::manual_seed(100 + 10 * replica + step);
  for (auto& t : r.tensors) t.mutable_grad() = torch::randn(t.sizes());
  return r;
}

std::vector<long long> sizes(const replica_params& r) {
  std::vector<long long> out;
  for (auto& t : r.tensors) out.push_back(t.numel());
  return out;
}

// Runs `steps` data-parallel steps over D replicas with one ZeRO stage; returns replica 0's
// parameters (and checks every replica ends equal).
std::vector<at::Tensor> run(int D, int zero, int steps, long long bucket, long long* state_bytes = nullptr,
                            std::vector<std::unique_ptr<data_parallel_optimizer>>* keep = nullptr,
                            std::vector<replica_params>* keep_replicas = nullptr) {
  std::vector<replica_params> reps;
  std::vector<std::unique_ptr<data_parallel_optimizer>> opts;
  for (int d = 0; d < D; ++d) reps.push_back(make_replica(d, 0));
  const flat_layout layout = make_flat_layout(sizes(reps[0]), D, bucket);
  for (int d = 0; d < D; ++d)
    opts.push_back(std::make_unique<data_parallel_optimizer>(reps[d].named(), layout, d, zero, adamw_options{}, std::vector<std::string>{}));
  for (int k = 0; k < steps; ++k) {
    for (int d = 0; d < D; ++d) {
      auto fresh = make_replica(d, k);
      for (size_t i = 0; i < fresh.tensors.size(); ++i) reps[d].tensors[i].mutable_grad().copy_(fresh.tensors[i].grad());
    }
    for (int b = 0; b < static_cast<int>(layout.buckets.size()); ++b) {
      std::vector<tensor_box> buckets;
      for (int d = 0; d < D; ++d) buckets.push_back(opts[d]->gradient_bucket(b));
      for (int j = 0; j < D; ++j) {
        std::vector<tensor_box> in;
        for (int d = 0; d < D; ++d) in.push_back(opts[d]->slice(buckets[d], b, j));
        opts[j]->reduce(b, in);
      }
      if (zero == 0)
        for (int j = 0; j < D; ++j)
          for (int d = 0; d < D; ++d)
            if (d != j) opts[d]->set_reduced_slice(j, b, opts[j]->reduced_slice(b));
    }
    for (int d = 0; d < D; ++d) opts[d]->step(0.5, 1e-2);
    if (zero == 1)
      for (int b = 0; b < static_cast<int>(layout.buckets.size()); ++b)
        for (int j = 0; j < D; ++j)
          for (int d = 0; d < D; ++d)
            if (d != j) opts[d]->set_parameter_slice(j, b, opts[j]->parameter_slice(b));
  }
  for (int d = 1; d < D; ++d)
    for (size_t i = 0; i < reps[0].tensors.size(); ++i) CATCH_CHECK(torch::equal(reps[d].tensors[i], reps[0].tensors[i]));
  if (state_bytes) *state_bytes = opts[0]->state_bytes();
  std::vector<at::Tensor> out;
  for (auto& t : reps[0].tensors) out.push_back(t.detach().clone());
  if (keep) *keep = std::move(opts);
  if (keep_replicas) *keep_replicas = std::move(reps);
  return out;
}

}  // namespace

CATCH_TEST_CASE("ZeRO-1 and ZeRO-0 give the same bits, and ZeRO-1 holds 1/D of the state") {
  for (int D : {2, 3})
    for (long long bucket : {7LL, 16LL, 1000LL}) {
      long long bytes0 = 0, bytes1 = 0;
      auto a = run(D, 0, 3, bucket, &bytes0), b = run(D, 1, 3, bucket, &bytes1);
      for (size_t i = 0; i < a.size(); ++i) CATCH_CHECK(torch::equal(a[i], b[i]));
      CATCH_CHECK(bytes1 * D == bytes0);
      const long long elements = 30 + 5 + 12;
      CATCH_CHECK(bytes0 <= 2 * 4 * (elements + D));  // padding: less than one slice row per bucket
    }
}

CATCH_TEST_CASE("the data-parallel step equals shard_optimizer on the replicas' summed gradients") {
  const int D = 2;
  auto got = run(D, 1, 2, 8);
  // The same two steps by shard_optimizer, gradients summed in replica order, clip 0.5.
  auto ref = make_replica(0, 0);
  shard_optimizer opt(ref.named(), adamw_options{});
  for (int k = 0; k < 2; ++k) {
    auto r0 = make_replica(0, k), r1 = make_replica(1, k);
    for (size_t i = 0; i < ref.tensors.size(); ++i) ref.tensors[i].mutable_grad() = r0.tensors[i].grad() + r1.tensors[i].grad();
    opt.scale_grads(0.5);
    opt.step(1e-2);
  }
  for (size_t i = 0; i < got.size(); ++i) CATCH_CHECK(torch::allclose(got[i], ref.tensors[i].detach(), 1e-6, 1e-7));
}

CATCH_TEST_CASE("the reduced shards' norm is the summed gradient's, tied copies left out") {
  const int D = 2;
  std::vector<replica_params> reps = {make_replica(0, 0), make_replica(1, 0)};
  const flat_layout layout = make_flat_layout(sizes(reps[0]), D, 8);
  std::vector<std::unique_ptr<data_parallel_optimizer>> opts;
  for (int d = 0; d < D; ++d)
    opts.push_back(std::make_unique<data_parallel_optimizer>(reps[d].named(), layout, d, 1, adamw_options{},
                                                             std::vector<std::string>{"head"}));
  for (int b = 0; b < static_cast<int>(layout.buckets.size()); ++b) {
    std::vector<tensor_box> buckets = {opts[0]->gradient_bucket(b), opts[1]->gradient_bucket(b)};
    for (int j = 0; j < D; ++j) opts[j]->reduce(b, {opts[0]->slice(buckets[0], b, j), opts[1]->slice(buckets[1], b, j)});
  }
  double want = 0;
  for (int i = 0; i < 2; ++i) want += (reps[0].tensors[i].grad() + reps[1].tensors[i].grad()).to(torch::kDouble).pow(2).sum().item<double>();
  CATCH_CHECK(opts[0]->grad_sq_sum() + opts[1]->grad_sq_sum() == Approx(want).epsilon(1e-12));
}

CATCH_TEST_CASE("the data-parallel optimizer refuses what it cannot do") {
  auto r = make_replica(0, 0);
  const flat_layout layout = make_flat_layout(sizes(r), 2, 8);
  CATCH_CHECK_THROWS_WITH(data_parallel_optimizer(r.named(), layout, 0, 2, adamw_options{}, {}), Contains("zero_stage=2"));
  CATCH_CHECK_THROWS_WITH(data_parallel_optimizer(r.named(), layout, 2, 1, adamw_options{}, {}), Contains("replica=2"));
  data_parallel_optimizer opt(r.named(), layout, 0, 1, adamw_options{}, {});
  CATCH_CHECK_THROWS_WITH(opt.reduce(0, {opt.gradient_bucket(0)}), Contains("1 slices for 2 replicas"));
  CATCH_CHECK_THROWS_WITH(opt.step(1.0, -1), Contains("lr="));
  // A user's model in double: said as data parallelism's rule, not as the layout's.
  auto named = r.named();
  named[0].second = box(unbox(named[0].second).to(torch::kDouble));
  CATCH_CHECK_THROWS_WITH(data_parallel_optimizer(named, layout, 0, 1, adamw_options{}, {}),
                          "data parallelism (dp > 1) needs float32 parameters: '" + named[0].first +
                              "' is Double (train this model with dp=1, or build its parameters in float32)");
}

CATCH_TEST_CASE("a bucket leaves early once each of its parameters had its last pass's contributions, tied ones late") {
  auto r = make_replica(0, 0);  // w: 30, b: 5, head: 12 elements; buckets of 16 over 2 replicas
  const flat_layout layout = make_flat_layout(sizes(r), 2, 16);
  CATCH_REQUIRE(layout.buckets.size() == 3);  // [0, 16) w | [16, 32) w, b | [32, 47) b, head
  data_parallel_optimizer opt(r.named(), layout, 0, 1, adamw_options{}, {});
  opt.set_late_parameters({r.named()[2].second});  // head: tied
  // Step 0 (2 microbatches) counts the last pass and sends nothing early: every bucket at the end.
  for (int m = 0; m < 2; ++m)
    for (int p : {2, 1, 0}) CATCH_CHECK(opt.gradient_accumulated(p, m == 1).empty());
  CATCH_CHECK(opt.take_remaining_buckets() == std::vector<int>{0, 1, 2});
  // Step 1: nothing leaves before the last pass; in it, w's contribution completes buckets 0
  // and 1 (b's came first); bucket 2 holds the tied head, so it waits for the end.
  for (int p : {2, 1, 0}) CATCH_CHECK(opt.gradient_accumulated(p, false).empty());
  CATCH_CHECK(opt.gradient_accumulated(2, true).empty());
  CATCH_CHECK(opt.gradient_accumulated(1, true).empty());
  CATCH_CHECK(opt.gradient_accumulated(0, true) == std::vector<int>{0, 1});
  CATCH_CHECK(opt.gradient_accumulated(0, true).empty());  // past its count: nothing more
  CATCH_CHECK(opt.take_remaining_buckets() == std::vector<int>{2});
  // Step 2: w used by more microbatches than in step 0 (a layer some microbatches skip) counts
  // the same in the last pass; b, which the last pass does not touch this step, holds buckets
  // 1 and 2 to the end (it was final by the count of every contribution, and b's gradient
  // still changed after: the bucket left without it).
  for (int m = 0; m < 3; ++m) CATCH_CHECK(opt.gradient_accumulated(0, false).empty());
  CATCH_CHECK(opt.gradient_accumulated(1, false).empty());
  CATCH_CHECK(opt.gradient_accumulated(0, true) == std::vector<int>{0});
  CATCH_CHECK(opt.take_remaining_buckets() == std::vector<int>{1, 2});
}

namespace {
// One parameter's whole moments, stitched from runs.
std::pair<at::Tensor, at::Tensor> whole(const std::vector<moment_segment>& runs, const std::string& name, long long n) {
  std::pair<at::Tensor, at::Tensor> out{torch::zeros({n}), torch::zeros({n})};
  for (auto& r : runs) {
    if (r.parameter != name) continue;
    const at::Tensor& m = unbox(r.exp_avg);
    out.first.narrow(0, r.offset, m.numel()).copy_(m);
    out.second.narrow(0, r.offset, m.numel()).copy_(unbox(r.exp_avg_sq));
  }
  return out;
}
}  // namespace

CATCH_TEST_CASE("AdamW state moves between layouts by parameter name: ZeRO-1 shards to one optimizer and to 3 shards") {
  std::vector<std::unique_ptr<data_parallel_optimizer>> zero1, zero0;
  std::vector<replica_params> reps;
  run(2, 1, 2, 7, nullptr, &zero1, &reps);
  run(2, 0, 2, 7, nullptr, &zero0);
  std::vector<moment_segment> runs;
  for (auto& o : zero1)
    for (auto& r : o->export_moments()) runs.push_back(r);
  std::vector<moment_segment> full;  // ZeRO-0: each replica exports its own shard of the whole state
  for (auto& o : zero0)
    for (auto& r : o->export_moments()) full.push_back(r);
  const std::vector<std::pair<std::string, long long>> params = {{"w", 30}, {"b", 5}, {"head", 12}};
  for (auto& [name, n] : params) {
    auto a = whole(runs, name, n), b = whole(full, name, n);
    CATCH_CHECK(torch::equal(a.first, b.first));
    CATCH_CHECK(torch::equal(a.second, b.second));
  }
  // Into one replica's shard_optimizer, and back out whole.
  shard_optimizer one(reps[0].named(), adamw_options{});
  one.import_moments(runs);
  const auto back = one.export_moments();
  CATCH_REQUIRE(back.size() == 3);
  for (auto& r : back) {
    CATCH_CHECK(r.steps == 2);
    auto b = whole(full, r.parameter, unbox(r.exp_avg).numel());
    CATCH_CHECK(torch::equal(unbox(r.exp_avg), b.first));
    CATCH_CHECK(torch::equal(unbox(r.exp_avg_sq), b.second));
  }
  // Into three ZeRO-1 shards with other buckets: together they hold the same moments.
  const flat_layout three = make_flat_layout(sizes(reps[0]), 3, 5);
  std::vector<moment_segment> again;
  for (int j = 0; j < 3; ++j) {
    data_parallel_optimizer o(reps[0].named(), three, j, 1, adamw_options{}, {});
    o.import_moments(runs);
    CATCH_CHECK(o.step_index() == 2);
    for (auto& r : o.export_moments()) again.push_back(r);
  }
  for (auto& [name, n] : params) {
    auto a = whole(again, name, n), b = whole(full, name, n);
    CATCH_CHECK(torch::equal(a.first, b.first));
    CATCH_CHECK(torch::equal(a.second, b.second));
  }
  // A gap is an error naming the parameter and the elements.
  std::vector<moment_segment> partial;
  for (auto& r : runs)
    if (!(r.parameter == "w" && r.offset > 0)) partial.push_back(r);
  shard_optimizer short_of(reps[0].named(), adamw_options{});
  CATCH_CHECK_THROWS_WITH(short_of.import_moments(partial), Contains("optimizer state of 'w': elements"));
  std::vector<moment_segment> none;
  CATCH_CHECK_THROWS_WITH(short_of.import_moments(none), Contains("optimizer state of 'w': missing"));
}

CATCH_TEST_CASE("a parameter no replica has a gradient for is left alone, one some replicas have is stepped, counting its own updates") {
  // b: no gradient on any replica in step 0 (a detached input, say), on replica 1 only in
  // step 1, on both in step 2. shard_optimizer on the summed gradients leaves it alone in step
  // 0 and then counts from 1 (bias correction); the data-parallel optimizer must do the same,
  // with b's elements in one slice or cut across slices and buckets.
  auto has = [](int d, int step) { return step == 2 || (step == 1 && d == 1); };
  for (int zero : {0, 1})
    for (long long bucket : {8LL, 16LL, 1000LL}) {
      CATCH_INFO("zero " << zero << ", bucket " << bucket);
      const int D = 2;
      std::vector<replica_params> reps = {make_replica(0, 0), make_replica(1, 0)};
      const flat_layout layout = make_flat_layout(sizes(reps[0]), D, bucket);
      std::vector<std::unique_ptr<data_parallel_optimizer>> opts;
      for (int d = 0; d < D; ++d)
        opts.push_back(std::make_unique<data_parallel_optimizer>(reps[d].named(), layout, d, zero, adamw_options{},
                                                                 std::vector<std::string>{}));
      auto ref = make_replica(0, 0);
      shard_optimizer one(ref.named(), adamw_options{});
      for (int k = 0; k < 3; ++k) {
        std::vector<replica_params> fresh = {make_replica(0, k), make_replica(1, k)};
        for (int d = 0; d < D; ++d)
          for (size_t i = 0; i < 3; ++i)
            reps[d].tensors[i].mutable_grad() = (i != 1 || has(d, k)) ? fresh[d].tensors[i].grad().clone() : at::Tensor();
        for (size_t i = 0; i < 3; ++i) {
          at::Tensor sum;
          for (int d = 0; d < D; ++d) {
            const at::Tensor& g = reps[d].tensors[i].grad();
            if (g.defined()) sum = sum.defined() ? sum + g : g.clone();
          }
          ref.tensors[i].mutable_grad() = sum;
        }
        for (int b = 0; b < static_cast<int>(layout.buckets.size()); ++b) {
          std::vector<tensor_box> buckets = {opts[0]->gradient_bucket(b), opts[1]->gradient_bucket(b)};
          for (int j = 0; j < D; ++j) opts[j]->reduce(b, {opts[0]->slice(buckets[0], b, j), opts[1]->slice(buckets[1], b, j)});
          if (zero == 0)
            for (int j = 0; j < D; ++j) opts[1 - j]->set_reduced_slice(j, b, opts[j]->reduced_slice(b));
        }
        for (int d = 0; d < D; ++d) opts[d]->step(1.0, 1e-2);
        if (zero == 1)
          for (int b = 0; b < static_cast<int>(layout.buckets.size()); ++b)
            for (int j = 0; j < D; ++j) opts[1 - j]->set_parameter_slice(j, b, opts[j]->parameter_slice(b));
        one.step(1e-2);
        if (k == 0) CATCH_CHECK(torch::equal(reps[0].tensors[1], make_replica(0, 0).tensors[1]));  // untouched
        for (int d = 0; d < D; ++d)
          for (size_t i = 0; i < 3; ++i) CATCH_CHECK(torch::allclose(reps[d].tensors[i], ref.tensors[i].detach(), 1e-6, 1e-7));
      }
      // The update counts travel with the moments: b had 2, the others 3.
      std::vector<moment_segment> runs;
      for (auto& o : opts)
        for (auto& r : o->export_moments()) runs.push_back(r);
      for (const auto& r : runs) CATCH_CHECK(r.steps == (r.parameter == "b" ? 2 : 3));
      for (const auto& r : one.export_moments()) CATCH_CHECK(r.steps == (r.parameter == "b" ? 2 : 3));
      // A checkpoint whose parameters had different counts (any layout's) loads into replicas.
      data_parallel_optimizer back(reps[0].named(), make_flat_layout(sizes(reps[0]), 3, 5), 1, 1, adamw_options{}, {});
      CATCH_CHECK_NOTHROW(back.import_moments(one.export_moments()));
      for (const auto& r : back.export_moments()) CATCH_CHECK(r.steps == (r.parameter == "b" ? 2 : 3));
    }
}
