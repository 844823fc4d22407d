// Tests for core/partition: the even count split (Colossal-AI's middle-gets-the-remainder
// rule) and the exact min-max cost split, checked against brute force and a DP.
#include "core/partition.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <functional>
#include <limits>
#include <numeric>
#include <random>
#include <stdexcept>
#include <vector>

#include <catch2/catch.hpp>

using namespace actorpipe;

namespace {

std::vector<int> counts_of(const std::vector<layer_range>& ranges) {
  std::vector<int> out;
  for (auto& r : ranges) out.push_back(r.size());
  return out;
}

// Contiguous, non-empty, covering [0, n).
void check_valid_split(const std::vector<layer_range>& ranges, int n, int parts) {
  CATCH_REQUIRE(static_cast<int>(ranges.size()) == parts);
  CATCH_CHECK(ranges.front().start == 0);
  CATCH_CHECK(ranges.back().end == n);
  for (std::size_t i = 0; i < ranges.size(); ++i) {
    CATCH_CHECK(ranges[i].end > ranges[i].start);
    if (i > 0) CATCH_CHECK(ranges[i].start == ranges[i - 1].end);
  }
}

// Smallest heaviest part over every split of n layers into `parts` parts.
double brute_force_optimum(const layer_costs& costs, int parts) {
  int n = static_cast<int>(costs.per_layer.size());
  double best = std::numeric_limits<double>::infinity();
  std::vector<layer_range> current;
  std::function<void(int)> go = [&](int start) {
    int placed = static_cast<int>(current.size());
    if (placed == parts - 1) {
      current.push_back({start, n});
      best = std::min(best, max_part_cost(costs, current));
      current.pop_back();
      return;
    }
    int left_after = parts - placed - 1;  // each needs a layer
    for (int end = start + 1; end <= n - left_after; ++end) {
      current.push_back({start, end});
      go(end);
      current.pop_back();
    }
  };
  go(0);
  return best;
}

// O(n^2 * parts) DP over the same part_cost values: an independent optimum for mid-sized n.
double dp_optimum(const layer_costs& costs, int parts) {
  int n = static_cast<int>(costs.per_layer.size());
  const double inf = std::numeric_limits<double>::infinity();
  // best[k][e]: smallest heaviest part splitting [0, e) into k parts (the k-th not last).
  std::vector<std::vector<double>> best(parts + 1, std::vector<double>(n + 1, inf));
  best[0][0] = 0;
  for (int k = 1; k <= parts; ++k)
    for (int e = k; e <= n; ++e)
      for (int s = k - 1; s < e; ++s) {
        if (best[k - 1][s] == inf) continue;
        double c = part_cost(costs, {s, e}, s == 0, e == n && k == parts);
        best[k][e] = std::min(best[k][e], std::max(best[k - 1][s], c));
      }
  return best[parts][n];
}

layer_costs random_costs(std::mt19937& rng, int n) {
  layer_costs c;
  std::uniform_int_distribution<int> style(0, 3);
  std::uniform_real_distribution<double> real(0.0, 10.0);
  std::uniform_int_distribution<int> small(0, 4);
  int s = style(rng);
  for (int i = 0; i < n; ++i) {
    switch (s) {
      case 0: c.per_layer.push_back(real(rng)); break;
      case 1: c.per_layer.push_back(small(rng)); break;          // integers: many ties
      case 2: c.per_layer.push_back(small(rng) == 0 ? 0.0 : real(rng)); break;  // some zero layers
      default: c.per_layer.push_back(1.0); break;                // uniform
    }
  }
  if (small(rng) > 1) c.first_stage_extra = s == 1 ? small(rng) * 2 : real(rng);
  if (small(rng) > 1) c.last_stage_extra = s == 1 ? small(rng) * 2 : real(rng);
  return c;
}

}  // namespace

