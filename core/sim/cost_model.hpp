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

// Parses the --cost flag: "F,B,I,W" (e.g. "1,2,1,1"), "F,,I,W" (B defaults to I+W) or "F,B"
// (no split backward given: I = W = B/2). Each value a number in [0, max_cost], F and B > 0.
// Throws std::invalid_argument naming the flag, the field and the text.
cost_model parse_cost_spec(const std::string& spec);

}  // namespace actorpipe
