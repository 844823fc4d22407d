// Policy: the message-ordering rule of one rank. Given which actions are ready (their inputs
// have arrived), it picks what the rank runs next. A static plan is one policy (run the next
// listed action once it is ready); greedy is a dynamic one. The stage actor drives a policy;
// the same interface serves both, and user code adds its own by name (policy_registry.hpp).
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/schedule/plan.hpp"

namespace actorpipe {

class rank_policy {
 public:
  virtual ~rank_policy() = default;
  // A new step begins: nothing done, nothing arrived.
  virtual void reset() = 0;
  // The action to start now, or nullopt to wait for more inputs. `ready(a)` tells whether a's
  // inputs are here; the policy must only return ready actions it has not returned before.
  // It may be asked again while earlier actions still run (the stage keeps up to two in
  // flight, so the compute thread never waits for a message round trip); a policy that wants
  // to decide only when the rank is idle returns nullopt until then.
  virtual std::optional<action> next(const std::function<bool(const action&)>& ready) = 0;
  // Asked when the rank is idle and next() had nothing: an action to run out of turn rather
  // than wait, or nullopt (the default: wait). The static policy made with fill_weight_grads
  // (make_static_policy; train's default, off with --no-w-fill) answers with the rank's next
  // weight gradient when it is ready.
  virtual std::optional<action> fill(const std::function<bool(const action&)>& ready) {
    (void)ready;
    return std::nullopt;
  }
  // The action the rank's list runs next, where it has a list (static plans; nullopt by
  // default): a rank about to fill a wait asks how soon that action's input comes.
  virtual std::optional<action> next_listed() const { return std::nullopt; }
  virtual void completed(const action& a) = 0;
  // Every action of the step is done.
  virtual bool finished() const = 0;
  // For stall reports: what the rank wants to run next ("F3.2 (position 7)").
  virtual std::string waiting_for() const = 0;
  // Every action this rank runs in a step, in no particular order (for the stage's bookkeeping).
  virtual std::vector<action> all_actions() const = 0;
};

// Runs rank `rank`'s list of a (validated) plan in order. With `fill_weight_grads`, a rank
// that would wait for its next action's input runs the first weight gradient (W) still ahead
// in its list, out of turn, when that W is ready (fill()): the W's keep their listed order
// among themselves, so each virtual stage still accumulates its weight gradients in
// microbatch order and the trained bits stay the plan's.
std::unique_ptr<rank_policy> make_static_policy(const plan& p, int rank, bool fill_weight_grads = false);

// Greedy dynamic policy for placement `place` with `microbatches` microbatches:
//   1. a ready backward (B, or I when split_backward) first: lowest microbatch, then the
//      deepest virtual stage (it frees memory and feeds the critical path);
//   2. a ready W when split_backward;
//   3. a ready forward of a microbatch already inside the rank (a non-first chunk);
//   4. a ready forward of a new microbatch on the rank's first chunk, while that chunk holds
//      fewer than `budget` live activations.
// Each virtual stage still runs its forwards, backwards and weight-grads in microbatch order,
// so gradients accumulate in the same order as under any built-in plan.
std::unique_ptr<rank_policy> make_greedy_policy(const placement& place, int microbatches, int rank, int budget,
                                                bool split_backward);

}  // namespace actorpipe