CATCH_TEST_CASE("distribute_layers gives the remainder to the middle virtual stages", "[partition]") {
  // K parts, q = L / K, rem = L % K; parts K/2 - rem/2 .. +rem-1 get one more.
  CATCH_CHECK(distribute_layers(10, 4) == std::vector<int>{2, 3, 3, 2});      // rem 2 from 1
  CATCH_CHECK(distribute_layers(8, 4) == std::vector<int>{2, 2, 2, 2});       // even
  CATCH_CHECK(distribute_layers(7, 4) == std::vector<int>{1, 2, 2, 2});       // rem 3 from 1
  CATCH_CHECK(distribute_layers(13, 5) == std::vector<int>{2, 3, 3, 3, 2});   // rem 3 from 1
  CATCH_CHECK(distribute_layers(9, 2, 2) == std::vector<int>{2, 2, 3, 2});    // K 4, rem 1 at 2
  CATCH_CHECK(distribute_layers(11, 3, 2) == std::vector<int>{1, 2, 2, 2, 2, 2});  // K 6, rem 5 from 1
  CATCH_CHECK(distribute_layers(32, 3) == std::vector<int>{11, 11, 10});      // K 3, rem 2 from 0
  CATCH_CHECK(distribute_layers(4, 4) == std::vector<int>{1, 1, 1, 1});
  CATCH_CHECK(distribute_layers(5, 1) == std::vector<int>{5});
  CATCH_CHECK(distribute_layers(24, 4, 2) == std::vector<int>{3, 3, 3, 3, 3, 3, 3, 3});
}

CATCH_TEST_CASE("distribute_layers sums to L, differs by at most one, extras are a centred block", "[partition]") {
  for (int stages = 1; stages <= 6; ++stages)
    for (int chunks = 1; chunks <= 3; ++chunks) {
      int k = stages * chunks;
      for (int layers = k; layers <= 60; ++layers) {
        auto counts = distribute_layers(layers, stages, chunks);
        CATCH_REQUIRE(static_cast<int>(counts.size()) == k);
        CATCH_CHECK(std::accumulate(counts.begin(), counts.end(), 0) == layers);
        auto [lo, hi] = std::minmax_element(counts.begin(), counts.end());
        CATCH_CHECK(*hi - *lo <= 1);
        CATCH_CHECK(*lo >= 1);
        int rem = layers % k;
        if (rem == 0) continue;
        // The heavier parts form one block with (nearly) as many lighter parts on each side.
        auto first = std::find(counts.begin(), counts.end(), *hi) - counts.begin();
        auto count_hi = std::count(counts.begin(), counts.end(), *hi);
        CATCH_CHECK(count_hi == rem);
        for (long i = first; i < first + count_hi; ++i) CATCH_CHECK(counts[i] == *hi);
        long left = first, right = k - first - count_hi;
        CATCH_CHECK(std::abs(left - right) <= 1);
      }
    }
}

CATCH_TEST_CASE("distribute_layers rejects bad arguments naming the values", "[partition]") {
  CATCH_CHECK_THROWS_AS(distribute_layers(8, 0), std::invalid_argument);
  CATCH_CHECK_THROWS_WITH(distribute_layers(8, 0), Catch::Contains("stages=0"));
  CATCH_CHECK_THROWS_WITH(distribute_layers(8, 2, 0), Catch::Contains("chunks=0"));
  CATCH_CHECK_THROWS_WITH(distribute_layers(8, -1, 2), Catch::Contains("stages=-1"));
  CATCH_CHECK_THROWS_WITH(distribute_layers(3, 4),
                          Catch::Contains("num_layers=3") && Catch::Contains("stages*chunks=4"));
  CATCH_CHECK_THROWS_WITH(distribute_layers(7, 2, 4),
                          Catch::Contains("num_layers=7") && Catch::Contains("stages*chunks=8"));
  CATCH_CHECK_NOTHROW(distribute_layers(8, 2, 4));
}

