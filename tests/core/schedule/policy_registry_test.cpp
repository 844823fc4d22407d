// Policy registry: greedy through it, user policies registered at run time (the example's
// gpipe-waves), their errors, the checks on what a factory returns, and simulate --schedule
// with a registered policy.
#include <catch2/catch.hpp>

#include <algorithm>

#include "core/schedule/plan_validator.hpp"
#include "core/schedule/policy_registry.hpp"
#include "core/sim/policy_simulator.hpp"
#include "examples/waves_policy.hpp"
#include "tests/apps/cli_runner.hpp"

using namespace actorpipe;
using Catch::Contains;

namespace {

policy_factory greedy_factory() {
  return [](const policy_request& r) {
    return make_greedy_policy(r.place, r.microbatches, r.rank, r.budget > 0 ? r.budget : 2, r.split_backward);
  };
}

// A policy that answers with a fixed list, whatever is ready (for the checks).
class scripted_policy final : public rank_policy {
 public:
  scripted_policy(std::vector<action> listed, std::vector<action> picks)
      : listed_(std::move(listed)), picks_(std::move(picks)) {}
  void reset() override { next_ = done_ = 0; }
  std::optional<action> next(const std::function<bool(const action&)>&) override {
    if (next_ >= picks_.size()) return std::nullopt;
    return picks_[next_++];
  }
  void completed(const action&) override { ++done_; }
  // Every pick done (with `early`: every pick made, which the runtime and simulate refuse).
  bool finished() const override { return (early_ ? next_ : done_) >= picks_.size(); }
  std::string waiting_for() const override { return "script"; }
  std::vector<action> all_actions() const override { return listed_; }
  void finish_early() { early_ = true; }

 private:
  std::vector<action> listed_, picks_;
  size_t next_ = 0, done_ = 0;
  bool early_ = false;
};

// A policy that runs every action out of turn: next() has nothing, fill() the list in order.
class filling_policy final : public rank_policy {
 public:
  explicit filling_policy(std::vector<action> listed) : listed_(std::move(listed)) {}
  void reset() override { next_ = done_ = 0; }
  std::optional<action> next(const std::function<bool(const action&)>&) override { return std::nullopt; }
  std::optional<action> fill(const std::function<bool(const action&)>&) override {
    if (next_ >= listed_.size()) return std::nullopt;
    return listed_[next_++];
  }
  std::optional<action> next_listed() const override {
    return next_ < listed_.size() ? std::optional<action>(listed_[next_]) : std::nullopt;
  }
  void completed(const action&) override { ++done_; }
  bool finished() const override { return done_ >= listed_.size(); }
  std::string waiting_for() const override { return "a wait to fill"; }
  std::vector<action> all_actions() const override { return listed_; }

 private:
  std::vector<action> listed_;
  size_t next_ = 0, done_ = 0;
};

policy_sim_result run(const std::string& name, int P, int M, int V, int budget = 0) {
  auto policies = make_policies(name, P, M, V, budget);
  return simulate_policies(policy_placement(name, P, V), M, policies, cost_model::uniform(1, 2, 1, 1, 0.25), name);
}

}  // namespace

CATCH_TEST_CASE("greedy is a built-in policy of the registry", "[schedule][policy][registry]") {
  CATCH_CHECK(is_dynamic_policy("greedy"));
  CATCH_CHECK(!has_schedule("greedy"));
  CATCH_CHECK(!is_dynamic_policy("1f1b"));
  CATCH_CHECK(default_chunks("greedy") == 1);
  auto all = list_schedules();
  CATCH_REQUIRE(all.size() >= 7);
  CATCH_CHECK(all[6].name == "greedy");  // after the six built-in plans
  CATCH_CHECK(all[6].builtin);
  CATCH_CHECK(all[6].dynamic);
  CATCH_CHECK(std::none_of(all.begin(), all.begin() + 6, [](const schedule_info& s) { return s.dynamic; }));
  CATCH_CHECK(policy_placement("greedy", 3, 2).kind == "loop");
  // A request past a plan's size is refused before its placement (stages x chunks entries)
  // is made: -V 2147483647 grew by GBs before the error.
  CATCH_CHECK_THROWS_WITH(make_policy("greedy", 2, 4, 2147483647, 0),
                          Catch::Contains("policy 'greedy': stages x chunks x microbatches = 2 x 2147483647 x 4"));
  // Through the registry, with the default budget (stages - rank, + stages per chunk after the
  // first), it is greedy with that budget.
  for (int P : {2, 4})
    for (int V : {1, 2}) {
      CATCH_CAPTURE(P, V);
      auto got = run("greedy", P, 2 * P, V);
      std::vector<std::unique_ptr<rank_policy>> direct;
      for (int r = 0; r < P; ++r) direct.push_back(make_greedy_policy(loop_placement(P, V), 2 * P, r, P - r + (V - 1) * P, false));
      auto want = simulate_policies(loop_placement(P, V), 2 * P, direct, cost_model::uniform(1, 2, 1, 1, 0.25));
      CATCH_CHECK(got.executed.ranks == want.executed.ranks);
    }
}

