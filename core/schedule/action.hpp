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

}  // namespace actorpipe
