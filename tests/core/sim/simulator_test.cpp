// Simulator: exact timelines on small plans, latency, per-stage costs, and the --cost parser.
#include <catch2/catch.hpp>
#include <cmath>

#include "core/number_text.hpp"
#include "core/schedule/policy_registry.hpp"
#include "core/schedule/schedule_registry.hpp"
#include "core/sim/policy_simulator.hpp"
#include "core/sim/simulator.hpp"

using namespace actorpipe;
using Catch::Contains;

CATCH_TEST_CASE("a two-stage plan has the timeline worked out by hand", "[sim]") {
  plan p = parse_plan("0: F0.0 F0.1 B0.0 B0.1\n1: F1.0 B1.0 F1.1 B1.1\n", "hand");
  // F=1, B=3.
  sim_result r = simulate(p, cost_model::uniform(1, 3, 1, 2));
  // rank0: F0.0 [0,1] F0.1 [1,2]; rank1: F1.0 [1,2] B1.0 [2,5] F1.1 [5,6] B1.1 [6,9];
  // rank0: B0.0 [5,8] B0.1 [9,12].
  CATCH_REQUIRE(r.events.size() == 8);
  auto find = [&](const char* a) {
    for (auto& e : r.events)
      if (to_string(e.act) == a) return e;
    CATCH_FAIL("no event " << a);
    return r.events[0];
  };
  CATCH_CHECK(find("B1.0").start == 2);
  CATCH_CHECK(find("F1.1").start == 5);
  CATCH_CHECK(find("B0.0").start == 5);
  CATCH_CHECK(find("B0.1").start == 9);
  CATCH_CHECK(find("B0.1").end == 12);
  CATCH_CHECK(r.makespan == 12);
  CATCH_CHECK(r.busy == std::vector<double>{8, 8});
  CATCH_CHECK(r.idle == std::vector<double>{4, 4});
  CATCH_CHECK(r.ideal_time == 8);
  CATCH_CHECK(r.bubble_ratio == Approx(1 - 16.0 / 24));
  CATCH_CHECK(r.peak_activations == std::vector<int>{2, 1});
}

CATCH_TEST_CASE("a B that sends its input gradient after its I part, worked out by hand", "[sim]") {
  plan p = parse_plan("0: F0.0 F0.1 B0.0 B0.1\n1: F1.0 B1.0 F1.1 B1.1\n", "hand");
  cost_model c = cost_model::uniform(1, 3, 1, 2);  // B = I + W = 1 + 2
  c.early_input_grad = true;
  sim_result r = simulate(p, c);
  // rank1: F1.0 [1,2] B1.0 [2,5] (gradient out at 3) F1.1 [5,6] B1.1 [6,9] (out at 7);
  // rank0: F0.0 [0,1] F0.1 [1,2] B0.0 [3,6] B0.1 [7,10]: 2 earlier than the 12 of B as a block.
  auto find = [&](const char* a) {
    for (auto& e : r.events)
      if (to_string(e.act) == a) return e;
    CATCH_FAIL("no event " << a);
    return r.events[0];
  };
  CATCH_CHECK(find("B1.0").output_at == 3);
  CATCH_CHECK(find("B1.1").output_at == 7);
  CATCH_CHECK(find("B0.0").start == 3);
  CATCH_CHECK(find("B0.0").output_at == -1);  // nothing before virtual stage 0 to send to
  CATCH_CHECK(find("B0.1").start == 7);
  CATCH_CHECK(r.makespan == 10);
  CATCH_CHECK(r.busy == std::vector<double>{8, 8});

  // 1F1B on 2 stages, M = 16, F = I = W = 1: the bubble F + B = 3 shrinks to F + I = 2.
  plan q = make_schedule("1f1b", {2, 16, 1});
  cost_model unit = cost_model::uniform(1, 2, 1, 1);
  CATCH_CHECK(simulate(q, unit).makespan == Approx(51));
  unit.early_input_grad = true;
  CATCH_CHECK(simulate(q, unit).makespan == Approx(50));
  // An I that is unknown (0) or not shorter than B changes nothing.
  for (double i : {0.0, 2.0, 3.0}) {
    cost_model odd = cost_model::uniform(1, 2, i, 1);
    odd.early_input_grad = true;
    CATCH_CHECK(simulate(q, odd).makespan == Approx(51));
  }
}

