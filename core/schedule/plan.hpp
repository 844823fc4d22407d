// Plan: a placement plus each rank's ordered list of actions. A schedule is data: it can be
// printed, parsed, diffed, validated and simulated before anything runs.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "core/schedule/action.hpp"
#include "core/schedule/placement.hpp"

namespace actorpipe {

struct plan {
  std::string name;  // schedule that produced it ("1f1b", a file path, ...)
  placement place;
  int microbatches = 0;
  std::vector<std::vector<action>> ranks;  // ranks[r] = rank r's actions, in order

  int num_ranks() const { return place.ranks; }
  int num_virtual_stages() const { return place.num_virtual_stages(); }
  int chunks() const { return place.chunks(); }
  bool uses_split_backward() const;
};

// The most forward passes (virtual stages x microbatches) one step's plan may hold: about a
// million, ~0.3 GB of plan and simulation. Past it a typo (-M 100000000) would eat the
// machine's memory for minutes before failing.
constexpr long long max_plan_forwards = 1LL << 20;

// Throws std::invalid_argument naming stages, chunks and microbatches when stages x chunks x
// microbatches exceeds max_plan_forwards. `who` starts the message ("schedule '1f1b'").
void check_plan_size(const std::string& who, int stages, int chunks, int microbatches);

// A run's count of `what` against a plan file's: std::invalid_argument "the run has 4 stages
// (--stages) but schedule file 'p.txt' has 2" where they differ. `what` names the count and
// where the run took it ("stages (--stages)").
void require_plan_file_count(const std::string& file, const std::string& what, int given, int in_file);

// What must have completed before an action may start. Sends and receives are implied:
// a dependency on another rank's action is a message from that rank.
struct dependency {
  enum class kind { forward, input_grad } what;  // F done / B-or-I done
  int virtual_stage;
  int microbatch;
};

// F(v,m) <- F(v-1,m); B/I(v,m) <- F(v,m) and B-or-I(v+1,m); W(v,m) <- I(v,m).
// Writes at most two entries into out and returns how many.
int dependencies_of(const action& a, int num_virtual_stages, dependency out[2]);

// Runs the plan abstractly: each rank advances through its list while its next action's
// dependencies are done, calling visit(rank, action) for every action in an order that respects
// them. Returns how far each rank got: all of its list unless the plan deadlocks or lists an
// action before one it needs. Requires the plan's actions to be in range (validate_plan checks).
std::vector<size_t> walk_plan(const plan& p, const std::function<void(int rank, const action& a)>& visit);

// The text form: one line per rank, "RANK: ACTION ACTION ...". Round-trips with parse_plan.
std::string format_plan(const plan& p);

// Parses the text form. Blank lines and '#' comments are ignored; ranks must be 0..P-1, each
// listed once; the placement is inferred from which rank lists each virtual stage, and a
// virtual stage listed by two ranks is an error. Throws std::invalid_argument with the line
// number and the offending text.
plan parse_plan(const std::string& text, const std::string& name = "plan");

// Reads a plan file's text (at most 128 MiB); errors name the path. A pipe can be read once
// only: a caller that needs the plan twice reads its text once and parses that.
std::string read_plan_file(const std::string& path);

// Reads and parses a plan file; errors name the path.
plan load_plan_file(const std::string& path);

// Gradients accumulate in the order a virtual stage's backwards run (its B's, or its I's and
// W's: an I adds the gradients of what it does not defer to W), which every built-in schedule
// lists in microbatch order. For a plan that does not: a sentence naming the first such
// virtual stage and op, and how many more ("virtual stage 0 runs its B's (which add up
// gradients) for microbatches 3, 2, 1, 0"); else empty.
std::string backward_order_note(const plan& p);

}  // namespace actorpipe
