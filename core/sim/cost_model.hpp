// Cost model for the simulator: time of F, B, I, W per virtual stage, plus the latency of a
// message between two ranks. Units are arbitrary; the Chrome trace reads them as milliseconds.
#pragma once

#include <string>
#include <vector>

#include "core/schedule/action.hpp"

namespace actorpipe {

struct cost_model {
  // One entry per virtual stage, or a single entry that applies to every virtual stage.
  std::vector<double> forward{1.0};
  std::vector<double> backward{2.0};  // full backward; I + W when built by uniform() without B
  std::vector<double> input_grad{1.0};
  std::vector<double> weight_grad{1.0};
  double send_latency = 0.0;  // added to a message that crosses ranks
  // How B hands on its input gradient. false: at its end (a B as one block, the textbook
  // schedules). true: after its I part (input_grad, when shorter than backward), the W part
  // following on the same rank, as actorpipe's runtime runs B.
  bool early_input_grad = false;

  double cost(const action& a) const;
  // When `a`'s output (F: activation, B or I: input gradient) is ready, counted from its start;
  // before cost(a) only for an early B on a virtual stage after the first.
  double output_after(const action& a) const;

  // Same costs on every virtual stage.
  static cost_model uniform(double f, double b, double i, double w, double send_latency = 0.0);
};

// The largest cost (and send latency) a simulation takes: a step's sum of up to millions of
// them stays finite (1e308 each made the makespan inf).
constexpr double max_cost = 1e100;

// How far apart the costs (and the send latency) of one simulation may be: the largest at most
// max_cost_ratio times the smallest non-zero one. Times are sums of them, and a cost added to a
// time ~1e16 times larger rounds away (--latency 1e18 with costs of 1 drew every action but
// two as taking no time). Within the ratio a step of up to max_plan_forwards forwards keeps each
// cost to better than a thousandth; the simulators check that they do (simulator.hpp).
constexpr double max_cost_ratio = 1e6;

// Parses the --cost flag: "F,B,I,W" (e.g. "1,2,1,1"), "F,,I,W" (B defaults to I+W) or "F,B"
// (no split backward given: I = W = B/2). Each value a plain decimal number (digits, an
// optional point and exponent: no hex, inf or nan) in [0, max_cost], F and B > 0. I and W are
// the parts of a split B, so neither may exceed B; a B given beside them may differ from I + W
// (a fused backward can be cheaper than its two halves), which cost_spec_note reports. The
// largest value may be at most max_cost_ratio times the smallest non-zero one. Throws
// std::invalid_argument naming the flag, the field and the text.
cost_model parse_cost_spec(const std::string& spec);

// A line for a cost model whose (single-entry) B differs from I + W: what each kind of plan
// runs ("--cost B=3 is not I+W = 1+1 = 2: ..."); empty when B = I + W.
std::string cost_spec_note(const cost_model& costs);

// The smallest non-zero cost of any op on any virtual stage (0 when there is none).
double smallest_cost(const cost_model& costs);
// The largest cost of any op on any virtual stage.
double largest_cost(const cost_model& costs);

}  // namespace actorpipe