CATCH_TEST_CASE("measured early-sending B actions give the cost model its I and W split", "[sim]") {
  std::vector<timeline_event> events = {
      {0, action{op_kind::forward, 0, 0}, 0, 0, 2},
      {1, action{op_kind::backward, 1, 0}, 0, 2, 8, 4},   // I 2, W 4
      {1, action{op_kind::backward, 1, 1}, 0, 8, 14, 11},  // I 3, W 3
      {0, action{op_kind::backward, 0, 0}, 0, 8, 12},       // stage 0: nothing to send early
  };
  const cost_model c = mean_costs(events, 2);
  CATCH_CHECK(c.early_input_grad);
  CATCH_CHECK(c.backward[1] == Approx(6));
  CATCH_CHECK(c.input_grad[1] == Approx(2.5));
  CATCH_CHECK(c.weight_grad[1] == Approx(3.5));
  CATCH_CHECK(c.input_grad[0] == 0);  // unknown: its B hands nothing on early
  CATCH_CHECK(c.output_after(action{op_kind::backward, 1, 0}) == Approx(2.5));
  CATCH_CHECK(c.output_after(action{op_kind::backward, 0, 0}) == Approx(4));
  events[1].output_at = events[2].output_at = -1;
  CATCH_CHECK_FALSE(mean_costs(events, 2).early_input_grad);
}

CATCH_TEST_CASE("median costs are the steady ones: a few slow first actions do not move them", "[sim]") {
  // Virtual stage 0: forwards of 9 (a first-touch one), 2, 2, 3; stage 1: early-sending Bs with
  // I 2, 2, 7 and W 4, 5, 4; one W-only stage has none of them.
  std::vector<timeline_event> events = {
      {0, action{op_kind::forward, 0, 0}, 0, 0, 9},   {0, action{op_kind::forward, 0, 1}, 0, 9, 11},
      {0, action{op_kind::forward, 0, 2}, 0, 11, 13}, {0, action{op_kind::forward, 0, 3}, 0, 13, 16},
      {1, action{op_kind::backward, 1, 0}, 0, 16, 22, 18}, {1, action{op_kind::backward, 1, 1}, 0, 22, 29, 24},
      {1, action{op_kind::backward, 1, 2}, 0, 29, 40, 36},
  };
  const cost_model med = median_costs(events, 2), mean = mean_costs(events, 2);
  CATCH_CHECK(med.forward[0] == Approx(2.5));  // (2 + 3) / 2: an even count takes the middle two
  CATCH_CHECK(mean.forward[0] == Approx(4));
  CATCH_CHECK(med.backward[1] == Approx(7));   // of 6, 7, 11
  CATCH_CHECK(med.input_grad[1] == Approx(2));  // of 2, 2, 7
  CATCH_CHECK(med.weight_grad[1] == Approx(4));  // of 4, 5, 4
  CATCH_CHECK(med.early_input_grad);
  CATCH_CHECK(med.forward[1] == 0);  // never ran
  CATCH_CHECK(med.backward[0] == 0);
}

// A W run out of turn that paused for an F is several events; its cost is their sum, and the
// same W's parts on another rank or in a later step stay apart.
CATCH_TEST_CASE("a paused W's parts add up to one W in the measured costs", "[sim]") {
  const action w0{op_kind::weight_grad, 0, 0}, w1{op_kind::weight_grad, 0, 1};
  std::vector<timeline_event> events = {
      {0, w0, 0, 0, 1, -1, true},  // W0.0: 1 ...
      {0, action{op_kind::forward, 0, 2}, 0, 1, 3},
      {0, w0, 0, 3, 6},             // ... + 3 = 4
      {0, w1, 0, 6, 10},            // W0.1 whole: 4
      {0, w0, 0, 20, 21, -1, true},  // a later step's W0.0: 1 + 1 = 2
      {0, w0, 0, 21, 22},
  };
  CATCH_CHECK(mean_costs(events, 1).weight_grad[0] == Approx(10.0 / 3));
  CATCH_CHECK(median_costs(events, 1).weight_grad[0] == Approx(4));
  CATCH_CHECK(median_costs(events, 1).forward[0] == Approx(2));
}

