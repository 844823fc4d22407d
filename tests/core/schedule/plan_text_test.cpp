// Text form of actions and plans: parsing, printing, round trips and the errors users see.
#include <catch2/catch.hpp>

#include "core/schedule/plan.hpp"
#include "core/schedule/schedule_registry.hpp"

using namespace actorpipe;
using Catch::Contains;

CATCH_TEST_CASE("actions print and parse", "[schedule][text]") {
  action a{op_kind::weight_grad, 5, 1};
  CATCH_CHECK(to_string(a) == "W5.1");
  CATCH_CHECK(parse_action("W5.1") == a);
  CATCH_CHECK(parse_action("F0.3") == action{op_kind::forward, 0, 3});
  CATCH_CHECK(parse_action("I12.345") == action{op_kind::input_grad, 12, 345});
  CATCH_CHECK_THROWS_WITH(parse_action("X0.1"), Contains("bad action 'X0.1': unknown op"));
  CATCH_CHECK_THROWS_WITH(parse_action("F012"), Contains("missing '.'"));
  CATCH_CHECK_THROWS_WITH(parse_action("F-1.0"), Contains("virtual stage is not a number"));
  CATCH_CHECK_THROWS_WITH(parse_action("F1.x"), Contains("microbatch is not a number"));
  CATCH_CHECK_THROWS_WITH(parse_action("F1."), Contains("too short"));
  CATCH_CHECK_THROWS_WITH(parse_action("F1.99999999999"), Contains("microbatch is past any plan"));
}

CATCH_TEST_CASE("every built-in plan round-trips through its text form exactly", "[schedule][text]") {
  struct req { const char* name; int P, M, V; };
  for (auto r : {req{"gpipe", 3, 5, 1}, req{"gpipe", 2, 4, 3}, req{"1f1b", 4, 8, 1}, req{"interleaved", 4, 8, 2},
                 req{"interleaved", 2, 6, 3}, req{"zb-h1", 4, 6, 1}, req{"zbv", 3, 7, 2}}) {
    CATCH_CAPTURE(r.name, r.P, r.M, r.V);
    plan p = make_schedule(r.name, {r.P, r.M, r.V});
    std::string text = format_plan(p);
    plan q = parse_plan(text, "roundtrip");
    CATCH_CHECK(format_plan(q) == text);
    CATCH_CHECK(q.ranks == p.ranks);
    CATCH_CHECK(q.place.rank_of == p.place.rank_of);
    CATCH_CHECK(q.place.chunk_of == p.place.chunk_of);
    CATCH_CHECK(q.place.kind == p.place.kind);
    CATCH_CHECK(q.microbatches == p.microbatches);
  }
}

CATCH_TEST_CASE("plan text ignores comments and blank lines and infers the placement", "[schedule][text]") {
  plan p = parse_plan(
      "# two ranks, V-shape, one microbatch\n"
      "\n"
      "0: F0.0  F3.0 B3.0 B0.0   # rank 0 holds the first and the last virtual stage\n"
      "   \n"
      "1: F1.0 F2.0 B2.0 B1.0\n");
  CATCH_REQUIRE(p.num_ranks() == 2);
  CATCH_CHECK(p.num_virtual_stages() == 4);
  CATCH_CHECK(p.chunks() == 2);
  CATCH_CHECK(p.microbatches == 1);
  CATCH_CHECK(p.place.kind == "v-shape");
  CATCH_CHECK(p.place.rank_of == std::vector<int>{0, 1, 1, 0});
  CATCH_CHECK(p.place.chunk_of == std::vector<int>{0, 0, 1, 1});
  CATCH_CHECK(p.ranks[0].size() == 4);

  plan loop = parse_plan("1: F1.0 F3.0 B3.0 B1.0\n0: F0.0 F2.0 B2.0 B0.0\n");
  CATCH_CHECK(loop.place.kind == "loop");
  CATCH_CHECK(loop.ranks[0].front() == action{op_kind::forward, 0, 0});  // ordered by rank, not by line
  CATCH_CHECK(parse_plan("0: F1.0 B1.0 F0.0 B0.0\n1: F2.0 B2.0 F3.0 B3.0\n").place.kind == "custom");
}

