// Built-in generators: the constraints they enforce, the shapes they produce, and the theory
// they must reproduce on unit costs (bubble ratios and peak activations).
#include <catch2/catch.hpp>

#include <sched.h>

#include <algorithm>
#include <cmath>
#include <random>

#include "core/number_text.hpp"
#include "core/schedule/plan_validator.hpp"
#include "core/schedule/schedule_registry.hpp"
#include "core/sim/simulator.hpp"

using namespace actorpipe;
using Catch::Contains;

namespace {
// F = 1, B = 2 (I = W = 1): the textbook setting.
sim_result run(const char* name, int P, int M, int V) {
  return simulate(make_schedule(name, {P, M, V}), cost_model::uniform(1, 2, 1, 1));
}
}  // namespace

CATCH_TEST_CASE("schedules reject requests they cannot serve, naming the values", "[schedule][generators]") {
  CATCH_CHECK_THROWS_WITH(make_schedule("1f1b", {4, 2, 1}),
                          "1f1b needs microbatches >= stages: got stages=4, microbatches=2, chunks=1");
  CATCH_CHECK_THROWS_WITH(make_schedule("1f1b", {4, 8, 2}), Contains("1f1b needs chunks == 1"));
  CATCH_CHECK_THROWS_WITH(make_schedule("zb-h1", {4, 3, 1}), Contains("zb-h1 needs microbatches >= stages"));
  CATCH_CHECK_THROWS_WITH(make_schedule("zb-h1", {4, 8, 2}), Contains("zb-h1 needs chunks == 1"));
  CATCH_CHECK_THROWS_WITH(make_schedule("interleaved", {4, 8, 1}), Contains("interleaved needs chunks >= 2"));
  CATCH_CHECK_THROWS_WITH(make_schedule("interleaved", {4, 6, 2}),
                          "interleaved needs microbatches to be a multiple of stages: got stages=4, microbatches=6, "
                          "chunks=2");
  CATCH_CHECK_THROWS_WITH(make_schedule("zbv", {4, 8, 1}), Contains("zbv needs chunks == 2"));
  CATCH_CHECK_THROWS_WITH(make_schedule("zbv", {4, 8, 3}), Contains("got stages=4, microbatches=8, chunks=3"));
  CATCH_CHECK_THROWS_WITH(make_schedule("dualpipev", {4, 7, 2}),
                          "dualpipev needs microbatches >= 2 * stages: got stages=4, microbatches=7, chunks=2");
  CATCH_CHECK_THROWS_WITH(make_schedule("dualpipev", {4, 8, 1}), Contains("dualpipev needs chunks == 2"));
  CATCH_CHECK_THROWS_WITH(make_schedule("gpipe", {0, 8, 1}), "stages must be >= 1: got stages=0");
  CATCH_CHECK_THROWS_WITH(make_schedule("gpipe", {2, 0, 1}), "microbatches must be >= 1: got microbatches=0");
  CATCH_CHECK_THROWS_WITH(make_schedule("gpipe", {2, 2, 0}), "chunks must be >= 1: got chunks=0");
  // A plan past 2^20 forward passes is refused before it is built (a typo would eat the
  // machine's memory); the count is taken in 64 bits, so no int overflow lets one through.
  CATCH_CHECK_THROWS_WITH(make_schedule("zbv", {1024, 1024, 2}),
                          "schedule 'zbv': stages x chunks x microbatches = 1024 x 2 x 1024 = 2097152 forward passes in "
                          "one step, more than a plan may hold (1048576)");
  CATCH_CHECK_THROWS_WITH(make_schedule("gpipe", {65536, 65536, 1}), Contains("= 4294967296 forward passes"));
  CATCH_CHECK_THROWS_WITH(make_schedule("gpipe", {1, 1048577, 1}), Contains("more than a plan may hold (1048576)"));
  CATCH_CHECK(make_schedule("gpipe", {1, 1048576, 1}).ranks[0].size() == 2 * 1048576);  // the limit itself is fine
}

