// Policies: a static plan run as a policy behaves exactly like the plan; the greedy dynamic
// policy never deadlocks, keeps microbatch order per stage and respects its budget.
#include <catch2/catch.hpp>

#include <algorithm>
#include <set>

#include "core/schedule/plan_validator.hpp"
#include "core/schedule/policy.hpp"
#include "core/schedule/schedule_registry.hpp"
#include "core/sim/policy_simulator.hpp"

using namespace actorpipe;
using Catch::Contains;

namespace {
std::vector<std::unique_ptr<rank_policy>> static_policies(const plan& p) {
  std::vector<std::unique_ptr<rank_policy>> out;
  for (int r = 0; r < p.num_ranks(); ++r) out.push_back(make_static_policy(p, r));
  return out;
}
std::vector<std::unique_ptr<rank_policy>> greedy_policies(const placement& place, int M, int budget_extra, bool split) {
  std::vector<std::unique_ptr<rank_policy>> out;
  for (int r = 0; r < place.ranks; ++r)
    out.push_back(make_greedy_policy(place, M, r, std::max(1, place.ranks - r + budget_extra), split));
  return out;
}
}  // namespace

CATCH_TEST_CASE("a static plan run as a policy reproduces the plan's simulation", "[schedule][policy]") {
  struct req { const char* name; int P, M, V; };
  for (auto r : {req{"gpipe", 4, 8, 1}, req{"1f1b", 4, 8, 1}, req{"interleaved", 4, 8, 2}, req{"zb-h1", 4, 8, 1},
                 req{"zbv", 4, 8, 2}, req{"dualpipev", 3, 6, 2}})
    for (double latency : {0.0, 0.3})
      for (bool early : {false, true}) {  // B as a block, or its gradient out after its I part
        CATCH_CAPTURE(r.name, latency, early);
        plan p = make_schedule(r.name, {r.P, r.M, r.V});
        auto costs = cost_model::uniform(1, 2, 0.5, 1.5, latency);
        costs.early_input_grad = early;
        auto policies = static_policies(p);
        auto got = simulate_policies(p.place, p.microbatches, policies, costs, r.name);
        auto want = simulate(p, costs);
        CATCH_CHECK(got.executed.ranks == p.ranks);
        CATCH_CHECK(got.timeline.makespan == Approx(want.makespan));
        CATCH_CHECK(got.timeline.busy == want.busy);
        CATCH_CHECK(got.timeline.peak_activations == want.peak_activations);
      }
}

CATCH_TEST_CASE("greedy with a 1F1B budget behaves like 1F1B", "[schedule][policy]") {
  for (int P : {1, 2, 4, 6})
    for (int M : {P, 2 * P + 1}) {
      CATCH_CAPTURE(P, M);
      auto policies = greedy_policies(loop_placement(P, 1), M, 0, false);
      auto g = simulate_policies(loop_placement(P, 1), M, policies, cost_model::uniform(1, 2, 1, 1), "greedy");
      auto one = simulate(make_schedule("1f1b", {P, M, 1}), cost_model::uniform(1, 2, 1, 1));
      CATCH_CHECK(g.timeline.makespan == Approx(one.makespan));
      for (int r = 0; r < P; ++r) CATCH_CHECK(g.timeline.peak_activations[r] == std::min(P - r, M));
    }
}

