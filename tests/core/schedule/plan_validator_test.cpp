// Validator: hand-written bad plans are rejected with the right message; good ones report
// their peak activations.
#include <catch2/catch.hpp>

#include "core/schedule/plan_validator.hpp"

using namespace actorpipe;
using Catch::Contains;

namespace {
std::string errors_of(const std::string& text) {
  auto rep = validate_plan(parse_plan(text, "bad"));
  std::string all;
  for (auto& e : rep.errors) all += e + "\n";
  return all;
}
}  // namespace

CATCH_TEST_CASE("a hand-written 1F1B plan is valid and its memory is counted", "[schedule][validator]") {
  plan p = parse_plan(
      "0: F0.0 F0.1 B0.0 F0.2 B0.1 B0.2\n"
      "1: F1.0 B1.0 F1.1 B1.1 F1.2 B1.2\n");
  auto rep = validate_plan(p);
  CATCH_REQUIRE(rep.ok());
  CATCH_CHECK(rep.peak_activations == std::vector<int>{2, 1});
  CATCH_CHECK(rep.peak_pending_weight_grads == std::vector<int>{0, 0});
}

CATCH_TEST_CASE("split backward: I frees the activation, W is counted as pending", "[schedule][validator]") {
  plan p = parse_plan(
      "0: F0.0 F0.1 I0.0 I0.1 W0.0 W0.1\n"
      "1: F1.0 I1.0 F1.1 I1.1 W1.0 W1.1\n");
  auto rep = validate_plan(p);
  CATCH_REQUIRE(rep.ok());
  CATCH_CHECK(rep.peak_activations == std::vector<int>{2, 1});
  CATCH_CHECK(rep.peak_pending_weight_grads == std::vector<int>{2, 2});
  CATCH_CHECK(p.uses_split_backward());
}

CATCH_TEST_CASE("incomplete plans are rejected", "[schedule][validator]") {
  CATCH_CHECK_THAT(errors_of("0: F0.0 F0.1 B0.0\n1: F1.0 B1.0 F1.1 B1.1\n"),
                   Contains("no backward for virtual stage 0, microbatch 1: needs B0.1 or I0.1 then W0.1 (rank 0)"));
  CATCH_CHECK_THAT(errors_of("0: F0.0 B0.0 B0.1\n1: F1.0 B1.0 F1.1 B1.1\n"), Contains("F0.1 is missing (rank 0)"));
  CATCH_CHECK_THAT(errors_of("0: F0.0 B0.0 F0.0\n1: F1.0 B1.0\n"),
                   Contains("rank 0, position 2 (F0.0): listed twice (first at position 0)"));
  CATCH_CHECK_THAT(errors_of("0: F0.0 I0.0\n1: F1.0 B1.0\n"), Contains("I0.0 has no matching W0.0"));
  CATCH_CHECK_THAT(errors_of("0: F0.0 B0.0 W0.0\n1: F1.0 B1.0\n"),
                   Contains("B0.0 and a split backward (I/W) are both listed"));
  CATCH_CHECK_THAT(errors_of("0: F0.0 W0.0 B0.0\n1: F1.0 B1.0\n"), Contains("B0.0 and a split backward"));
}

CATCH_TEST_CASE("out-of-order actions on one rank are a dependency-order error", "[schedule][validator]") {
  CATCH_CHECK_THAT(errors_of("0: F0.0 W0.0 I0.0\n1: F1.0 B1.0\n"),
                   Contains("dependency order: rank 0, position 1 (W0.0) needs I0.0, which rank 0 runs later at "
                            "position 2"));
  CATCH_CHECK_THAT(errors_of("0: F0.0 B0.0\n1: B1.0 F1.0\n"),
                   Contains("dependency order: rank 1, position 0 (B1.0) needs F1.0, which rank 1 runs later at "
                            "position 1"));
  // A V-shape rank that runs its last-stage forward before its first-stage one.
  CATCH_CHECK_THAT(errors_of("0: F3.0 F0.0 B3.0 B0.0\n1: F1.0 F2.0 B2.0 B1.0\n"),
                   Contains("deadlock: no rank can proceed"));
}

CATCH_TEST_CASE("a cross-rank wait cycle is a deadlock naming the stuck ranks", "[schedule][validator]") {
  // Rank 1 insists on microbatch 1 first; rank 0 insists on finishing microbatch 0 first.
  std::string e = errors_of(
      "0: F0.0 B0.0 F0.1 B0.1\n"
      "1: F1.1 F1.0 B1.0 B1.1\n");
  CATCH_CHECK_THAT(e, Contains("deadlock: no rank can proceed"));
  CATCH_CHECK_THAT(e, Contains("rank 0, position 1 (B0.0) waits for B1.0 on rank 1, position 2"));
  CATCH_CHECK_THAT(e, Contains("rank 1, position 0 (F1.1) waits for F0.1 on rank 0, position 2"));
  // Every rank stuck: eight named, the rest counted (1000 ranks made a line of 80 KB).
  std::string many = "0: F0.0 B0.0 F0.1 B0.1\n";
  for (int r = 1; r < 12; ++r) {
    const std::string v = std::to_string(r);
    many += v + ": F" + v + ".1 F" + v + ".0 B" + v + ".0 B" + v + ".1\n";
  }
  e = errors_of(many);
  CATCH_CHECK_THAT(e, Contains("deadlock: no rank can proceed: rank 0, position 1 (B0.0) waits for B1.0"));
  CATCH_CHECK_THAT(e, Contains("; and 4 more"));
  CATCH_CHECK(e.find("rank 9,") == std::string::npos);
}