CATCH_TEST_CASE("malformed plan text is rejected with the line and the reason", "[schedule][text]") {
  CATCH_CHECK_THROWS_WITH(parse_plan("0: F0.0 B0.0\nfoo\n", "p.txt"), Contains("p.txt:2: expected 'RANK: ACTION ...'"));
  CATCH_CHECK_THROWS_WITH(parse_plan("x: F0.0\n", "p.txt"), Contains("p.txt:1: rank 'x' is not a non-negative integer"));
  CATCH_CHECK_THROWS_WITH(parse_plan("0: F0.0 B0.0\n0: F0.1\n", "p.txt"),
                          Contains("p.txt:2: rank 0 is listed twice (first on line 1)"));
  CATCH_CHECK_THROWS_WITH(parse_plan("0: F0.0 B0.0 F1.0\n1: F1.0 B1.0\n", "p.txt"),
                          Contains("virtual stage 1 is listed by rank 1 and by rank 0 (line 1)"));
  CATCH_CHECK_THROWS_WITH(parse_plan("0: F0.0 Z0.0\n", "p.txt"), Contains("p.txt:1: bad action 'Z0.0'"));
  // Numbers too big for any plan are named as such, not as "not a number".
  CATCH_CHECK_THROWS_WITH(parse_plan("0: F0.4294967297\n", "p.txt"), Contains("microbatch is past any plan"));
  CATCH_CHECK_THROWS_WITH(parse_plan("0: F99999999999.0\n", "p.txt"), Contains("virtual stage is past any plan"));
  CATCH_CHECK_THROWS_WITH(parse_plan("0: Fx.0\n", "p.txt"), Contains("virtual stage is not a number"));
  CATCH_CHECK_THROWS_WITH(parse_plan("1000000: F0.0\n", "p.txt"),
                          Contains("rank '1000000' is past any plan (at most 999999 ranks)"));
  // Leading zeros name a small rank ("0000000" was "past any plan" where it is rank 0 twice).
  CATCH_CHECK_THROWS_WITH(parse_plan("0: F0.0 B0.0\n0000000: F0.1 B0.1\n", "p.txt"),
                          Contains("p.txt:2: rank 0 is listed twice (first on line 1)"));
  CATCH_CHECK(parse_plan("0: F0.0 B0.0\n0000001: F1.0 B1.0\n", "p.txt").num_ranks() == 2);
  CATCH_CHECK_THROWS_WITH(parse_plan("-1: F0.0\n", "p.txt"), Contains("rank '-1' is not a non-negative integer"));
  CATCH_CHECK_THROWS_WITH(parse_plan("0: F0.0 B0.0\n2: F2.0 B2.0\n", "p.txt"), Contains("rank 1 is missing"));
  CATCH_CHECK_THROWS_WITH(parse_plan("0: F0.0 B0.0\n1: F2.0 B2.0\n", "p.txt"),
                          Contains("virtual stage 1 appears on no rank"));
  // A byte-order mark and CR-only line ends are text; a NUL inside an action is named.
  CATCH_CHECK(parse_plan("\xEF\xBB\xBF" "0: F0.0 B0.0\r1: F1.0 B1.0\r", "p.txt").num_ranks() == 2);
  CATCH_CHECK_THROWS_WITH(parse_plan(std::string("0: F0.0 B0\0.0\n", 14), "p.txt"),
                          "p.txt:1: bad action 'B0\\x00.0': it holds a control character");
  // A huge index is found missing its lower neighbours without a table of that size (4 GB).
  CATCH_CHECK_THROWS_WITH(parse_plan("0: F999999999.0 B999999999.0\n", "p.txt"),
                          Contains("virtual stage 0 appears on no rank (virtual stages go 0..999999999)"));
  CATCH_CHECK_THROWS_WITH(parse_plan("0: F0.0 F2.0\n1: F1.0\n", "p.txt"),
                          Contains("rank 1 owns 1 virtual stage but rank 0 owns 2"));
  CATCH_CHECK_THROWS_WITH(parse_plan("0: F0.0 B0.0\n1:\n", "p.txt"), Contains("rank 1 owns no virtual stage"));
  CATCH_CHECK_THROWS_WITH(parse_plan("# nothing\n\n", "p.txt"), Contains("p.txt: no ranks listed"));
  // Ranks with no actions at all (it crashed, SIGSEGV).
  for (const char* text : {"0:\n", "0:\n1:\n", "1:\n0:\n", "0: # nothing\n"})
    CATCH_CHECK_THROWS_WITH(parse_plan(text, "p.txt"), Contains("p.txt: no actions listed"));
  CATCH_CHECK_THROWS_WITH(load_plan_file("/nonexistent/plan.txt"),
                          Contains("cannot read schedule file '/nonexistent/plan.txt'"));
  CATCH_CHECK_THROWS_WITH(load_plan_file("/tmp"), "schedule file '/tmp' is a directory");
  // An endless file is not read for ever (nor until memory runs out).
  CATCH_CHECK_THROWS_WITH(load_plan_file("/dev/zero"), "schedule file '/dev/zero' holds more than 128 MiB: no plan is "
                                                       "that long (at most 1048576 forwards)");
  // A binary file's bytes are shown escaped, a long line cut.
  CATCH_CHECK_THROWS_WITH(parse_plan(std::string("\x00\x01garbage\xff\n", 11), "p.bin"),
                          "p.bin:1: expected 'RANK: ACTION ...', got '\\x00\\x01garbage\\xff'");
  CATCH_CHECK_THROWS_WITH(parse_plan(std::string(200, 'a') + "\n", "p.txt"),
                          "p.txt:1: expected 'RANK: ACTION ...', got '" + std::string(80, 'a') + "...'");
  // A microbatch index no step could hold is refused before anything is sized by it.
  CATCH_CHECK_THROWS_WITH(parse_plan("0: F0.99999999 B0.99999999\n", "p.txt"),
                          "p.txt: stages x chunks x microbatches = 1 x 1 x 100000000 = 100000000 forward passes in one "
                          "step, more than a plan may hold (1048576)");
}