CATCH_TEST_CASE("greedy never deadlocks, keeps microbatch order and its budget", "[schedule][policy][sweep]") {
  int runs = 0;
  for (int P = 1; P <= 5; ++P)
    for (int M : {1, 2, 3, P, 2 * P + 1})
      for (int V : {1, 2, 3})
        for (bool vshape : {false, true})
          for (bool split : {false, true})
            for (int extra : {-8, 0, 2}) {
              if (vshape && V != 2) continue;
              placement place = vshape ? v_shape_placement(P, 2) : loop_placement(P, V);
              CATCH_CAPTURE(P, M, V, vshape, split, extra);
              auto policies = greedy_policies(place, M, extra, split);
              auto res = simulate_policies(place, M, policies, cost_model::uniform(1, 2, 1, 1, 0.25), "greedy");
              CATCH_REQUIRE(validate_plan(res.executed).ok());
              // Per virtual stage: F, B/I and W each in microbatch order.
              for (int r = 0; r < P; ++r) {
                std::vector<std::vector<int>> last(3, std::vector<int>(place.num_virtual_stages(), -1));
                int live_first = 0, peak_first = 0;
                const int first = place.virtual_stages_of(r).front();
                for (auto& a : res.executed.ranks[r]) {
                  int kind = a.op == op_kind::forward ? 0 : a.op == op_kind::weight_grad ? 2 : 1;
                  CATCH_CHECK(a.microbatch == last[kind][a.virtual_stage] + 1);
                  last[kind][a.virtual_stage] = a.microbatch;
                  if (a.virtual_stage == first) {
                    if (a.op == op_kind::forward) peak_first = std::max(peak_first, ++live_first);
                    if (produces_input_grad(a.op)) --live_first;
                  }
                }
                CATCH_CHECK(peak_first <= std::max(1, P - r + extra));
              }
              ++runs;
            }
  CATCH_CHECK(runs > 500);
}

CATCH_TEST_CASE("policies report misuse and deadlock clearly", "[schedule][policy]") {
  CATCH_CHECK_THROWS_WITH(make_greedy_policy(loop_placement(2, 1), 4, 0, 0, false),
                          "greedy policy: budget=0 must be >= 1");
  CATCH_CHECK_THROWS_WITH(make_static_policy(make_schedule("1f1b", {2, 2, 1}), 2),
                          "static policy: rank 2 is not in the plan's 0..1");
  // A plan whose ranks wait on each other forever, run as policies (bypassing the validator).
  plan p = parse_plan("0: F0.0 B0.0 F0.1 B0.1\n1: F1.1 F1.0 B1.0 B1.1\n", "cycle");
  auto policies = static_policies(p);
  CATCH_CHECK_THROWS_WITH(simulate_policies(p.place, 2, policies, cost_model{}),
                          "policies deadlocked: rank 0 waits for B0.0 (position 1); rank 1 waits for F1.1 (position 0)");
  // A policy that ran all it lists and never says it is finished is no deadlock: said as train
  // says it.
  struct never_finished : rank_policy {
    std::unique_ptr<rank_policy> inner;
    explicit never_finished(std::unique_ptr<rank_policy> p) : inner(std::move(p)) {}
    void reset() override { inner->reset(); }
    std::optional<action> next(const std::function<bool(const action&)>& ready) override { return inner->next(ready); }
    void completed(const action& a) override { inner->completed(a); }
    bool finished() const override { return false; }
    std::string waiting_for() const override { return inner->waiting_for(); }
    std::vector<action> all_actions() const override { return inner->all_actions(); }
  };
  const plan good = make_schedule("1f1b", {2, 2, 1});
  std::vector<std::unique_ptr<rank_policy>> never;
  for (int r = 0; r < 2; ++r) never.push_back(std::make_unique<never_finished>(make_static_policy(good, r)));
  CATCH_CHECK_THROWS_WITH(simulate_policies(good.place, 2, never, cost_model{}, "never"),
                          "rank 0: policy 'never' ran all 4 actions it lists but does not say it is finished");
}