CATCH_TEST_CASE("1f1b has the textbook shape", "[schedule][generators]") {
  plan p = make_schedule("1f1b", {4, 8, 1});
  CATCH_CHECK(format_plan(p) ==
              "0: F0.0 F0.1 F0.2 F0.3 B0.0 F0.4 B0.1 F0.5 B0.2 F0.6 B0.3 F0.7 B0.4 B0.5 B0.6 B0.7\n"
              "1: F1.0 F1.1 F1.2 B1.0 F1.3 B1.1 F1.4 B1.2 F1.5 B1.3 F1.6 B1.4 F1.7 B1.5 B1.6 B1.7\n"
              "2: F2.0 F2.1 B2.0 F2.2 B2.1 F2.3 B2.2 F2.4 B2.3 F2.5 B2.4 F2.6 B2.5 F2.7 B2.6 B2.7\n"
              "3: F3.0 B3.0 F3.1 B3.1 F3.2 B3.2 F3.3 B3.3 F3.4 B3.4 F3.5 B3.5 F3.6 B3.6 F3.7 B3.7\n");
}

CATCH_TEST_CASE("gpipe and 1f1b bubble is (P-1)/(M+P-1)", "[schedule][generators][theory]") {
  CATCH_CHECK(run("gpipe", 4, 8, 1).bubble_ratio == Approx(3.0 / 11).epsilon(1e-12));  // 27.27%
  CATCH_CHECK(run("1f1b", 4, 8, 1).bubble_ratio == Approx(3.0 / 11).epsilon(1e-12));
  for (int P : {1, 2, 3, 5, 8})
    for (int M : {P, P + 3, 4 * P}) {
      CATCH_CAPTURE(P, M);
      double expect = (P - 1.0) / (M + P - 1.0);
      CATCH_CHECK(run("gpipe", P, M, 1).bubble_ratio == Approx(expect).margin(1e-12));
      CATCH_CHECK(run("1f1b", P, M, 1).bubble_ratio == Approx(expect).margin(1e-12));
      CATCH_CHECK(run("1f1b", P, M, 1).makespan == Approx(3.0 * (M + P - 1)));
    }
}

CATCH_TEST_CASE("interleaved bubble is (P-1)/(V*M+P-1)", "[schedule][generators][theory]") {
  CATCH_CHECK(run("interleaved", 4, 8, 2).bubble_ratio == Approx(3.0 / 19).epsilon(1e-12));
  for (int P : {2, 3, 4})
    for (int V : {2, 3, 4})
      for (int M : {P, 2 * P, 4 * P}) {
        CATCH_CAPTURE(P, V, M);
        CATCH_CHECK(run("interleaved", P, M, V).bubble_ratio == Approx((P - 1.0) / (V * M + P - 1.0)).margin(1e-12));
        // And always below 1f1b's at the same P and M.
        CATCH_CHECK(run("interleaved", P, M, V).bubble_ratio < run("1f1b", P, M, 1).bubble_ratio);
      }
}

CATCH_TEST_CASE("peak activations: 1f1b rank r holds min(P - r, M), gpipe holds M", "[schedule][generators][theory]") {
  for (int P : {1, 2, 4, 7})
    for (int M : {P, P + 1, 3 * P}) {
      auto one = validate_plan(make_schedule("1f1b", {P, M, 1}));
      auto gp = validate_plan(make_schedule("gpipe", {P, M, 1}));
      for (int r = 0; r < P; ++r) {
        CATCH_CAPTURE(P, M, r);
        CATCH_CHECK(one.peak_activations[r] == std::min(P - r, M));
        CATCH_CHECK(gp.peak_activations[r] == M);
      }
    }
}

CATCH_TEST_CASE("zero bubble: zb-h1 meets the paper's bubble at 1F1B memory and zbv goes lower",
                "[schedule][generators][theory]") {
  // F = I = W = 1 (B = I + W = 2 for the non-split schedules).
  for (int P : {2, 3, 4, 6, 8})
    for (int M : {P, P + 1, 2 * P, 4 * P}) {
      CATCH_CAPTURE(P, M);
      auto one = run("1f1b", P, M, 1);
      auto zb = run("zb-h1", P, M, 1);
      auto zv = run("zbv", P, M, 2);
      // Qi et al.: 1F1B idles (P-1)(F+I+W) per rank, ZB-H1 (P-1)(F+I-W): a third here.
      CATCH_CHECK(zb.makespan == Approx(3.0 * M + (P - 1)));
      CATCH_CHECK(zb.bubble_ratio == Approx((P - 1.0) / (3.0 * M + P - 1)).margin(1e-12));
      CATCH_CHECK(zb.bubble_ratio < one.bubble_ratio);
      for (int r = 0; r < P; ++r) {
        CATCH_CHECK(zb.peak_activations[r] == one.peak_activations[r]);  // 1F1B memory
        CATCH_CHECK(zb.peak_pending_weight_grads[r] <= P);
      }
      if (P > 1) CATCH_CHECK(zv.bubble_ratio < zb.bubble_ratio);
      // zbv's stashes are half a stage each: 2P of them is 1F1B's rank-0 peak.
      for (int r = 0; r < P; ++r) CATCH_CHECK(zv.peak_activations[r] <= 2 * P);
    }
  // The paper's headline numbers at P=4, M=8.
  CATCH_CHECK(run("1f1b", 4, 8, 1).idle[0] == Approx(9.0));  // (P-1)(F+I+W)
  CATCH_CHECK(run("zb-h1", 4, 8, 1).idle[0] == Approx(3.0));  // (P-1)(F+I-W)
}