CATCH_TEST_CASE("user code registers a dynamic policy and runs it by name", "[schedule][policy][registry]") {
  waves::register_waves_policy();
  CATCH_CHECK(is_dynamic_policy("gpipe-waves"));
  bool listed = false;
  for (auto& s : list_schedules())
    if (s.name == "gpipe-waves") listed = s.dynamic && !s.builtin && s.description.find("GPipe in waves") == 0;
  CATCH_CHECK(listed);
  for (int P : {1, 2, 4})
    for (int M : {1, 3, 8})
      for (int V : {1, 2})
        for (int budget : {0, 1, 3, 8}) {
          CATCH_CAPTURE(P, M, V, budget);
          auto res = run("gpipe-waves", P, M, V, budget);
          CATCH_REQUIRE(validate_plan(res.executed).ok());
          // At most `budget` microbatches (2 by default) inside each chunk of a rank.
          for (int peak : res.timeline.peak_activations) CATCH_CHECK(peak <= V * std::min(M, budget > 0 ? budget : 2));
        }
  // With a budget of M the first rank runs GPipe's order.
  auto waves = run("gpipe-waves", 4, 8, 1, 8);
  CATCH_CHECK(waves.executed.ranks[0] == make_schedule("gpipe", {4, 8, 1}).ranks[0]);
  // Waves of 2 on 2 ranks: the first rank admits two, drains them, admits the next two; the
  // last runs each backward as soon as it can.
  CATCH_CHECK(format_plan(run("gpipe-waves", 2, 4, 1).executed) ==
              "0: F0.0 F0.1 B0.0 B0.1 F0.2 F0.3 B0.2 B0.3\n1: F1.0 B1.0 F1.1 B1.1 F1.2 B1.2 F1.3 B1.3\n");
}

CATCH_TEST_CASE("a registration chooses the placement, default chunks and split backward", "[schedule][policy][registry]") {
  policy_options o;
  o.placement = "v-shape";
  o.default_chunks = 2;
  o.split_backward = true;
  register_policy("test-greedy-v-split", greedy_factory(), "greedy on a V, I and W apart", o);
  CATCH_CHECK(default_chunks("test-greedy-v-split") == 2);
  CATCH_CHECK(policy_placement("test-greedy-v-split", 3, 2).kind == "v-shape");
  auto res = run("test-greedy-v-split", 3, 6, 2);
  CATCH_CHECK(res.executed.place.kind == "v-shape");
  CATCH_CHECK(res.executed.uses_split_backward());
  CATCH_CHECK(validate_plan(res.executed).ok());
  // Registering again replaces a user policy.
  register_policy("test-greedy-v-split", greedy_factory(), "now a loop");
  CATCH_CHECK(policy_placement("test-greedy-v-split", 3, 2).kind == "loop");
}

