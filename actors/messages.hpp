// Every message the actors exchange. In one process a tensor rides inside the message as a
// tensor_box (shared, zero copy); these types are whitelisted for local delivery only. The
// cross-process transport (issue 4) adds serializable metadata twins.
#pragma once

#include <caf/all.hpp>

#include <functional>
#include <string>
#include <vector>

#include "core/model/tensor_box.hpp"
#include "core/schedule/action.hpp"
#include "core/sim/simulator.hpp"

namespace actorpipe::msg {

// Feeder -> chunk: the input of F (token ids on virtual stage 0, an activation elsewhere).
struct activation {
  int step;
  int virtual_stage;  // receiver
  int microbatch;
  tensor_box tensor;
};

// Feeder -> last chunk: the targets of a microbatch.
struct targets {
  int step;
  int microbatch;
  tensor_box tensor;
};

// Chunk v+1 -> chunk v: d loss / d output of v.
struct gradient {
  int step;
  int virtual_stage;  // receiver
  int microbatch;
  tensor_box tensor;
};

// Chunk -> its stage: the inputs of an action have arrived.
struct input_ready {
  int step;
  bool is_gradient;  // false: F's input; true: B's or I's output-gradient
  int virtual_stage;
  int microbatch;
};

// Stage -> chunk: run this action now.
struct run {
  int step;
  action act;
};

// Anyone -> a rank's compute actor: work for the rank's own thread.
struct compute_job {
  std::function<void()> work;
};

// Compute thread -> chunk: an action finished.
struct job_done {
  int step;
  action act;
  tensor_box output;  // F: activation for v+1; B/I: gradient for v-1 (may be undefined)
  double loss = 0;    // last stage F
  double start = 0, end = 0;  // seconds since the run began
  int live_stashes = 0;
  int pending_weight_grads = 0;
  std::string error;  // non-empty: the action threw
};

// Chunk -> stage: an action finished (error empty) or failed.
struct action_done {
  int step;
  action act;
  double start = 0, end = 0;
  int live_stashes = 0;  // of that chunk, after the action
  int pending_weight_grads = 0;
};

// Last chunk -> supervisor.
struct loss_report {
  int step;
  int microbatch;
  double loss;
};

// Stage -> supervisor: the rank ran every action of the step.
struct flush {
  int step;
  int rank;
  std::vector<timeline_event> events;  // measured, seconds since the run began
  int peak_activations = 0;
  int peak_pending_weight_grads = 0;
};

// Stage -> supervisor: what the rank waits for while idle (for stall reports).
struct waiting {
  int step;
  int rank;
  std::string what;
};

// Anyone -> supervisor: the job must stop.
struct failure {
  std::string what;
};

// Compute thread -> supervisor: a rank's per-virtual-stage sums of squared gradients.
struct grad_sq_parts {
  int step;
  int rank;
  std::vector<std::pair<int, double>> per_stage;  // (virtual stage, sum)
};

// Supervisor -> optimizer actor, and its reply.
struct optimizer_step {
  int step;
  double clip_coefficient;
  double lr;
};
struct optimizer_done {
  int step;
  int rank;
};
struct grad_norm_request {
  int step;
};
struct tied_sync_done {
  int step;
};

}  // namespace actorpipe::msg

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(actorpipe::msg::activation)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(actorpipe::msg::targets)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(actorpipe::msg::gradient)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(actorpipe::msg::input_ready)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(actorpipe::msg::run)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(actorpipe::msg::compute_job)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(actorpipe::msg::job_done)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(actorpipe::msg::action_done)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(actorpipe::msg::loss_report)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(actorpipe::msg::flush)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(actorpipe::msg::waiting)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(actorpipe::msg::failure)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(actorpipe::msg::grad_sq_parts)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(actorpipe::msg::optimizer_step)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(actorpipe::msg::optimizer_done)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(actorpipe::msg::grad_norm_request)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(actorpipe::msg::tied_sync_done)

namespace actorpipe::msg {

// Runtime -> supervisor: start training; the answer goes to reply_to.
struct start_run {
  caf::actor reply_to;
};
// Supervisor -> runtime: the run ended (error empty on success).
struct run_finished {
  std::string error;
};
// Supervisor -> feeder: feed step `step`.
struct start_step {
  int step;
};
// Supervisor -> itself: the deadline of a step.
struct step_deadline {
  int step;
};

}  // namespace actorpipe::msg

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(actorpipe::msg::start_run)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(actorpipe::msg::run_finished)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(actorpipe::msg::start_step)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(actorpipe::msg::step_deadline)
