// One unit of pipeline work: forward, backward, or the two halves of a split backward,
// of one microbatch on one virtual stage. Text form: <op><virtual_stage>.<microbatch>.
#pragma once

#include <string>
#include <string_view>

namespace actorpipe {

enum class op_kind : char {
  forward = 'F',      // runs the virtual stage, sends its output downstream
  backward = 'B',     // full backward: input-grad and weight-grad together
  input_grad = 'I',   // the input-gradient half of a split backward (on the critical path)
  weight_grad = 'W',  // the weight-gradient half, deferrable to fill bubbles
};

struct action {
  op_kind op = op_kind::forward;
  int virtual_stage = 0;
  int microbatch = 0;

  friend bool operator==(const action& a, const action& b) {
    return a.op == b.op && a.virtual_stage == b.virtual_stage && a.microbatch == b.microbatch;
  }
  friend bool operator!=(const action& a, const action& b) { return !(a == b); }
};

// "F0.3"
std::string to_string(const action& a);

// Parses "F0.3"; throws std::invalid_argument naming the token on anything else.
action parse_action(std::string_view token);

// True for B and I: the actions that hand an input-gradient to the previous virtual stage.
inline bool produces_input_grad(op_kind op) {
  return op == op_kind::backward || op == op_kind::input_grad;
}

// What an action waits for at run time: the rule every executor shares (the stage actor, the
// policy simulator). F needs its input (from the feeder or the previous virtual stage); B and I
// need their own F and, on any virtual stage but the last, the gradient from the next; W needs
// its I. (plan.hpp's dependencies_of is the same rule in terms of completed actions.)
enum class awaited { input, forward_done, gradient, input_grad_done };

// True when everything `a` awaits is there; has(awaited, virtual_stage, microbatch) answers.
template <class Has>
bool action_ready(const action& a, int virtual_stages, const Has& has) {
  const int v = a.virtual_stage, m = a.microbatch;
  switch (a.op) {
    case op_kind::forward: return has(awaited::input, v, m);
    case op_kind::backward:
    case op_kind::input_grad:
      return has(awaited::forward_done, v, m) && (v + 1 == virtual_stages || has(awaited::gradient, v, m));
    case op_kind::weight_grad: return has(awaited::input_grad_done, v, m);
  }
  return false;
}

}  // namespace actorpipe