CATCH_TEST_CASE("policy registration errors are clear", "[schedule][policy][registry]") {
  auto f = greedy_factory();
  CATCH_CHECK_THROWS_WITH(register_policy("greedy", f),
                          "register_policy: 'greedy' is a built-in policy; pick another name");
  CATCH_CHECK_THROWS_WITH(register_policy("1f1b", f),
                          "register_policy: '1f1b' is a schedule (a plan generator); pick another name");
  CATCH_CHECK_THROWS_WITH(register_policy("", f), "register_policy: name '' must be non-empty without whitespace");
  CATCH_CHECK_THROWS_WITH(register_policy("my policy", f),
                          "register_policy: name 'my policy' must be non-empty without whitespace");
  CATCH_CHECK_THROWS_WITH(register_policy("test-empty", policy_factory{}),
                          "register_policy: factory for 'test-empty' is empty");
  policy_options zero;
  zero.default_chunks = 0;
  CATCH_CHECK_THROWS_WITH(register_policy("test-zero", f, "", zero),
                          "register_policy: default_chunks=0 for 'test-zero' must be >= 1");
  policy_options zigzag;
  zigzag.placement = "zigzag";
  CATCH_CHECK_THROWS_WITH(register_policy("test-zigzag", f, "", zigzag),
                          "register_policy: placement 'zigzag' for 'test-zigzag' must be loop or v-shape");
  CATCH_CHECK(!is_dynamic_policy("test-empty"));
  CATCH_CHECK(!is_dynamic_policy("test-zero"));

  // One name space: a policy's name is not free for a schedule, and a schedule has no policy.
  register_policy("test-taken", f);
  CATCH_CHECK_THROWS_WITH(register_schedule("test-taken", [](const schedule_request& r) { return make_schedule("gpipe", r); }),
                          "register_schedule: 'test-taken' is a dynamic policy; pick another name");
  register_schedule("test-plan-only", [](const schedule_request& r) { return make_schedule("gpipe", r); });
  CATCH_CHECK_THROWS_WITH(register_policy("test-plan-only", f),
                          "register_policy: 'test-plan-only' is a schedule (a plan generator); pick another name");
  CATCH_CHECK_THROWS_WITH(make_schedule("greedy", {2, 4, 1}), Contains("'greedy' is a dynamic policy"));
  CATCH_CHECK_THROWS_WITH(make_schedule("no-such", {2, 2, 1}), Contains("; dynamic policies: greedy"));
  CATCH_CHECK_THROWS_WITH(make_policy("no-such", 2, 4, 1, 0), Contains("unknown dynamic policy 'no-such' (known: "));
  CATCH_CHECK_THROWS_WITH(make_policy("greedy", 2, 4, 1, 2), "policy 'greedy': rank 2 is not in 0..1");
  CATCH_CHECK_THROWS_WITH(make_policy("greedy", 2, 0, 1, 0), "policy 'greedy' needs microbatches >= 1: got microbatches=0");
  CATCH_CHECK_THROWS_WITH(make_policy("greedy", 2, 4, 1, 0, -1), "policy 'greedy': budget=-1 must be >= 0");
  // A user's generator or factory that fails: named, and a refusal (exit 2), whatever it threw.
  register_schedule("test-throwing", [](const schedule_request&) -> plan { throw std::runtime_error("generator exploded"); });
  CATCH_CHECK_THROWS_AS(make_schedule("test-throwing", {2, 4, 1}), std::invalid_argument);
  CATCH_CHECK_THROWS_WITH(make_schedule("test-throwing", {2, 4, 1}),
                          "schedule 'test-throwing': its generator failed: generator exploded");
  register_policy("test-factory-throws", [](const policy_request& r) -> std::unique_ptr<rank_policy> {
    if (r.rank == 1) throw 7;
    return greedy_factory()(r);
  });
  CATCH_CHECK_THROWS_AS(make_policies("test-factory-throws", 2, 4, 1), std::invalid_argument);
  CATCH_CHECK_THROWS_WITH(make_policies("test-factory-throws", 2, 4, 1),
                          "policy 'test-factory-throws': its factory failed for rank 1: an exception that is not a "
                          "std::exception");
  CATCH_CHECK_THROWS_WITH(make_policy("greedy", 100000, 100000, 1, 0),
                          "policy 'greedy': stages x chunks x microbatches = 100000 x 1 x 100000 = 10000000000 forward "
                          "passes in one step, more than a plan may hold (1048576)");
}