CATCH_TEST_CASE("layer_ranges are contiguous cumulative ranges", "[partition]") {
  auto ranges = layer_ranges({2, 3, 3, 2});
  CATCH_REQUIRE(ranges.size() == 4);
  CATCH_CHECK(ranges[0] == layer_range{0, 2});
  CATCH_CHECK(ranges[1] == layer_range{2, 5});
  CATCH_CHECK(ranges[2] == layer_range{5, 8});
  CATCH_CHECK(ranges[3] == layer_range{8, 10});
  check_valid_split(layer_ranges(distribute_layers(37, 3, 2)), 37, 6);
  CATCH_CHECK(layer_ranges({}).empty());
  CATCH_CHECK_THROWS_WITH(layer_ranges({2, 0, 1}), Catch::Contains("counts[1]=0"));
}

CATCH_TEST_CASE("part_cost adds the extras the flags ask for", "[partition]") {
  layer_costs c{{1, 2, 3, 4}, 10, 100};
  CATCH_CHECK(part_cost(c, {0, 4}, false, false) == 10);
  CATCH_CHECK(part_cost(c, {0, 2}, true, false) == 13);
  CATCH_CHECK(part_cost(c, {2, 4}, false, true) == 107);
  CATCH_CHECK(part_cost(c, {0, 4}, true, true) == 120);
  CATCH_CHECK(max_part_cost(c, {{0, 2}, {2, 3}, {3, 4}}) == 104);
  CATCH_CHECK_THROWS_WITH(part_cost(c, {2, 5}, false, false), Catch::Contains("[2, 5)"));
}

CATCH_TEST_CASE("partition_by_cost matches brute force on small random inputs", "[partition]") {
  std::mt19937 rng(20240611);
  std::uniform_int_distribution<int> size(1, 10);
  for (int trial = 0; trial < 1500; ++trial) {
    int n = size(rng);
    int parts = std::uniform_int_distribution<int>(1, n)(rng);
    layer_costs costs = random_costs(rng, n);
    auto split = partition_by_cost(costs, parts);
    CATCH_INFO("trial " << trial << ": n=" << n << " parts=" << parts);
    check_valid_split(split, n, parts);
    CATCH_CHECK(max_part_cost(costs, split) == brute_force_optimum(costs, parts));
    CATCH_CHECK(partition_by_cost(costs, parts) == split);  // deterministic
  }
}

CATCH_TEST_CASE("partition_by_cost matches a DP on mid-sized random inputs", "[partition]") {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 12; ++trial) {
    int n = std::uniform_int_distribution<int>(20, 70)(rng);
    int parts = std::uniform_int_distribution<int>(2, 12)(rng);
    layer_costs costs = random_costs(rng, n);
    auto split = partition_by_cost(costs, parts);
    CATCH_INFO("trial " << trial << ": n=" << n << " parts=" << parts);
    check_valid_split(split, n, parts);
    CATCH_CHECK(max_part_cost(costs, split) == dp_optimum(costs, parts));
  }
}

CATCH_TEST_CASE("partition_by_cost tie-break balances parts deterministically", "[partition]") {
  layer_costs uniform{std::vector<double>(8, 1.0), 0, 0};
  CATCH_CHECK(counts_of(partition_by_cost(uniform, 4)) == std::vector<int>{2, 2, 2, 2});
  CATCH_CHECK(counts_of(partition_by_cost(uniform, 1)) == std::vector<int>{8});
  CATCH_CHECK(counts_of(partition_by_cost(uniform, 8)) == std::vector<int>{1, 1, 1, 1, 1, 1, 1, 1});
  // Optimum 3 (one heavy layer), many splits reach it: each part takes the cost closest to an
  // even share of what remains, ties to the shorter part.
  layer_costs spike{{1, 1, 3, 1, 1, 1}, 0, 0};
  auto split = partition_by_cost(spike, 3);
  CATCH_CHECK(max_part_cost(spike, split) == 3);
  CATCH_CHECK(counts_of(split) == std::vector<int>{2, 1, 3});
  // All zero costs: every split is optimal; the shorter-part tie-break gives singletons first.
  layer_costs zeros{std::vector<double>(5, 0.0), 0, 0};
  CATCH_CHECK(counts_of(partition_by_cost(zeros, 3)) == std::vector<int>{1, 1, 3});
}