CATCH_TEST_CASE("send latency delays only messages between ranks", "[sim]") {
  plan p = make_schedule("gpipe", {2, 1, 1});
  // F0.0 [0,1], +0.5 on the wire, F1.0 [1.5,2.5], B1.0 [2.5,4.5], +0.5, B0.0 [5,7].
  auto slow = simulate(p, cost_model::uniform(1, 2, 1, 1, 0.5));
  CATCH_CHECK(slow.makespan == Approx(7));
  CATCH_CHECK(slow.events[1].start == Approx(5));  // rank 0's B0.0
  CATCH_CHECK(slow.busy == std::vector<double>{3, 3});
  // More latency never shortens a 1f1b run.
  plan q = make_schedule("1f1b", {4, 8, 1});
  CATCH_CHECK(simulate(q, cost_model::uniform(1, 2, 1, 1, 0.5)).makespan >
              simulate(q, cost_model::uniform(1, 2, 1, 1)).makespan + 6 * 0.5 - 1e-9);

  // A single rank with two chunks has no cross-rank message: latency changes nothing
  // (2 virtual stages x 3 microbatches x (F + B) = 18, no idle time).
  plan one = make_schedule("gpipe", {1, 3, 2});
  CATCH_CHECK(simulate(one, cost_model::uniform(1, 2, 1, 1, 5)).makespan == Approx(18));
}

CATCH_TEST_CASE("per-virtual-stage costs are honoured", "[sim]") {
  plan p = make_schedule("gpipe", {2, 1, 1});
  cost_model c;
  c.forward = {1, 4};
  c.backward = {2, 8};
  auto r = simulate(p, c);
  CATCH_CHECK(r.makespan == Approx(1 + 4 + 8 + 2));
  CATCH_CHECK(r.busy == std::vector<double>{3, 12});
  CATCH_CHECK(r.ideal_time == 12);
  c.forward = {1, 2, 3};  // wrong length for a 2-stage plan
  CATCH_CHECK_THROWS_WITH(simulate(p, c), "cost model has 3 forward costs but the plan has 2 virtual stages "
                                          "(give one cost per virtual stage, or a single one for all)");
}

CATCH_TEST_CASE("the simulator refuses an invalid plan", "[sim]") {
  plan p = parse_plan("0: B0.0 F0.0\n", "backwards-first");
  CATCH_CHECK_THROWS_WITH(simulate(p, cost_model{}), Contains("invalid schedule 'backwards-first': dependency order"));
}

// plan_makespan is simulate's makespan, the same double, for a search that times many plans.
CATCH_TEST_CASE("plan_makespan is simulate's makespan, without the timeline", "[sim]") {
  cost_model per_stage;
  per_stage.forward = {1.0, 1.3, 0.7, 1.1};
  per_stage.input_grad = {1.2, 0.9, 1.4, 1.0};
  per_stage.weight_grad = {0.5, 0.8, 0.3, 0.6};
  per_stage.backward = {1.7, 1.7, 1.7, 1.6};
  per_stage.send_latency = 0.05;
  for (const char* name : {"gpipe", "1f1b", "interleaved", "zb-h1", "zbv", "dualpipev"}) {
    CATCH_CAPTURE(name);
    const int chunks = std::string(name) == "interleaved" || std::string(name) == "zbv" || std::string(name) == "dualpipev" ? 2 : 1;
    const plan p = make_schedule(name, {4 / chunks, 8, chunks});
    for (const cost_model& c : {cost_model::uniform(1, 2, 1, 1), cost_model::uniform(1, 2.5, 1.2, 1.3, 0.2), per_stage}) {
      CATCH_CHECK(plan_makespan(p, c) == simulate(p, c).makespan);
    }
  }
  // The costs are checked as simulate checks them; a plan that stops part-way is an error.
  const plan two = parse_plan("0: F0.0 B0.0\n1: F1.0 B1.0\n");
  cost_model nan_cost = cost_model::uniform(1, 2, 1, 1);
  nan_cost.forward[0] = std::nan("");
  CATCH_CHECK_THROWS_WITH(plan_makespan(two, nan_cost), "cost model: forward cost nan must be a finite number >= 0");
  plan outside = two;
  outside.ranks[1].push_back({op_kind::forward, 1, 5});  // microbatch 5 of 1
  CATCH_CHECK_THROWS_WITH(plan_makespan(outside, cost_model::uniform(1, 2, 1, 1)),
                          "plan_makespan: plan 'plan' lists F1.5 on rank 1, outside its shape (validate_plan names why)");
  outside = two;
  outside.ranks[0].push_back({op_kind::forward, 1, 0});  // virtual stage 1 lives on rank 1
  CATCH_CHECK_THROWS_WITH(plan_makespan(outside, cost_model::uniform(1, 2, 1, 1)),
                          Contains("lists F1.0 on rank 0, outside its shape"));
  const plan stuck = parse_plan("0: B0.0 F0.0\n", "backwards-first");
  CATCH_CHECK_THROWS_AS(plan_makespan(stuck, cost_model::uniform(1, 2, 1, 1)), std::logic_error);
  CATCH_CHECK_THROWS_WITH(plan_makespan(stuck, cost_model::uniform(1, 2, 1, 1)),
                          "plan_makespan: plan 'backwards-first' stops after 0 of its 2 actions (validate_plan names why)");
}