CATCH_TEST_CASE("what a factory returns is checked before and while it runs", "[schedule][policy][registry]") {
  register_policy("test-null", [](const policy_request&) { return std::unique_ptr<rank_policy>(); });
  CATCH_CHECK_THROWS_WITH(make_policy("test-null", 2, 2, 1, 1), "policy 'test-null' returned no policy for rank 1");

  auto listing = [](std::vector<action> listed) {
    return [listed](const policy_request&) { return std::make_unique<scripted_policy>(listed, listed); };
  };
  const action F00{op_kind::forward, 0, 0}, B00{op_kind::backward, 0, 0}, I00{op_kind::input_grad, 0, 0},
      W00{op_kind::weight_grad, 0, 0}, F10{op_kind::forward, 1, 0}, F01{op_kind::forward, 0, 1};
  register_policy("test-list", listing({F00, B00, F10}));
  CATCH_CHECK_THROWS_WITH(make_policy("test-list", 2, 1, 1, 0),
                          "policy 'test-list' for rank 0 lists F1.0, which is not one of the rank's actions");
  register_policy("test-list", listing({F00, B00, F01}));
  CATCH_CHECK_THROWS_WITH(make_policy("test-list", 2, 1, 1, 0),
                          "policy 'test-list' for rank 0 lists F0.1, which is not one of the rank's actions");
  register_policy("test-list", listing({F00, B00, B00}));
  CATCH_CHECK_THROWS_WITH(make_policy("test-list", 2, 1, 1, 0), "policy 'test-list' for rank 0 lists B0.0 twice");
  register_policy("test-list", listing({B00}));
  CATCH_CHECK_THROWS_WITH(make_policy("test-list", 2, 1, 1, 0), "policy 'test-list' for rank 0 does not list F0.0");
  register_policy("test-list", listing({F00}));
  CATCH_CHECK_THROWS_WITH(make_policy("test-list", 2, 1, 1, 0), "policy 'test-list' for rank 0 lists neither B0.0 nor I0.0");
  register_policy("test-list", listing({F00, I00}));
  CATCH_CHECK_THROWS_WITH(make_policy("test-list", 2, 1, 1, 0), "policy 'test-list' for rank 0 lists I0.0 without W0.0");
  register_policy("test-list", listing({F00, B00, I00, W00}));
  CATCH_CHECK_THROWS_WITH(make_policy("test-list", 2, 1, 1, 0),
                          "policy 'test-list' for rank 0 lists B0.0 and a split backward of it too");
  register_policy("test-list", listing({F00, I00, W00}));
  CATCH_CHECK_NOTHROW(make_policy("test-list", 2, 1, 1, 0));

  // Picks are checked as it runs: ready, its own, once.
  auto picking = [](std::vector<action> picks) {
    return [picks](const policy_request& r) {
      std::vector<action> listed;
      for (int v : r.place.virtual_stages_of(r.rank))
        for (int m = 0; m < r.microbatches; ++m) listed.insert(listed.end(), {{op_kind::forward, v, m}, {op_kind::backward, v, m}});
      return std::make_unique<scripted_policy>(listed, picks);
    };
  };
  auto everything_ready = [](const action&) { return true; };
  auto nothing_ready = [](const action&) { return false; };
  register_policy("test-picks", picking({B00}));
  CATCH_CHECK_THROWS_WITH(make_policy("test-picks", 1, 1, 1, 0)->next(nothing_ready),
                          "policy 'test-picks' on rank 0 picked B0.0, whose inputs have not arrived (a policy may "
                          "only pick ready actions)");
  register_policy("test-picks", picking({F00, F00}));
  auto twice = make_policy("test-picks", 1, 1, 1, 0);
  twice->reset();
  CATCH_CHECK(twice->next(everything_ready) == F00);
  CATCH_CHECK_THROWS_WITH(twice->next(everything_ready),
                          "policy 'test-picks' on rank 0 picked F0.0, which it had picked before in this step");
  register_policy("test-picks", picking({F10}));
  CATCH_CHECK_THROWS_WITH(make_policy("test-picks", 2, 1, 1, 0)->next(everything_ready),
                          "policy 'test-picks' on rank 0 picked F1.0, which is not one of the rank's actions");

  // fill() and next_listed() reach the policy through the checks (the base's "nothing" answered
  // for it, and a policy that filled its waits stalled), fill()'s picks checked as next()'s.
  register_policy("test-fills", [=](const policy_request&) { return std::make_unique<filling_policy>(std::vector<action>{F00, B00}); });
  auto filling = make_policy("test-fills", 1, 1, 1, 0);
  filling->reset();
  CATCH_CHECK(filling->next(everything_ready) == std::nullopt);
  CATCH_CHECK(filling->next_listed() == F00);
  CATCH_CHECK(filling->fill(everything_ready) == F00);
  CATCH_CHECK_THROWS_WITH(filling->fill(nothing_ready), "policy 'test-fills' on rank 0 filled a wait with B0.0, whose "
                                                        "inputs have not arrived (a policy may only pick ready actions)");
  filling->reset();
  CATCH_CHECK(filling->fill(everything_ready) == F00);
  filling->reset();  // the policy starts over; the checks' record of this step's picks too
  CATCH_CHECK(filling->fill(everything_ready) == F00);
  // simulate asks fill() too: one rank, F then B, all out of turn.
  const auto simulated = run("test-fills", 1, 1, 1);
  CATCH_CHECK(simulated.executed.ranks[0] == std::vector<action>{F00, B00});

  // As train refuses them, simulate refuses a policy that says it is finished before its rank
  // ran all it lists (it simulated cleanly), and names the rank and the policy of one that
  // throws (its own message was all it said).
  register_policy("test-early", [](const policy_request& r) {
    std::vector<action> listed;
    for (int m = 0; m < r.microbatches; ++m) listed.push_back({op_kind::forward, r.rank, m});
    for (int m = 0; m < r.microbatches; ++m) listed.push_back({op_kind::backward, r.rank, m});
    auto p = std::make_unique<scripted_policy>(listed, listed);
    p->finish_early();
    return p;
  });
  CATCH_CHECK_THROWS_WITH(run("test-early", 1, 2, 1),
                          "rank 0: policy 'test-early' said it was finished after 3 of the 4 actions it lists");
  register_policy("test-throws", [](const policy_request& r) {
    struct throwing final : public rank_policy {
      explicit throwing(int rank) : rank_(rank) {}
      void reset() override {}
      std::optional<action> next(const std::function<bool(const action&)>&) override {
        if (rank_ == 1) throw std::runtime_error("exploded on purpose");
        return std::nullopt;
      }
      void completed(const action&) override {}
      bool finished() const override { return false; }
      std::string waiting_for() const override { return "nothing"; }
      std::vector<action> all_actions() const override {
        return {{op_kind::forward, rank_, 0}, {op_kind::backward, rank_, 0}};
      }
      int rank_;
    };
    return std::make_unique<throwing>(r.rank);
  });
  CATCH_CHECK_THROWS_WITH(run("test-throws", 2, 1, 1), "rank 1: policy 'test-throws' failed: exploded on purpose");
}

