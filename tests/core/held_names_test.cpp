#include "core/held_names.hpp"

#include <catch2/catch.hpp>

using namespace actorpipe;

CATCH_TEST_CASE("held_name_clash names the first name two virtual stages of one replica hold", "[train]") {
  // Replicas hold every name once each; one stage's names are its own check.
  const std::vector<held_name> clear = {{"a.w", 0, 0, 0, false}, {"b.w", 0, 1, 1, false}, {"a.w", 1, 0, 0, false},
                                        {"b.w", 1, 1, 1, false}, {"a.mean", 0, 0, 0, true}};
  CATCH_CHECK(held_name_clash(clear, 2, 2).empty());
  CATCH_CHECK(held_name_clash({}, 1, 1).empty());
  // In one process: the stages alone.
  CATCH_CHECK(held_name_clash({{"p.w", 0, 0, 0, false}, {"q", 0, 1, 0, false}, {"p.w", 0, 2, 0, false}}, 1, 1) ==
              "parameter 'p.w' is held by virtual stages 0 and 2: two layers give their parameters the same names "
              "(give them distinct param prefixes)");
  // Across processes, each stage's process; with replicas, the replica.
  CATCH_CHECK(held_name_clash({{"p.w", 1, 0, 0, false}, {"p.w", 1, 3, 2, false}}, 2, 3) ==
              "parameter 'p.w' is held by virtual stages 0 (process 0) and 3 (process 2) of replica 1: two layers give "
              "their parameters the same names (give them distinct param prefixes)");
  // Buffers, and a buffer against a parameter.
  CATCH_CHECK(held_name_clash({{"bn.mean", 0, 0, 0, true}, {"bn.mean", 0, 1, 1, true}}, 1, 2) ==
              "buffer 'bn.mean' is held by virtual stages 0 (process 0) and 1 (process 1): two layers give their "
              "buffers the same names (give them distinct param prefixes)");
  CATCH_CHECK_THAT(held_name_clash({{"x", 0, 0, 0, false}, {"x", 0, 1, 0, true}}, 1, 1),
                   Catch::StartsWith("tensor 'x' is held by virtual stages 0 and 1: two layers give their tensors"));
}
