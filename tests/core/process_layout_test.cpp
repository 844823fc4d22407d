// Which process hosts which ranks: even spreads, explicit counts, and the errors.
#include <catch2/catch.hpp>

#include "core/process_layout.hpp"

using namespace actorpipe;

CATCH_TEST_CASE("ranks spread evenly over processes, process 0 first", "[process_layout]") {
  CATCH_CHECK(assign_ranks_to_processes(4, 1) == std::vector<int>{0, 0, 0, 0});
  CATCH_CHECK(assign_ranks_to_processes(4, 2) == std::vector<int>{0, 0, 1, 1});
  CATCH_CHECK(assign_ranks_to_processes(4, 4) == std::vector<int>{0, 1, 2, 3});
  CATCH_CHECK(assign_ranks_to_processes(5, 2) == std::vector<int>{0, 0, 0, 1, 1});
  CATCH_CHECK(assign_ranks_to_processes(7, 3) == std::vector<int>{0, 0, 0, 1, 1, 2, 2});
}

CATCH_TEST_CASE("explicit ranks per process are placed as asked", "[process_layout]") {
  CATCH_CHECK(assign_ranks_to_processes(4, 2, {1, 3}) == std::vector<int>{0, 1, 1, 1});
  CATCH_CHECK(assign_ranks_to_processes(4, 3, {2, 1, 1}) == std::vector<int>{0, 0, 1, 2});
  CATCH_CHECK(parse_ranks_per_process("1,3") == std::vector<int>{1, 3});
  CATCH_CHECK(parse_ranks_per_process("4") == std::vector<int>{4});
}

CATCH_TEST_CASE("bad layouts are one error naming the values", "[process_layout]") {
  CATCH_CHECK_THROWS_WITH(assign_ranks_to_processes(2, 4),
                          "WORLD_SIZE=4 processes but the job has --stages=2 ranks: every process needs at least one rank");
  CATCH_CHECK_THROWS_WITH(assign_ranks_to_processes(4, 2, {1, 2}),
                          "--ranks-per-process=1,2 sums to 3 but the job has --stages=4 ranks");
  CATCH_CHECK_THROWS_WITH(assign_ranks_to_processes(4, 3, {2, 2}),
                          "--ranks-per-process=2,2 has 2 entries but the job has WORLD_SIZE=3 processes");
  CATCH_CHECK_THROWS_WITH(assign_ranks_to_processes(4, 2, {4, 0}),
                          "--ranks-per-process=4,0: every process needs at least one rank");
  CATCH_CHECK_THROWS_WITH(assign_ranks_to_processes(4, 0), "WORLD_SIZE=0 must be >= 1");
  CATCH_CHECK_THROWS_WITH(parse_ranks_per_process("1,x"),
                          "--ranks-per-process='1,x': 'x' is not a count of ranks (whole numbers >= 1, e.g. 1,3)");
  CATCH_CHECK_THROWS_WITH(parse_ranks_per_process("1,2.5"),
                          "--ranks-per-process='1,2.5': '2.5' is not a count of ranks (whole numbers >= 1, e.g. 1,3)");
  CATCH_CHECK_THROWS_WITH(parse_ranks_per_process(""), "--ranks-per-process is empty (expected e.g. 1,3)");
  // Read as written (a trailing empty entry, a blank and a sign were taken).
  for (const auto& [text, item] : std::vector<std::pair<std::string, std::string>>{{"1,1,", ""}, {" 1,1", " 1"}, {"1,+1", "+1"}})
    CATCH_CHECK_THROWS_WITH(parse_ranks_per_process(text),
                            "--ranks-per-process='" + text + "': '" + item + "' is not a count of ranks (whole numbers >= 1, e.g. 1,3)");
}