CATCH_TEST_CASE("partition_by_cost moves layers away from stages with extras", "[partition]") {
  layer_costs plain{std::vector<double>(8, 1.0), 0, 0};
  layer_costs ends = plain;
  ends.first_stage_extra = 2;
  ends.last_stage_extra = 2;
  auto split = partition_by_cost(ends, 4);
  CATCH_CHECK(counts_of(split) == std::vector<int>{1, 3, 3, 1});
  CATCH_CHECK(max_part_cost(ends, split) == 3);

  layer_costs head_only = plain;
  head_only.last_stage_extra = 4;  // the last part holds the head plus as few layers as it can
  auto h = counts_of(partition_by_cost(head_only, 3));
  CATCH_CHECK(h.back() < h.front());
  CATCH_CHECK(std::accumulate(h.begin(), h.end(), 0) == 8);

  layer_costs embedding_only = plain;
  embedding_only.first_stage_extra = 4;
  auto e = counts_of(partition_by_cost(embedding_only, 3));
  CATCH_CHECK(e.front() < e.back());

  // From parameter counts: 12 equal layers of 100, embedding and head 250 each. Optimum 450:
  // ends take 2 layers (250 + 200), the middle 4 each (400).
  layer_costs params = costs_from_parameter_counts(std::vector<long long>(12, 100), 250, 250);
  CATCH_CHECK(params.first_stage_extra == 250);
  CATCH_CHECK(params.last_stage_extra == 250);
  auto p = partition_by_cost(params, 4);
  CATCH_CHECK(counts_of(p) == std::vector<int>{2, 4, 4, 2});
  CATCH_CHECK(max_part_cost(params, p) == 450);
  CATCH_CHECK(max_part_cost(params, p) == brute_force_optimum(params, 4));
}

CATCH_TEST_CASE("partition_by_cost rejects bad input naming the value", "[partition]") {
  layer_costs c{{1, 2, 3}, 0, 0};
  CATCH_CHECK_THROWS_WITH(partition_by_cost(c, 0), Catch::Contains("parts=0"));
  CATCH_CHECK_THROWS_WITH(partition_by_cost(c, 4), Catch::Contains("3 layers") && Catch::Contains("parts=4"));
  layer_costs negative{{1, 2, -1.5, 3}, 0, 0};
  CATCH_CHECK_THROWS_WITH(partition_by_cost(negative, 2), Catch::Contains("per_layer[2]=-1.5"));
  layer_costs nan{{1, std::nan(""), 3}, 0, 0};
  CATCH_CHECK_THROWS_WITH(partition_by_cost(nan, 2), Catch::Contains("per_layer[1]=nan"));
  layer_costs inf{{1, 2, std::numeric_limits<double>::infinity()}, 0, 0};
  CATCH_CHECK_THROWS_WITH(partition_by_cost(inf, 2), Catch::Contains("per_layer[2]=inf"));
  layer_costs bad_extra{{1, 2, 3}, -1, 0};
  CATCH_CHECK_THROWS_WITH(partition_by_cost(bad_extra, 2), Catch::Contains("first_stage_extra=-1"));
  bad_extra = {{1, 2, 3}, 0, std::numeric_limits<double>::infinity()};
  CATCH_CHECK_THROWS_WITH(partition_by_cost(bad_extra, 2), Catch::Contains("last_stage_extra=inf"));
  CATCH_CHECK_THROWS_WITH(costs_from_parameter_counts({10, -3}, 0, 0), Catch::Contains("params[1]=-3"));
  CATCH_CHECK_THROWS_WITH(costs_from_parameter_counts({10}, -1, 0), Catch::Contains("embedding_params=-1"));
}