CATCH_TEST_CASE("the cost flag accepts F,B,I,W and its short forms", "[sim][cost]") {
  auto c = parse_cost_spec("1,2,0.5,1.5");
  CATCH_CHECK(c.forward[0] == 1);
  CATCH_CHECK(c.backward[0] == 2);
  CATCH_CHECK(c.input_grad[0] == 0.5);
  CATCH_CHECK(c.weight_grad[0] == 1.5);
  c = parse_cost_spec("1,,1.25,1");  // B defaults to I + W
  CATCH_CHECK(c.backward[0] == 2.25);
  c = parse_cost_spec("2,4");  // no split given: I = W = B / 2
  CATCH_CHECK(c.input_grad[0] == 2);
  CATCH_CHECK(c.weight_grad[0] == 2);
  CATCH_CHECK_THROWS_WITH(parse_cost_spec("1,2,3"), Contains("--cost '1,2,3': needs 2 or 4 comma-separated values"));
  CATCH_CHECK_THROWS_WITH(parse_cost_spec("1,x,1,1"), Contains("B must be a decimal number in (0, 1e+100], got 'x'"));
  CATCH_CHECK_THROWS_WITH(parse_cost_spec("0,2,1,1"), Contains("F must be > 0"));
  CATCH_CHECK_THROWS_WITH(parse_cost_spec("1,-2,1,1"), Contains("B must be a decimal number in (0, 1e+100], got '-2'"));
  CATCH_CHECK_THROWS_WITH(parse_cost_spec("1,,,1"), Contains("give B, or both I and W"));
  CATCH_CHECK_THROWS_WITH(parse_cost_spec("1,inf,1,1"), Contains("got 'inf'"));
}