CATCH_TEST_CASE("dualpipev: zbv's bubble with a W backlog of rank + 1", "[schedule][generators][theory]") {
  for (int P : {1, 2, 3, 4, 6, 8})
    for (int M : {2 * P, 2 * P + 1, 4 * P}) {
      CATCH_CAPTURE(P, M);
      auto d = run("dualpipev", P, M, 2);
      // Each rank computes 2 chunks x M x (F + I + W) = 6M and idles only P - 1: the
      // (P-1)(F+I-W) of zero bubble, without the overlap of F and B a GPU adds.
      CATCH_CHECK(d.makespan == Approx(6.0 * M + P - 1));
      if (P > 1) CATCH_CHECK(d.bubble_ratio < run("1f1b", P, M, 1).bubble_ratio);
      for (int r = 0; r < P; ++r) {
        CATCH_CHECK(d.peak_activations[r] == 2 * P + 1);  // chunk-sized: P + 1/2 stages, as the paper's PP + 1
        CATCH_CHECK(d.peak_pending_weight_grads[r] == r + 1);
      }
    }
  plan p = make_schedule("dualpipev", {4, 8, 2});
  CATCH_CHECK(p.place.kind == "v-shape");
  // Full backwards in the steady state, split ones in the tail.
  CATCH_CHECK(p.ranks[0][2 * 3] == action{op_kind::forward, 0, 6});
  bool has_b = false, has_i = false;
  for (auto& a : p.ranks[2]) {
    has_b = has_b || a.op == op_kind::backward;
    has_i = has_i || a.op == op_kind::input_grad;
  }
  CATCH_CHECK(has_b);
  CATCH_CHECK(has_i);
}

CATCH_TEST_CASE("zbv uses the V placement and splits every backward", "[schedule][generators]") {
  plan p = make_schedule("zbv", {4, 8, 2});
  CATCH_CHECK(p.place.kind == "v-shape");
  CATCH_CHECK(p.place.rank_of == std::vector<int>{0, 1, 2, 3, 3, 2, 1, 0});
  for (auto& rank : p.ranks)
    for (auto& a : rank) CATCH_CHECK(a.op != op_kind::backward);
  plan h = make_schedule("zb-h1", {4, 8, 1});
  CATCH_CHECK(h.place.kind == "loop");
  CATCH_CHECK(h.uses_split_backward());
}

CATCH_TEST_CASE("every generated plan validates across a sweep of (P, M, V)", "[schedule][generators][sweep]") {
  int checked = 0;
  for (int P = 1; P <= 8; ++P)
    for (int M = 1; M <= 24; ++M)
      for (int V = 1; V <= 4; ++V)
        for (const char* name : {"gpipe", "1f1b", "interleaved", "zb-h1", "zbv", "dualpipev"}) {
          plan p;
          try {
            p = make_schedule(name, {P, M, V});  // make_schedule validates: a bad plan throws
          } catch (const std::invalid_argument& e) {
            std::string why = e.what();
            // Only the documented constraints may refuse a request.
            CATCH_CHECK(why.rfind(std::string(name) + " needs ", 0) == 0);
            continue;
          }
          auto rep = validate_plan(p);
          CATCH_REQUIRE(rep.ok());
          CATCH_CHECK(p.num_ranks() == P);
          CATCH_CHECK(p.chunks() == V);
          CATCH_CHECK(p.microbatches == M);
          size_t total = 0;
          for (auto& r : p.ranks) total += r.size();
          size_t weight_grads = 0;
          for (auto& r : p.ranks)
            for (auto& a : r) weight_grads += a.op == op_kind::weight_grad;
          CATCH_CHECK(total == static_cast<size_t>(P * V * M * 2) + weight_grads);
          ++checked;
        }
  CATCH_CHECK(checked > 1000);
}

