// Choosing the plan to run on measured costs: ranks' speeds made equal, and the minimax-regret
// choice between the running plan and plans rebuilt on the costs. The costs are per-op medians
// (ms) from traces of the benchmark GPT (zbv, 2 ranks x 2 chunks, 16 microbatches) on a shared
// 2-vCPU machine: one step where the ranks ran at the same speed, one where rank 0 (virtual
// stages 0 and 3) ran ~40% slow.
#include <catch2/catch.hpp>

#include <memory>

#include "core/schedule/placement.hpp"
#include "core/schedule/schedule_registry.hpp"
#include "core/sim/plan_choice.hpp"

using namespace actorpipe;
using Catch::Contains;

namespace {

cost_model measured(std::vector<double> f, std::vector<double> i, std::vector<double> w) {
  cost_model c;
  c.forward = f;
  c.input_grad = i;
  c.weight_grad = w;
  c.backward.clear();
  for (size_t v = 0; v < f.size(); ++v) c.backward.push_back(i[v] + w[v]);
  c.early_input_grad = true;
  return c;
}

const cost_model even = measured({16.53, 16.41, 16.30, 17.38}, {17.10, 17.20, 17.11, 17.99}, {12.84, 12.88, 12.76, 12.82});
const cost_model rank0_slow =
    measured({23.52, 19.32, 22.07, 24.77}, {25.58, 18.80, 18.38, 26.94}, {18.91, 13.47, 13.30, 18.59});

std::shared_ptr<const plan> zbv_on(const cost_model& c) {
  return std::make_shared<const plan>(make_schedule("zbv", schedule_request{2, 16, 2, std::make_shared<const cost_model>(c)}));
}

double work(const cost_model& c, const placement& p, int rank) {
  double sum = 0;
  for (int v : p.virtual_stages_of(rank)) sum += c.forward[v] + c.backward[v];
  return sum;
}

}  // namespace

CATCH_TEST_CASE("equal_rank_speeds gives every rank the mean work and keeps each rank's ratios", "[sim][replan]") {
  const placement p = v_shape_placement(2, 2);
  cost_model c = rank0_slow;
  c.send_latency = 0.25;
  const cost_model e = equal_rank_speeds(c, p);
  const double mean = (work(c, p, 0) + work(c, p, 1)) / 2;
  CATCH_CHECK(work(e, p, 0) == Approx(mean));
  CATCH_CHECK(work(e, p, 1) == Approx(mean));
  // Rank 0 owns virtual stages 0 and 3: one factor for all its ops.
  const double f0 = mean / work(c, p, 0), f1 = mean / work(c, p, 1);
  CATCH_CHECK(f0 < 1);
  CATCH_CHECK(f1 > 1);
  for (int v : {0, 3}) {
    CATCH_CHECK(e.forward[v] == Approx(c.forward[v] * f0));
    CATCH_CHECK(e.input_grad[v] == Approx(c.input_grad[v] * f0));
    CATCH_CHECK(e.weight_grad[v] == Approx(c.weight_grad[v] * f0));
    CATCH_CHECK(e.backward[v] == Approx(c.backward[v] * f0));
  }
  for (int v : {1, 2}) CATCH_CHECK(e.forward[v] == Approx(c.forward[v] * f1));
  CATCH_CHECK(e.send_latency == 0.25);
  CATCH_CHECK(e.early_input_grad);

  // A single entry for every stage is spread over the stages (here: already equal).
  const cost_model u = equal_rank_speeds(cost_model::uniform(1, 2, 1, 1), loop_placement(2, 2));
  CATCH_CHECK(u.forward == std::vector<double>(4, 1.0));
  CATCH_CHECK(u.weight_grad == std::vector<double>(4, 1.0));

  cost_model none = cost_model::uniform(1, 2, 1, 1);
  none.forward = {1, 0, 0, 1};
  none.backward = {2, 0, 0, 2};
  CATCH_CHECK_THROWS_WITH(equal_rank_speeds(none, p), Contains("rank 1 has no work"));
  none.forward = {1, 1, 1};
  CATCH_CHECK_THROWS_WITH(equal_rank_speeds(none, p), Contains("3 entries for 4 virtual stages"));
}

CATCH_TEST_CASE("a plan rebuilt while one rank ran slow stays good once the speeds even out", "[sim][replan]") {
  const placement p = v_shape_placement(2, 2);
  const auto unit = std::make_shared<const plan>(make_schedule("zbv", schedule_request{2, 16, 2}));
  const plan_choice c = choose_plan("zbv", 2, 16, p, rank0_slow, unit);
  CATCH_CHECK(c.built_on == "equal speeds");
  CATCH_CHECK(c.candidates >= 2);
  CATCH_CHECK(c.worst_regret < 1.01);
  CATCH_CHECK(c.on_measured.makespan == Approx(simulate(*c.use, rank0_slow).makespan));
  CATCH_CHECK(c.running_on_measured.makespan == Approx(simulate(*unit, rank0_slow).makespan));
  // On the even step's costs the plan built for the slow rank as measured is 5% behind the plan
  // built on those costs; the chosen one is within 1%.
  const double best = simulate(*zbv_on(even), even).makespan;
  CATCH_CHECK(simulate(*zbv_on(rank0_slow), even).makespan > 1.05 * best);
  CATCH_CHECK(simulate(*c.use, even).makespan < 1.01 * best);
  // And on the slow step's own costs it gives up nothing against the plan built on them.
  CATCH_CHECK(c.on_measured.makespan <= simulate(*zbv_on(rank0_slow), rank0_slow).makespan * 1.001);
}

CATCH_TEST_CASE("on costs of ranks at one speed the plan rebuilt on them is chosen", "[sim][replan]") {
  const placement p = v_shape_placement(2, 2);
  const auto unit = std::make_shared<const plan>(make_schedule("zbv", schedule_request{2, 16, 2}));
  const plan_choice c = choose_plan("zbv", 2, 16, p, even, unit);
  CATCH_CHECK(c.built_on == "measured");
  CATCH_CHECK(format_plan(*c.use) == format_plan(*zbv_on(even)));
  CATCH_CHECK(c.worst_regret == 1);
  CATCH_CHECK(c.on_measured.makespan < 0.95 * c.running_on_measured.makespan);  // the unit plan: 5% slower here

  // Running that plan already: it is kept (the same plan counts once).
  const plan_choice again = choose_plan("zbv", 2, 16, p, even, c.use);
  CATCH_CHECK(again.use == c.use);
  CATCH_CHECK(again.built_on == "running");
  // No plan running: the rebuilt one.
  CATCH_CHECK(format_plan(*choose_plan("zbv", 2, 16, p, even, nullptr).use) == format_plan(*c.use));
}

CATCH_TEST_CASE("a schedule that does not order by cost has one candidate", "[sim][replan]") {
  const auto running = std::make_shared<const plan>(make_schedule("1f1b", schedule_request{2, 8, 1}));
  cost_model c = cost_model::uniform(1, 2, 1, 1);
  c.forward = {1, 1.5};
  const plan_choice choice = choose_plan("1f1b", 2, 8, loop_placement(2, 1), c, running);
  CATCH_CHECK(choice.use == running);
  CATCH_CHECK(choice.candidates == 1);
  CATCH_CHECK(choice.built_on == "running");
}
