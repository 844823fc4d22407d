// The rank grid: rank numbering, the groups, the printed layout, bad sizes.
#include <catch2/catch.hpp>

#include "core/topology.hpp"

using namespace actorpipe;
using Catch::Contains;

CATCH_TEST_CASE("a 2 x 2 grid numbers ranks pipeline by pipeline") {
  const rank_grid g = make_rank_grid(2, 2);
  CATCH_CHECK(g.world() == 4);
  CATCH_CHECK(g.rank(1, 0) == 2);
  CATCH_CHECK(g.replica_of(3) == 1);
  CATCH_CHECK(g.pipeline_rank_of(3) == 1);
  CATCH_CHECK(g.pipeline(1) == std::vector<int>{2, 3});
  CATCH_CHECK(g.data_parallel_group(1) == std::vector<int>{1, 3});
  CATCH_CHECK(g.describe() == "pipelines (ranks): 0-1 | 2-3; data-parallel groups: 0,2 | 1,3");
}

CATCH_TEST_CASE("a grid of one pipeline is the pipeline") {
  const rank_grid g = make_rank_grid(3, 1);
  CATCH_CHECK(g.describe() == "pipelines (ranks): 0-2; data-parallel groups: 0 | 1 | 2");
  CATCH_CHECK(make_rank_grid(1, 3).describe() == "pipelines (ranks): 0 | 1 | 2; data-parallel groups: 0,1,2");
}

CATCH_TEST_CASE("a grid with no ranks is refused, naming the option") {
  CATCH_CHECK_THROWS_WITH(make_rank_grid(2, 0), Contains("--dp=0 must be >= 1"));
  CATCH_CHECK_THROWS_WITH(make_rank_grid(0, 2), Contains("--stages=0 must be >= 1"));
}