// Zero-bubble plans built for given costs (the measured ones in training, --cost in simulate).
CATCH_TEST_CASE("zb-h1 and zbv built for real costs: valid, same memory limits, never slower", "[schedule][generators][costs]") {
  // Costs as measured on the GPT of the speed issue (ms per virtual stage, zbv on 2 ranks).
  auto measured = std::make_shared<const cost_model>(cost_model::uniform(25.2, 46.1, 27.5, 18.6));
  const plan unit = make_schedule("zbv", {2, 16, 2});
  const plan built = make_schedule("zbv", {2, 16, 2, measured});
  const double unit_bubble = simulate(unit, *measured).bubble_ratio;
  const double built_bubble = simulate(built, *measured).bubble_ratio;
  CATCH_CHECK(unit_bubble > 0.05);
  CATCH_CHECK(built_bubble < 0.02);

  // Null costs are unit costs: the plan of the paper's setting, unchanged.
  CATCH_CHECK(format_plan(make_schedule("zb-h1", {4, 8, 1, nullptr})) == format_plan(make_schedule("zb-h1", {4, 8, 1})));

  // A sweep of shapes and cost ratios (W from a fifth of F to F, I from F to 1.5 F, with and
  // without send latency): every plan validates, peaks no higher than the unit-cost plan's
  // (activations and pending W), and is never slower than it on those costs.
  int checked = 0, faster = 0;
  for (const char* name : {"zb-h1", "zbv"}) {
    const int V = std::string(name) == "zbv" ? 2 : 1;
    for (int P : {2, 3, 4, 6}) {
      for (int M : {P, 2 * P, 4 * P}) {
        const plan u = make_schedule(name, {P, M, V});
        const validation_report ur = validate_plan(u);
        for (double w : {0.2, 0.5, 0.7, 1.0})
          for (double i : {1.0, 1.2, 1.5})
            for (double latency : {0.0, 0.3}) {
              CATCH_INFO(name << " P=" << P << " M=" << M << " F=1 I=" << i << " W=" << w << " latency " << latency);
              auto c = std::make_shared<const cost_model>(cost_model::uniform(1, i + w, i, w, latency));
              const plan b = make_schedule(name, {P, M, V, c});  // validates
              const validation_report br = validate_plan(b);
              CATCH_REQUIRE(br.ok());
              for (int r = 0; r < P; ++r) {
                CATCH_CHECK(br.peak_activations[r] <= ur.peak_activations[r]);
                CATCH_CHECK(br.peak_pending_weight_grads[r] <= ur.peak_pending_weight_grads[r]);
              }
              const double mb = simulate(b, *c).makespan, mu = simulate(u, *c).makespan;
              CATCH_CHECK(mb <= mu * (1 + 1e-12));
              faster += mb < mu * (1 - 1e-9);
              ++checked;
            }
      }
    }
  }
  CATCH_CHECK(checked == 2 * 4 * 3 * 4 * 3 * 2);
  CATCH_CHECK(faster > checked / 4);  // real costs change the best order often
}

// A plan of 4096 actions or more times its candidate plans on every CPU the process may use
// (a rebuild at 32 x 256 simulates hundreds); the plan chosen is the one a single CPU chooses.
CATCH_TEST_CASE("zbv built for costs on several CPUs is the plan one CPU builds", "[schedule][generators][costs]") {
  std::mt19937 rng(11);
  std::uniform_real_distribution<double> spread(0.9, 1.1);
  cost_model c;
  c.forward.clear(), c.input_grad.clear(), c.weight_grad.clear(), c.backward.clear();
  for (int v = 0; v < 16; ++v) {
    c.forward.push_back(24 * spread(rng));
    c.input_grad.push_back(26 * spread(rng));
    c.weight_grad.push_back(17 * spread(rng));
    c.backward.push_back(c.input_grad.back() + c.weight_grad.back());
  }
  const auto costs = std::make_shared<const cost_model>(c);
  const schedule_request request{8, 96, 2, costs};  // 16 x 96 x 3 = 4608 actions
  cpu_set_t allowed;
  CATCH_REQUIRE(sched_getaffinity(0, sizeof allowed, &allowed) == 0);
  if (CPU_COUNT(&allowed) < 2) CATCH_WARN("one CPU to run on: both plans below are built on one");
  const plan on_all = make_schedule("zbv", request);
  int first = 0;
  while (!CPU_ISSET(first, &allowed)) ++first;
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(first, &one);
  CATCH_REQUIRE(sched_setaffinity(0, sizeof one, &one) == 0);
  const plan on_one = make_schedule("zbv", request);
  CATCH_REQUIRE(sched_setaffinity(0, sizeof allowed, &allowed) == 0);
  CATCH_CHECK(format_plan(on_all) == format_plan(on_one));
  CATCH_CHECK(format_plan(on_all) == format_plan(make_schedule("zbv", request)));  // and again
  // The costs chose another plan than the unit-cost one, and a shorter one on them.
  const plan unit = make_schedule("zbv", {8, 96, 2});
  CATCH_CHECK(format_plan(on_all) != format_plan(unit));
  CATCH_CHECK(simulate(on_all, c).makespan < simulate(unit, c).makespan);
}