CATCH_TEST_CASE("partition_by_cost is fast for thousands of layers", "[partition]") {
  std::mt19937 rng(99);
  std::uniform_real_distribution<double> real(0.5, 2.0);
  layer_costs costs;
  for (int i = 0; i < 4000; ++i) costs.per_layer.push_back(real(rng));
  costs.first_stage_extra = 50;
  costs.last_stage_extra = 80;
  auto t0 = std::chrono::steady_clock::now();
  auto split = partition_by_cost(costs, 64);
  auto ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  check_valid_split(split, 4000, 64);
  // The optimum is at least the average and at most average + the heaviest single item.
  double total = part_cost(costs, {0, 4000}, true, true);
  double worst = max_part_cost(costs, split);
  CATCH_CHECK(worst >= total / 64);
  CATCH_CHECK(worst <= total / 64 + 80 + 10);
  CATCH_CHECK(ms < 500);  // a bound on the algorithm (a cubic one takes minutes), with room for a loaded machine
  auto big = partition_by_cost(costs, 2000);
  check_valid_split(big, 4000, 2000);
}

// ---- partition methods (partition_layers) ----

namespace {
std::vector<std::string> gpt_names(int blocks) {
  std::vector<std::string> n{"embed"};
  for (int i = 0; i < blocks; ++i) n.push_back("blocks." + std::to_string(i));
  n.push_back("ln_f");
  n.push_back("lm_head");
  return n;
}
std::vector<int> sizes(const std::vector<actorpipe::layer_range>& parts) {
  std::vector<int> out;
  for (auto& p : parts) out.push_back(p.size());
  return out;
}
}  // namespace

CATCH_TEST_CASE("partition_layers: uniform counts every layer, remainder to the middle", "[partition]") {
  using actorpipe::partition_layers;
  const auto names = gpt_names(8);  // 11 layers
  CATCH_CHECK(sizes(partition_layers("uniform", names, 2, 1)) == std::vector<int>{5, 6});
  CATCH_CHECK(sizes(partition_layers("uniform", names, 2, 2)) == std::vector<int>{2, 3, 3, 3});
  CATCH_CHECK(partition_layers("uniform", names, 1, 1) == std::vector<actorpipe::layer_range>{{0, 11}});
}

CATCH_TEST_CASE("partition_layers: type:REGEX spreads the matching layers, others ride along", "[partition]") {
  using actorpipe::partition_layers;
  const auto names = gpt_names(8);
  // The GPT's default: 4 blocks each, the embedding with the first, ln_f + head with the last.
  CATCH_CHECK(partition_layers("type:^blocks\\.", names, 2, 1) ==
              std::vector<actorpipe::layer_range>{{0, 5}, {5, 11}});
  // As distribute_layers on the blocks: 9 blocks over 4 -> 2, 2, 3, 2.
  const auto nine = gpt_names(9);
  CATCH_CHECK(sizes(partition_layers("type:blocks", nine, 2, 2)) == std::vector<int>{3, 2, 3, 4});
  // A layer between matches goes with the match before it.
  const std::vector<std::string> mixed{"conv0", "pool", "conv1", "pool2", "conv2", "conv3", "fc"};
  CATCH_CHECK(partition_layers("type:conv", mixed, 2, 1) == std::vector<actorpipe::layer_range>{{0, 4}, {4, 7}});
  CATCH_CHECK_THROWS_WITH(partition_layers("type:attn", names, 2, 1),
                          Catch::Contains("--partition 'type:attn' matches no layer name") && Catch::Contains("blocks.0"));
  CATCH_CHECK_THROWS_WITH(partition_layers("type:ln_f", names, 2, 1),
                          Catch::Contains("matches 1 layer, fewer than the stages*chunks=2"));
  CATCH_CHECK_THROWS_WITH(partition_layers("type:(", names, 2, 1), Catch::Contains("not a valid regular expression"));
  CATCH_CHECK_THROWS_WITH(partition_layers("type:", names, 2, 1), Catch::Contains("needs a regular expression"));
  // std::regex compiles by recursion: 30,000 nested groups overflowed the stack (SIGSEGV).
  const std::string deep = "type:" + std::string(30000, '(') + "b" + std::string(30000, ')');
  CATCH_CHECK_THROWS_WITH(partition_layers(deep, names, 2, 1),
                          "--partition type:REGEX: the expression has 60001 characters, more than the 1000 allowed");
  CATCH_CHECK(partition_layers("type:" + std::string(300, '(') + "^blocks" + std::string(300, ')'), names, 2, 1) ==
              std::vector<actorpipe::layer_range>{{0, 5}, {5, 11}});
}

