// Data parallel x pipeline: D replicas of M microbatches train like one unpipelined model on
// D*M (parameters, losses and gradient norms), ZeRO-1 ends bit for bit where ZeRO-0 does with
// 1/D of the optimizer state, runs repeat bit for bit, and tied embeddings stay tied.
#include <torch/torch.h>

#include "actors/pipeline_runtime.hpp"
#include "core/train/reference_trainer.hpp"
#include "tests/support/train_results.hpp"

#include <catch2/catch.hpp>

using namespace actorpipe;
using namespace actorpipe::testing;

namespace {

train_options data_parallel(const std::string& schedule, int chunks, int dp, int zero) {
  train_options o = tiny_gpt(schedule, 2, chunks, 4);
  o.dp = dp;
  o.zero_stage = zero;
  o.bucket_mb = 0.01;  // ~2.6k elements: several buckets per stage, a padded last one
  return o;
}

const train_result& reference_on_8() {
  static const train_result r = [] {
    train_options o = tiny_gpt("1f1b", 1, 1, 4);
    o.microbatches = 8;
    o.no_pipeline = true;
    return run_reference(o);
  }();
  return r;
}

void check_like_reference(const train_result& r, const std::string& what) {
  const train_result& ref = reference_on_8();
  CATCH_INFO(what);
  CATCH_REQUIRE(r.steps.size() == ref.steps.size());
  for (size_t k = 0; k < r.steps.size(); ++k) {
    CATCH_CHECK(r.steps[k].loss == Approx(ref.steps[k].loss).epsilon(1e-5).margin(4e-5));
    CATCH_CHECK(r.steps[k].grad_norm == Approx(ref.steps[k].grad_norm).epsilon(1e-5).margin(4e-5));
  }
  CATCH_CHECK(all_close(r, ref, 1e-5, 4e-5));
}

}  // namespace

CATCH_TEST_CASE("dp=2 x pp=2 with M microbatches trains like --no-pipeline with 2M", "[actors][runtime][dp]") {
  CATCH_REQUIRE(reference_on_8().steps.back().loss < reference_on_8().steps.front().loss);  // it learns
  for (auto [schedule, chunks] : {std::pair<const char*, int>{"1f1b", 1}, {"zbv", 2}, {"interleaved", 2}})
    for (int zero : {0, 1}) {
      const train_result r = run_pipeline(data_parallel(schedule, chunks, 2, zero));
      check_like_reference(r, std::string(schedule) + ", zero " + std::to_string(zero));
      CATCH_CHECK(r.grid == "pipelines (ranks): 0-1 | 2-3; data-parallel groups: 0,2 | 1,3");
    }
}

CATCH_TEST_CASE("ZeRO-1 ends bit for bit where ZeRO-0 does, holding 1/D of the optimizer state",
                "[actors][runtime][dp][zero]") {
  for (int dp : {2, 3}) {
    auto o = data_parallel("1f1b", 1, dp, 0);
    o.microbatches = 2;
    const train_result zero0 = run_pipeline(o);
    o.zero_stage = 1;
    const train_result zero1 = run_pipeline(o);
    CATCH_CHECK(bit_identical(zero0, zero1));
    for (size_t k = 0; k < zero0.steps.size(); ++k) {
      CATCH_CHECK(zero0.steps[k].loss == zero1.steps[k].loss);
      CATCH_CHECK(zero0.steps[k].grad_norm == zero1.steps[k].grad_norm);
    }
    CATCH_REQUIRE(zero0.optimizer_state_bytes.size() == static_cast<size_t>(2 * dp));
    CATCH_REQUIRE(zero1.optimizer_state_bytes.size() == static_cast<size_t>(2 * dp));
    // One replica's moments per pipeline rank, for the bound below.
    auto single = o;
    single.dp = 1;
    single.zero_stage = 0;
    const train_result one = run_pipeline(single);
    CATCH_REQUIRE(one.optimizer_state_bytes.size() == 2);
    const long long bucket = static_cast<long long>(o.bucket_mb * (1 << 20) / 4);
    for (int r = 0; r < 2 * dp; ++r) {
      CATCH_INFO("dp " << dp << ", rank " << r);
      const long long z0 = zero0.optimizer_state_bytes[r], z1 = zero1.optimizer_state_bytes[r];
      const long long whole = one.optimizer_state_bytes[r % 2];
      CATCH_CHECK(z1 * dp == z0);  // ZeRO-1: 1/D of ZeRO-0's
      // ZeRO-0 holds the whole stage's moments, padded by less than one slice row per bucket.
      const long long buckets = (whole / 8 + bucket - 1) / bucket;
      CATCH_CHECK(z0 >= whole);
      CATCH_CHECK(z0 - whole < 2 * 4 * dp * buckets);
    }
  }
}

CATCH_TEST_CASE("a data-parallel run repeats bit for bit, and ZeRO-1 with one replica is plain training",
                "[actors][runtime][dp]") {
  const auto o = data_parallel("zbv", 2, 2, 1);
  CATCH_CHECK(bit_identical(run_pipeline(o), run_pipeline(o)));
  auto one = data_parallel("1f1b", 1, 1, 1);
  auto plain = one;
  plain.zero_stage = 0;
  CATCH_CHECK(bit_identical(run_pipeline(one), run_pipeline(plain)));
}