// Costs that are no times are refused before the list scheduler runs on them (a NaN time never
// leaves its queue of moments).
CATCH_TEST_CASE("zb-h1 and zbv refuse costs that are not finite numbers >= 0", "[schedule][generators][costs]") {
  for (const double bad : {std::nan(""), HUGE_VAL, -1.0}) {
    CATCH_CAPTURE(bad);
    auto c = std::make_shared<cost_model>(cost_model::uniform(1, 2, 1, 1));
    c->weight_grad[0] = bad;
    CATCH_CHECK_THROWS_WITH(make_schedule("zbv", {2, 8, 2, c}),
                            Catch::Contains("weight_grad cost " + number_text(bad) + " must be a finite number >= 0"));
    CATCH_CHECK_THROWS_WITH(make_schedule("zb-h1", {4, 128, 1, c}),
                            Catch::Contains("weight_grad cost " + number_text(bad) + " must be a finite number >= 0"));
  }
}

CATCH_TEST_CASE("zbv on measured costs with a slower last stage: never stuck with the unit-cost plan",
                "[schedule][generators][costs]") {
  // Median costs of one run's first step (ms; the GPT of the speed issue, zbv on 2 ranks): the
  // last virtual stage carries the LM head. Every candidate used to stall within the unit-cost
  // plan's memory peaks here (rank 0's slots all held virtual stage 0's activations, so stage
  // 3's F, whose I frees one, could not run), and the plan stayed the unit-cost one: 8.0%.
  cost_model c;
  c.forward = {24.244, 24.095, 24.140, 25.216};
  c.input_grad = {25.838, 26.107, 26.194, 27.382};
  c.weight_grad = {18.959, 19.049, 19.060, 18.768};
  c.backward.clear();
  for (int v = 0; v < 4; ++v) c.backward.push_back(c.input_grad[v] + c.weight_grad[v]);
  const plan unit = make_schedule("zbv", {2, 16, 2});
  const plan built = make_schedule("zbv", {2, 16, 2, std::make_shared<const cost_model>(c)});
  CATCH_CHECK(simulate(unit, c).bubble_ratio > 0.07);
  CATCH_CHECK(simulate(built, c).bubble_ratio < 0.01);
  const validation_report ur = validate_plan(unit), br = validate_plan(built);
  CATCH_REQUIRE(br.ok());
  for (int r = 0; r < 2; ++r) {
    CATCH_CHECK(br.peak_activations[r] <= ur.peak_activations[r]);
    CATCH_CHECK(br.peak_pending_weight_grads[r] <= ur.peak_pending_weight_grads[r]);
  }

  // Seeded per-stage noise of +-3% on each op, the last stage 4% slower: every plan built on
  // such costs gets within 2% of the busiest rank's compute.
  std::mt19937 rng(7);
  std::uniform_real_distribution<double> noise(-0.03, 0.03);
  double worst = 0;
  for (int trial = 0; trial < 40; ++trial) {
    cost_model n;
    n.forward.assign(4, 24), n.input_grad.assign(4, 26), n.weight_grad.assign(4, 19), n.backward.assign(4, 45);
    for (int v = 0; v < 4; ++v) {
      const double head = v == 3 ? 1.04 : 1.0;
      n.forward[v] *= head * (1 + noise(rng)), n.input_grad[v] *= head * (1 + noise(rng));
      n.weight_grad[v] *= head * (1 + noise(rng));
      n.backward[v] = n.input_grad[v] + n.weight_grad[v];
    }
    const sim_result r = simulate(make_schedule("zbv", {2, 16, 2, std::make_shared<const cost_model>(n)}), n);
    worst = std::max(worst, r.makespan / r.ideal_time - 1);
  }
  CATCH_INFO("worst makespan over the busiest rank's compute - 1: " << worst);
  CATCH_CHECK(worst < 0.02);
}