CATCH_TEST_CASE("partition_layers: parameters and profile balance their per-layer numbers", "[partition]") {
  using actorpipe::partition_layers;
  const std::vector<std::string> names{"a", "b", "c", "d", "e"};
  auto w = [](std::vector<double> v) { return [v] { return v; }; };
  CATCH_CHECK(sizes(partition_layers("parameters", names, 2, 1, w({100, 1, 1, 1, 100}))) == std::vector<int>{2, 3});
  CATCH_CHECK(sizes(partition_layers("parameters", names, 2, 1, w({300, 1, 1, 1, 100}))) == std::vector<int>{1, 4});
  CATCH_CHECK(sizes(partition_layers("profile", names, 2, 1, {}, w({1, 1, 1, 1, 4}))) == std::vector<int>{4, 1});
  bool called = false;
  partition_layers("uniform", names, 2, 1, [&] { called = true; return std::vector<double>(5, 1.0); });
  CATCH_CHECK_FALSE(called);  // only the methods that use them measure
  CATCH_CHECK_THROWS_WITH(partition_layers("parameters", names, 2, 1, w({1, 2})), Catch::Contains("2 per-layer values for 5 layers"));
  CATCH_CHECK_THROWS_WITH(partition_layers("profile", names, 2, 1, {}, w({1, 1, -1, 1, 1})),
                          Catch::Contains("--partition profile") && Catch::Contains("per_layer[2]=-1"));
}

CATCH_TEST_CASE("partition_layers: counts, and one clear error per bad input", "[partition]") {
  using actorpipe::partition_layers;
  const std::vector<std::string> names{"a", "b", "c", "d", "e"};
  CATCH_CHECK(sizes(partition_layers("counts:1,4", names, 2, 1)) == std::vector<int>{1, 4});
  CATCH_CHECK_THROWS_WITH(partition_layers("counts:1,3", names, 2, 1),
                          Catch::Contains("needs stages*chunks=2 counts summing to the model's 5 layers") &&
                              Catch::Contains("summing to 4"));
  CATCH_CHECK_THROWS_WITH(partition_layers("counts:1,x", names, 2, 1), Catch::Contains("'x' is not a layer count"));
  CATCH_CHECK_THROWS_WITH(partition_layers("counts:0,5", names, 2, 1), Catch::Contains("'0' is not a layer count"));
  // Decimal digits as written ("01" is 1); no blanks or signs; a count past any model's named as such.
  CATCH_CHECK(sizes(partition_layers("counts:01,4", names, 2, 1)) == std::vector<int>{1, 4});
  for (const char* loose : {"counts: 1,4", "counts:+1,4"})
    CATCH_CHECK_THROWS_WITH(partition_layers(loose, names, 2, 1), Catch::Contains("is not a layer count (decimal digits, >= 1)"));
  CATCH_CHECK_THROWS_WITH(partition_layers("counts:4294967297,4", names, 2, 1),
                          Catch::Contains(": 4294967297 layers is more than any model has"));
  CATCH_CHECK_THROWS_WITH(partition_layers("type:^a$", names, 2, 1), Catch::Contains("matches 1 layer, fewer than"));
  CATCH_CHECK_THROWS_WITH(partition_layers("balanced", names, 2, 1),
                          Catch::Contains("--partition 'balanced' is not a partition method") && Catch::Contains("type:REGEX"));
  CATCH_CHECK_THROWS_WITH(partition_layers("uniform", {}, 2, 1), Catch::Contains("the model has no layers"));
  CATCH_CHECK_THROWS_WITH(partition_layers("uniform", names, 3, 2),
                          Catch::Contains("5 layers cannot be split over stages*chunks=6 virtual stages"));
  CATCH_CHECK(actorpipe::describe_partition(partition_layers("counts:1,4", names, 2, 1), names) ==
              "0: a (1 layer) | 1: b .. e (4 layers)");
}