CATCH_TEST_CASE("a static policy with W fill runs the next W while its listed action waits, W order kept", "[schedule][policy]") {
  const plan p = parse_plan("0: F0.0 F0.1 I0.0 I0.1 W0.0 W0.1\n", "hand");
  std::set<std::string> arrived;  // the actions whose inputs are here
  const auto ready = [&](const action& a) { return arrived.count(to_string(a)) > 0; };
  for (bool fill : {true, false}) {
    CATCH_INFO("fill " << fill);
    auto pol = make_static_policy(p, 0, fill);
    arrived = {"F0.0", "F0.1", "I0.0"};
    for (const char* listed : {"F0.0", "F0.1", "I0.0"}) {
      auto a = pol->next(ready);
      CATCH_REQUIRE(a);
      CATCH_CHECK(to_string(*a) == listed);
      pol->completed(*a);
    }
    // I0.1 waits for its gradient; W0.0 (its I done) is ready, W0.1 not.
    arrived.insert("W0.0");
    CATCH_CHECK_FALSE(pol->next(ready));
    auto w = pol->fill(ready);
    if (!fill) {
      CATCH_CHECK_FALSE(w);
      continue;
    }
    CATCH_REQUIRE(w);
    CATCH_CHECK(to_string(*w) == "W0.0");
    CATCH_CHECK_FALSE(pol->fill(ready));  // one at a time: W0.0 is still running
    pol->completed(*w);
    CATCH_CHECK_FALSE(pol->fill(ready));  // W0.1 is next among the W and not ready: no later W jumps it
    CATCH_CHECK(pol->waiting_for() == "I0.1 (position 3)");
    CATCH_REQUIRE(pol->next_listed());
    CATCH_CHECK(to_string(*pol->next_listed()) == "I0.1");  // what a filling stage asks about
    arrived.insert("I0.1");
    arrived.insert("W0.1");
    auto i = pol->next(ready);
    CATCH_REQUIRE(i);
    CATCH_CHECK(to_string(*i) == "I0.1");
    pol->completed(*i);
    auto last = pol->next(ready);  // W0.0 ran already: the list goes on with W0.1
    CATCH_REQUIRE(last);
    CATCH_CHECK(to_string(*last) == "W0.1");
    CATCH_CHECK_FALSE(pol->finished());
    pol->completed(*last);
    CATCH_CHECK(pol->finished());
    CATCH_CHECK_FALSE(pol->next_listed());
    CATCH_CHECK_THROWS_WITH(pol->completed(*last), Contains("completed W0.1, which was not handed out"));
  }
  // The next listed action itself a W that waits: nothing to fill with.
  auto pol = make_static_policy(parse_plan("0: F0.0 I0.0 W0.0\n", "hand"), 0, true);
  arrived = {"F0.0", "I0.0"};
  for (int k = 0; k < 2; ++k) pol->completed(*pol->next(ready));
  arrived.clear();
  CATCH_CHECK_FALSE(pol->next(ready));
  CATCH_CHECK_FALSE(pol->fill(ready));
  // A whole B of the W's virtual stage listed before it: both add into its weight gradients,
  // so the W keeps its place (it ran ahead of B1.1 and B1.2 as the timing fell, and the bits
  // varied run to run); a W of another virtual stage may still fill.
  auto mixed = make_static_policy(parse_plan("0: F0.0 I0.0 F0.1 B0.1 W0.0\n", "hand"), 0, true);
  arrived = {"F0.0", "I0.0", "W0.0"};
  for (int k = 0; k < 2; ++k) mixed->completed(*mixed->next(ready));
  CATCH_CHECK_FALSE(mixed->next(ready));  // F0.1 waits for its input
  CATCH_CHECK_FALSE(mixed->fill(ready));  // W0.0 is ready, but B0.1 comes first
  auto other = make_static_policy(
      parse_plan("0: F0.0 F1.0 I1.0 I0.0 F0.1 F1.1 I1.1 B0.1 W1.0 W1.1 W0.0\n", "hand"), 0, true);
  arrived = {"F0.0", "F1.0", "I1.0", "I0.0", "W1.0"};
  for (int k = 0; k < 4; ++k) other->completed(*other->next(ready));
  CATCH_CHECK_FALSE(other->next(ready));  // F0.1 waits
  auto w = other->fill(ready);  // B0.1 is another virtual stage's: W1.0 may go ahead
  CATCH_REQUIRE(w);
  CATCH_CHECK(to_string(*w) == "W1.0");
}