CATCH_TEST_CASE("simulate runs a registered policy by name", "[apps][simulate][policy]") {
  using actorpipe::testing::cli;
  waves::register_waves_policy();
  auto r = cli({"simulate", "--schedule", "gpipe-waves", "--stages", "2", "--microbatches", "4", "--print-plan"});
  CATCH_REQUIRE(r.code == 0);
  CATCH_CHECK(r.err.empty());
  CATCH_CHECK_THAT(r.out, Contains("schedule gpipe-waves: stages=2, chunks=1, microbatches=4"));
  CATCH_CHECK_THAT(r.out, Contains("dynamic policy: no plan to validate; it ran in the policy simulator"));
  CATCH_CHECK_THAT(r.out, Contains("0: F0.0 F0.1 B0.0 B0.1 F0.2 F0.3 B0.2 B0.3\n1: F1.0 B1.0 F1.1 B1.1 F1.2 B1.2 F1.3 B1.3"));
  // Unit costs F=1, B=2: a wave of two takes 9, and the next one starts when it has drained.
  CATCH_CHECK_THAT(r.out, Contains("makespan      18"));

  auto list = cli({"simulate", "--list"});
  CATCH_CHECK_THAT(list.out, Contains("gpipe-waves   [dynamic policy] GPipe in waves"));
  CATCH_CHECK_THAT(list.out, Contains("greedy        [dynamic policy] backward first"));

  // From a job config too: the config's pp, num_microbatches and chunks.
  auto c = cli({"simulate", "--set", "schedule=gpipe-waves", "--set", "pp=2", "--set", "num_microbatches=4", "--set",
                "microbatch_size=1", "--format", "json"});
  CATCH_REQUIRE(c.code == 0);
  CATCH_CHECK_THAT(c.out, Contains("\"schedule\": \"gpipe-waves\""));
  CATCH_CHECK_THAT(c.out, Contains("\"makespan\": 18.0"));
}
