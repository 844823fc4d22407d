// Schedule registry: built-ins, user registration at run time, and its errors.
#include <catch2/catch.hpp>

#include "core/schedule/plan_validator.hpp"
#include "core/schedule/schedule_registry.hpp"

using namespace actorpipe;
using Catch::Contains;

CATCH_TEST_CASE("the built-ins are registered in a fixed order", "[schedule][registry]") {
  auto all = list_schedules();
  CATCH_REQUIRE(all.size() >= 6);
  const char* expected[] = {"gpipe", "1f1b", "interleaved", "zb-h1", "zbv", "dualpipev"};
  for (int i = 0; i < 6; ++i) {
    CATCH_CHECK(all[i].name == expected[i]);
    CATCH_CHECK(all[i].builtin);
    CATCH_CHECK(!all[i].description.empty());
    CATCH_CHECK(all[i].default_chunks == default_chunks(all[i].name));
  }
  CATCH_CHECK(default_chunks("1f1b") == 1);
  CATCH_CHECK(default_chunks("interleaved") == 2);
  CATCH_CHECK(default_chunks("zbv") == 2);
  CATCH_CHECK(default_chunks("dualpipev") == 2);
}

CATCH_TEST_CASE("user code registers a schedule at run time and uses it by name", "[schedule][registry]") {
  // Reverse-order GPipe: backwards run from the last microbatch to the first.
  register_schedule(
      "test-gpipe-reversed",
      [](const schedule_request& r) {
        plan p;
        p.place = loop_placement(r.stages, 1);
        p.microbatches = r.microbatches;
        p.ranks.resize(r.stages);
        for (int rank = 0; rank < r.stages; ++rank) {
          for (int m = 0; m < r.microbatches; ++m) p.ranks[rank].push_back({op_kind::forward, rank, m});
          for (int m = r.microbatches - 1; m >= 0; --m) p.ranks[rank].push_back({op_kind::backward, rank, m});
        }
        return p;
      },
      "gpipe with backwards in reverse");
  CATCH_CHECK(has_schedule("test-gpipe-reversed"));
  plan p = make_schedule("test-gpipe-reversed", {3, 4, 1});
  CATCH_CHECK(p.name == "test-gpipe-reversed");
  CATCH_CHECK(p.ranks[0].back() == action{op_kind::backward, 0, 0});
  CATCH_CHECK(validate_plan(p).peak_activations == std::vector<int>{4, 4, 4});
  bool listed = false;
  for (auto& s : list_schedules())
    if (s.name == "test-gpipe-reversed") listed = !s.builtin && s.description == "gpipe with backwards in reverse";
  CATCH_CHECK(listed);
}

CATCH_TEST_CASE("registry errors are clear", "[schedule][registry]") {
  auto trivial = [](const schedule_request& r) { return make_schedule("gpipe", r); };
  CATCH_CHECK_THROWS_WITH(register_schedule("1f1b", trivial),
                          "register_schedule: '1f1b' is a built-in schedule; pick another name");
  CATCH_CHECK_THROWS_WITH(register_schedule("my schedule", trivial), Contains("must be non-empty without whitespace"));
  CATCH_CHECK_THROWS_WITH(register_schedule("", trivial), Contains("must be non-empty"));
  CATCH_CHECK_THROWS_WITH(register_schedule("empty-fn", schedule_generator{}), Contains("generator for 'empty-fn' is empty"));
  CATCH_CHECK_THROWS_WITH(register_schedule("zero-chunks", trivial, "", 0),
                          "register_schedule: default_chunks=0 for 'zero-chunks' must be >= 1");
  CATCH_CHECK_THROWS_WITH(make_schedule("no-such", {2, 2, 1}),
                          Contains("unknown schedule 'no-such' (known: 1f1b, dualpipev, gpipe, interleaved,"));

  // A user generator whose plan is broken is caught before anything runs.
  register_schedule("test-broken", [](const schedule_request& r) {
    plan p = make_schedule("1f1b", r);
    std::swap(p.ranks[0].front(), p.ranks[0].back());  // a backward before its forward
    return p;
  });
  CATCH_CHECK_THROWS_WITH(make_schedule("test-broken", {2, 2, 1}),
                          Contains("invalid schedule 'test-broken': dependency order: rank 0, position 0 (B0.1)"));
  // One that answers a different question is caught too.
  register_schedule("test-wrong-size", [](const schedule_request&) { return make_schedule("1f1b", {2, 2, 1}); });
  CATCH_CHECK_THROWS_WITH(make_schedule("test-wrong-size", {3, 3, 1}),
                          Contains("returned a plan for stages=2, microbatches=2, chunks=1 when asked for stages=3"));
}