CATCH_TEST_CASE("the cost flag takes plain decimal numbers only", "[sim][cost]") {
  // strtod reads all of these; as a cost each is a typo (0x10 was read as 16).
  for (const char* text : {"0x10", "0X1p4", "nan", "infinity", " 1", "1 ", "1e", "e5", ".", "--1"}) {
    CATCH_CAPTURE(text);
    CATCH_CHECK_THROWS_WITH(parse_cost_spec(std::string(text) + ",2,1,1"),
                            Contains("F must be a decimal number in (0, 1e+100], got '" + std::string(text) + "'"));
  }
  CATCH_CHECK_THROWS_WITH(parse_cost_spec("0x10,1,1,1"),
                          "--cost '0x10,1,1,1': F must be a decimal number in (0, 1e+100], got '0x10' (expected "
                          "F,B,I,W e.g. 1,2,1,1; or F,,I,W; or F,B)");
  CATCH_CHECK_THROWS_WITH(parse_cost_spec("1,2,0x1,1"), Contains("I must be a decimal number in [0, 1e+100], got '0x1'"));
  for (const char* yes : {"1", "-2.5", "+3", ".5", "5.", "1e-3", "2E+10", "007"}) CATCH_CHECK(decimal_number_text(yes));
  for (const char* no : {"", "0x10", "0b1", "inf", "nan", " 1", "1 ", "1e", "1e+", "+", "-.", "1.2.3", "1_000"})
    CATCH_CHECK_FALSE(decimal_number_text(no));
  // A cost that is not a number compared false everywhere: simulate() returned a makespan of 0.
  const plan one_f_one_b = make_schedule("1f1b", {2, 4, 1});
  CATCH_CHECK_THROWS_WITH(simulate(one_f_one_b, cost_model::uniform(std::nan(""), 2, 1, 1)),
                          "cost model: forward cost nan must be a finite number >= 0");
  CATCH_CHECK_THROWS_WITH(simulate(one_f_one_b, cost_model::uniform(1, -2, 1, 1)),
                          "cost model: backward cost -2 must be a finite number >= 0");
  CATCH_CHECK_THROWS_WITH(simulate(one_f_one_b, cost_model::uniform(1, 2, 1, 1, HUGE_VAL)),
                          "cost model: send latency inf must be a finite number >= 0");
  // Messages echo numbers as given: six digits, but a whole number exactly.
  CATCH_CHECK(number_text(1000001) == "1000001");
  CATCH_CHECK(number_text(-123456789) == "-123456789");
  CATCH_CHECK(number_text(1e9) == "1e+09");
  CATCH_CHECK(number_text(1e300) == "1e+300");
  CATCH_CHECK(number_text(0.25) == "0.25");
  CATCH_CHECK(number_text(1000000.5) == "1e+06");
  CATCH_CHECK(number_text(std::nan("")) == "nan");
  CATCH_CHECK(number_text(-HUGE_VAL) == "-inf");
  // Decimal forms, with a sign, a point on either side or an exponent, are numbers.
  auto c = parse_cost_spec("+1.,2.5e0,.5,1E-0");
  CATCH_CHECK(c.forward[0] == 1);
  CATCH_CHECK(c.backward[0] == 2.5);
  CATCH_CHECK(c.input_grad[0] == 0.5);
  CATCH_CHECK(c.weight_grad[0] == 1);
}

CATCH_TEST_CASE("the cost flag: I and W are parts of B, a different B is kept and noted", "[sim][cost]") {
  // 1,1,2,2: I and W longer than the whole backward (B, I, W misordered): refused.
  CATCH_CHECK_THROWS_WITH(parse_cost_spec("1,1,2,2"),
                          "--cost '1,1,2,2': I=2 is more than B=1, but I is a part of the split B (B is the whole "
                          "backward; leave B out, F,,I,W, for B = I+W) (expected F,B,I,W e.g. 1,2,1,1; or F,,I,W; or "
                          "F,B)");
  CATCH_CHECK_THROWS_WITH(parse_cost_spec("1,2,1,3"), Contains("W=3 is more than B=2, but W is a part of the split B"));
  // A fused B cheaper (or dearer) than its halves is a cost model of its own: kept, and noted.
  auto c = parse_cost_spec("1,1.5,1,1");
  CATCH_CHECK(c.backward[0] == 1.5);
  CATCH_CHECK(c.input_grad[0] == 1);
  CATCH_CHECK(cost_spec_note(c) ==
              "--cost B=1.5 is not I+W = 1+1 = 2: plans that run whole backwards (B) take 1.5 for each, plans that "
              "split them (I, W) take 2");
  for (const char* same : {"1,2,1,1", "1,,0.1,0.2", "2,4", "1,0.3,0.1,0.2"}) {
    CATCH_CAPTURE(same);
    CATCH_CHECK(cost_spec_note(parse_cost_spec(same)).empty());
  }
}