CATCH_TEST_CASE("actions outside the plan's ranges or placement are rejected", "[schedule][validator]") {
  plan p = parse_plan("0: F0.0 B0.0\n1: F1.0 B1.0\n", "p");
  p.ranks[0].push_back({op_kind::forward, 1, 0});
  CATCH_CHECK_THAT(validate_plan(p).errors.at(0), Contains("rank 0, position 2 (F1.0): virtual stage 1 lives on rank 1"));
  p = parse_plan("0: F0.0 B0.0\n1: F1.0 B1.0\n", "p");
  p.ranks[1].push_back({op_kind::forward, 7, 0});
  CATCH_CHECK_THAT(validate_plan(p).errors.at(0), Contains("virtual stage 7 is out of range 0..1"));
  p = parse_plan("0: F0.0 B0.0\n1: F1.0 B1.0\n", "p");
  p.ranks[1].push_back({op_kind::forward, 1, 3});
  CATCH_CHECK_THAT(validate_plan(p).errors.at(0), Contains("microbatch 3 is out of range 0..0"));
}

CATCH_TEST_CASE("require_valid throws one line with the first errors", "[schedule][validator]") {
  plan p = parse_plan("0: F0.0 F0.1 F0.2 F0.3 F0.4\n", "five-forwards");
  try {
    require_valid(p);
    CATCH_FAIL("expected an exception");
  } catch (const std::invalid_argument& e) {
    std::string msg = e.what();
    CATCH_CHECK_THAT(msg, Contains("invalid schedule 'five-forwards': incomplete: no backward"));
    CATCH_CHECK_THAT(msg, Contains("; and 2 more"));
    CATCH_CHECK(msg.find('\n') == std::string::npos);
  }
}

CATCH_TEST_CASE("a placement the runtime cannot index and an unknown op are rejected, naming them", "[schedule][validator]") {
  // A generator that set rank_of alone (chunk_of left empty) passed, and simulate and train
  // crashed indexing chunk_of; one whose ranks own different numbers of virtual stages failed
  // at train time with "layer range [0, 0) is empty".
  const plan good = parse_plan(
      "0: F0.0 F0.1 B0.0 B0.1\n"
      "1: F1.0 B1.0 F1.1 B1.1\n");
  auto errors = [](const plan& p) {
    std::string all;
    for (auto& e : validate_plan(p).errors) all += e + "\n";
    return all;
  };
  CATCH_REQUIRE(errors(good).empty());
  plan p = good;
  p.place.chunk_of.clear();
  CATCH_CHECK_THAT(errors(p), Contains("placement.chunk_of has 0 entries for 2 virtual stages (placement_from_ranks fills it"));
  p = good;
  p.place.chunk_of = {0, 5};
  CATCH_CHECK_THAT(errors(p), Contains("placement.chunk_of[1]=5, but virtual stage 1 is rank 1's chunk 0"));
  p = good;
  p.place.rank_of = {0, 2};
  CATCH_CHECK_THAT(errors(p), Contains("placement.rank_of[1]=2 is out of range 0..1"));
  // 3 ranks, 4 virtual stages: rank 0 owns stages 0 and 3.
  plan uneven = parse_plan("0: F0.0 B0.0\n1: F1.0 B1.0\n2: F2.0 B2.0\n");
  uneven.place.rank_of = {0, 1, 2, 0};
  uneven.place.chunk_of = {0, 0, 0, 1};
  CATCH_CHECK_THAT(errors(uneven), Contains("placement: rank 0 owns 2 of 4 virtual stages over 3 ranks: every rank must "
                                            "own the same number of chunks"));
  p = good;
  p.ranks[0][1].op = static_cast<op_kind>(7);
  CATCH_CHECK_THAT(errors(p), Contains("rank 0, position 1: op code 7 is not F, B, I or W"));
}

// The validator indexes every (op, virtual stage, microbatch) in a table of that size: a plan
// object whose microbatch count is past any plan (parse_plan and the generators refuse one) is
// one error, not an allocation of gigabytes.
CATCH_TEST_CASE("a plan of more forward passes than a plan may hold is refused by the validator", "[schedule][validator]") {
  plan p = parse_plan("0: F0.0 B0.0\n1: F1.0 B1.0\n");
  p.microbatches = 1 << 30;
  const auto rep = validate_plan(p);
  CATCH_REQUIRE(rep.errors.size() == 1);
  CATCH_CHECK(rep.errors[0] == "plan has 2 virtual stages x 1073741824 microbatches = 2147483648 forward passes, more "
                               "than a plan may hold (1048576)");
}