CATCH_TEST_CASE("the cost flag keeps its costs within max_cost_ratio of each other", "[sim][cost]") {
  CATCH_CHECK_THROWS_WITH(parse_cost_spec("1e7,2,1,1"),
                          Contains("--cost '1e7,2,1,1': F=10000000 is more than 1000000 times I=1: the smaller costs would "
                                   "round away next to it"));
  CATCH_CHECK_THROWS_WITH(parse_cost_spec("1,4e6,2e6,2"), Contains("B=4000000 is more than 1000000 times F=1"));
  // B taken as I + W is named so, to ten digits (it read "B=1e+06 is more than 1e+06 times F=1").
  CATCH_CHECK_THROWS_WITH(parse_cost_spec("1,,1e6,1"), Contains("B (I+W)=1000001 is more than 1000000 times F=1"));
  CATCH_CHECK(parse_cost_spec("1e6,2,1,1").forward[0] == 1e6);  // at the ratio: taken
  CATCH_CHECK(parse_cost_spec("1e6,2,0,2").input_grad[0] == 0);  // a zero cost has nothing to lose
  // Below a double's normal range a cost keeps a digit or two (it showed as F=9.99989e-321).
  CATCH_CHECK_THROWS_WITH(parse_cost_spec("1e-320,2e-320,1e-320,1e-320"),
                          Contains("F=1e-320 is below a double's normal range (2.2e-308): give 0 (not for F and B) or "
                                   "a larger cost, all of them scaled alike"));
  CATCH_CHECK_THROWS_WITH(parse_cost_spec("1,2,1,4e-310"), Contains("W=4e-310 is below a double's normal range"));
  CATCH_CHECK(parse_cost_spec("1e-300,2e-300,1e-300,1e-300").forward[0] == 1e-300);
  // No B given: the B refused is I + W (it said "B must be > 0" of a B no one gave).
  CATCH_CHECK_THROWS_WITH(parse_cost_spec("1,,0,0"), Contains("B, taken as I + W, must be > 0: give I or W above 0, or B"));
  CATCH_CHECK(smallest_cost(parse_cost_spec("3,2,0,2")) == 2);
}

CATCH_TEST_CASE("a cost that would round away next to a huge time is refused, not drawn as nothing", "[sim]") {
  // gpipe on 2 ranks, 1 microbatch: F1.0 waits for F0.0 (ends at 1) plus the latency.
  const plan p = make_schedule("gpipe", {2, 1, 1});
  // 1e18 + 1 == 1e18: the probe's run drew rank 1 with no busy time at all.
  CATCH_CHECK_THROWS_WITH(simulate(p, cost_model::uniform(1, 2, 1, 1, 1e18)),
                          "F1.0 on rank 1 starts at 1e+18, where its cost 1 rounds to 0: the costs and send latency "
                          "are too far apart to simulate (keep the largest within 1e+06 times the smallest)");
  // Within max_cost_ratio every cost counts in full.
  const sim_result r = simulate(p, cost_model::uniform(1, 2, 1, 1, 1e6));
  CATCH_CHECK(r.busy == std::vector<double>{3, 3});
  CATCH_CHECK(r.makespan == 2e6 + 6);  // F0.0, wire, F1.0, B1.0, wire, B0.0
  CATCH_REQUIRE(r.events.size() == 4);
  for (const auto& e : r.events) CATCH_CHECK(e.end - e.start == (e.act.op == op_kind::forward ? 1 : 2));
  // The largest step a plan may hold, at the ratio, still keeps every cost to a thousandth.
  // (3 x 2^20 actions, each at most 2e6 times the smallest cost with its latency: times < 6.4e12.)
  CATCH_CHECK(end_time(0, action{op_kind::forward, 0, 0}, 6.4e12, 0.7) - 6.4e12 == Approx(0.7).epsilon(1e-3));
  // ulp(3e16) = 4: a cost of 3 comes out as 4.
  CATCH_CHECK_THROWS_WITH(end_time(2, action{op_kind::weight_grad, 1, 3}, 3e16, 3),
                          Catch::StartsWith("W1.3 on rank 2 starts at 3e+16, where its cost 3 rounds to 4: "));
  CATCH_CHECK(end_time(0, action{op_kind::weight_grad, 0, 0}, 1e300, 0) == 1e300);  // nothing to lose

  // The policy simulator adds its costs the same way.
  auto policies = make_policies("greedy", 2, 2, 1);
  CATCH_CHECK_THROWS_WITH(
      simulate_policies(policy_placement("greedy", 2, 1), 2, policies, cost_model::uniform(1, 2, 1, 1, 1e18), "greedy"),
      Catch::StartsWith("F1.0 on rank 1 starts at 1e+18, where its cost 1 rounds to 0"));
}
