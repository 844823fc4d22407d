// Every message the actors exchange. Messages that carry a tensor_box or a closure stay inside
// one process (whitelisted for local delivery only); tensors cross processes through the
// transport (transport/transport.hpp). The control messages that cross processes have an
// inspect() below and are registered by add_message_types; the control plane serializes them.
#pragma once

#include <caf/all.hpp>

#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/model/tensor_box.hpp"
#include "core/schedule/action.hpp"
#include "core/sim/simulator.hpp"
#include "core/train/evaluation.hpp"

namespace actorpipe::msg {

// Doubles cross processes as their IEEE-754 bits. CAF 0.17's own double encoding (pack754)
// never returns for an infinity and drops NaN payloads and -0, and a diverging run produces
// exactly those (an infinite loss or gradient norm): one inf would hang the sending process.
struct double_bits {
  double* value;
};
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, double_bits& x) {
  std::uint64_t bits = 0;
  if constexpr (Inspector::reads_state) {
    std::memcpy(&bits, x.value, sizeof bits);
    return f(bits);
  } else {
    auto result = f(bits);
    std::memcpy(x.value, &bits, sizeof bits);
    return result;
  }
}

// A virtual stage's sums of squared gradients: one per parameter, in the stage's parameter
// order (the supervisor adds them in model order, so the norm does not depend on the cut), or
// one for a data-parallel shard's slices.
struct stage_sq {
  int virtual_stage;
  std::vector<double> sums;
};
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, stage_sq& x) {
  std::vector<std::uint64_t> bits(x.sums.size());  // bit for bit, as double_bits
  if constexpr (Inspector::reads_state) {
    if (!bits.empty()) std::memcpy(bits.data(), x.sums.data(), bits.size() * sizeof(double));
    return f(x.virtual_stage, bits);
  } else {
    auto result = f(x.virtual_stage, bits);
    x.sums.resize(bits.size());
    if (!bits.empty()) std::memcpy(x.sums.data(), bits.data(), bits.size() * sizeof(double));
    return result;
  }
}


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

// Stage -> chunk: run this action now. `fill`: a W run out of turn while the rank waits
// (rank_policy::fill); it pauses once for an F or I that comes to the compute thread meanwhile.
// `order`: the rank's count of actions handed over (from 0), so its compute thread runs them
// in the order the stage chose, whichever chunk's actor passes its job on first; -1: run on
// arrival.
struct run {
  int step;
  action act;
  bool fill = false;
  std::int64_t order = -1;
};

// A stage actor to itself: its rank went idle; once the messages already queued are handled,
// run a W out of turn if the rank still waits (rank_policy::fill).
struct try_fill {};

// Anyone -> a rank's compute actor: work for the rank's own thread. `order` >= 0: a stage's
// action, run after every lower one (msg::run::order); -1: run on arrival.
struct compute_job {
  std::function<void()> work;
  std::int64_t order = -1;
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
  std::shared_ptr<const eval_piece> eval;  // an eval round's last stage: its outputs and targets
  double output_at = -1;  // B that sent its input gradient itself, before its W part: when
  // A W that paused: (start, end) of each part before the last, in order; start/end above are
  // the last part's.
  std::vector<double> earlier_parts;
  bool certain = false;  // what the action threw was a certain_failure
};

// Chunk -> stage: an action finished (error empty) or failed.
struct action_done {
  int step;
  action act;
  double start = 0, end = 0;
  int live_stashes = 0;  // of the rank (every chunk of it), after the action
  int pending_weight_grads = 0;
  double output_at = -1;  // see job_done
  std::vector<double> earlier_parts;  // see job_done
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

// Supervisor -> every stage: from step `from_step` on, run this plan (its text form), rebuilt
// on the costs measured in the steps before; `changed` false: keep the plan (the text is
// empty). Inputs of that step wait until it has arrived (run_context::replan_from).
struct replan {
  int from_step;
  bool changed;
  std::string plan_text;
};

// Stage -> supervisor: what the rank waits for while idle (for stall reports).
struct waiting {
  int step;
  int rank;
  std::string what;
};

// Anyone -> supervisor: the job must stop. `step`: the step (or evaluation round) whose
// action failed, where one did; -1 otherwise.
struct failure {
  std::string what;
  int step = -1;
  // The training itself failed (an update left parameters not finite): not an echo of a stop
  // asked for, which a failure after one otherwise is (supervisor::stop).
  bool diverged = false;
  // Every run of the job would fail so (a certain_failure, a member's refusal once the job
  // formed, a tensor no frame holds): the run ends as refused (exit 2, not restarted).
  bool certain = false;
};

// A process other than the first -> supervisor: it got a stop signal (SIGINT, SIGTERM) that
// process 0 may not have (sent to that process alone: a scheduler preempting one node): the
// job stops after the step in flight, as for process 0's own.
struct stop_request {
  int process;
  int signal;
};

// Optimizer shard -> supervisor: its virtual stage's sum of squared gradients (under data
// parallelism: of its reduced shard), when its gradient sync ran, and the AdamW state it holds.
struct grad_sq_parts {
  int step;
  int rank;  // the sender's
  std::vector<stage_sq> per_stage;  // by virtual stage id
  double sync_start = 0, sync_end = 0;  // seconds since the run began; equal when no sync ran
  long long state_bytes = 0;
};

// Supervisor -> every optimizer shard, and its reply.
struct optimizer_step {
  int step;
  double clip_coefficient;
  double lr;
  // The step's parameters are kept (a checkpoint, the run's end): the shard checks that its
  // update left them finite, and fails the run naming one that is not.
  bool check_finite = false;
};
struct optimizer_done {
  int step;
  int stage_id;
};

// Chunk -> its optimizer shard: the stage has run its last backward of the step (and summed
// its tied gradients): its gradients are final.
struct gradients_ready {
  int step;
};

// Chunk -> itself: its own tied gradient is on its way to the other copies.
struct tied_sent {
  int step;
};
// Transport -> chunk: another holder's tied gradient.
struct tied_gradient {
  int step;
  int virtual_stage;  // receiver
  int slot;           // run_context::tied_slot(group, tensor, sender)
  tensor_box tensor;
};

// Transport -> optimizer shard: a slice of a gradient bucket from one replica (to reduce),
// another shard's reduced slice (ZeRO-0) or its updated parameters (ZeRO-1).
struct shard_slice {
  std::uint8_t kind;  // tensor_kind
  int step;
  int bucket;
  int replica;  // the sender's
  tensor_box tensor;
};
// Compute thread -> optimizer shard: work it posted is done.
struct shard_work_done {
  int step;
  int what;  // optimizer_shard_actor's own codes
  int bucket;
  double sq = 0;  // a shard's sum of squares (or, for a bucket sent early, when it left)
};

// Checkpoints. Supervisor -> every optimizer shard: snapshot your stage's state after step
// `step` (steps done) and write it as `file` into the checkpoint's partial directory. The
// shard answers once the snapshot is in memory (training may go on), then once the file is
// durable (error non-empty: it is not).
struct save_state {
  int step;
  std::string partial;  // the partial directory's path
};
struct state_snapshotted {
  int step;
  int stage_id;
};
struct state_written {
  int step;
  int stage_id;
  std::string file;
  std::uint64_t bytes = 0;
  std::string sha256;
  std::string error;
};

// Supervisor -> chunks in other processes: send your parameters to process 0 (--save-final).
struct gather_parameters {
  int step;
};
// Chunk -> supervisor: the names of the parameters it sent (in index order).
struct parameter_names {
  int virtual_stage;
  std::vector<std::string> names;
};
// Transport -> supervisor: one gathered parameter.
struct parameter_arrived {
  int virtual_stage;
  int index;
  tensor_box tensor;
};

// Supervisor -> every feeder: feed round `round` of an evaluation pass, as step `step`.
struct start_eval {
  int step;
  int round;
};
// Last chunk -> supervisor: one eval microbatch's outputs (float32, as bits) and targets.
struct eval_output {
  int step;
  int microbatch;  // the eval microbatch's index in the pass
  std::vector<std::int64_t> shape;
  std::vector<std::uint32_t> output_bits;
  std::vector<std::int64_t> target_shape;
  std::vector<std::int64_t> targets;
};

// Runtime -> supervisor: the run ended (error empty on success); also process 0 -> the other
// processes' runtimes.
struct run_finished {
  std::string error;
  // The signal the job stopped early for (0: it ran every step, or failed): every process
  // exits 128 + it, whichever got the signal.
  int stopped_by_signal = 0;
  bool certain = false;  // the error is a failure every run would meet (msg::failure::certain)
};

// Serialization of the messages that cross processes (CAF 0.17 inspectors).
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, loss_report& x) {
  double_bits loss{&x.loss};
  return f(caf::meta::type_name("loss_report"), x.step, x.microbatch, loss);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, flush& x) {
  return f(caf::meta::type_name("flush"), x.step, x.rank, x.events, x.peak_activations, x.peak_pending_weight_grads);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, replan& x) {
  return f(caf::meta::type_name("replan"), x.from_step, x.changed, x.plan_text);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, waiting& x) {
  return f(caf::meta::type_name("waiting"), x.step, x.rank, x.what);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, failure& x) {
  return f(caf::meta::type_name("failure"), x.what, x.step, x.diverged, x.certain);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, stop_request& x) {
  return f(caf::meta::type_name("stop_request"), x.process, x.signal);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, grad_sq_parts& x) {
  double_bits start{&x.sync_start}, end{&x.sync_end};
  return f(caf::meta::type_name("grad_sq_parts"), x.step, x.rank, x.per_stage, start, end, x.state_bytes);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, optimizer_step& x) {
  double_bits clip{&x.clip_coefficient}, lr{&x.lr};
  return f(caf::meta::type_name("optimizer_step"), x.step, clip, lr, x.check_finite);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, optimizer_done& x) {
  return f(caf::meta::type_name("optimizer_done"), x.step, x.stage_id);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, save_state& x) {
  return f(caf::meta::type_name("save_state"), x.step, x.partial);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, state_snapshotted& x) {
  return f(caf::meta::type_name("state_snapshotted"), x.step, x.stage_id);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, state_written& x) {
  return f(caf::meta::type_name("state_written"), x.step, x.stage_id, x.file, x.bytes, x.sha256, x.error);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, gather_parameters& x) {
  return f(caf::meta::type_name("gather_parameters"), x.step);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, parameter_names& x) {
  return f(caf::meta::type_name("parameter_names"), x.virtual_stage, x.names);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, start_eval& x) {
  return f(caf::meta::type_name("start_eval"), x.step, x.round);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, eval_output& x) {
  return f(caf::meta::type_name("eval_output"), x.step, x.microbatch, x.shape, x.output_bits, x.target_shape, x.targets);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, run_finished& x) {
  return f(caf::meta::type_name("run_finished"), x.error, x.stopped_by_signal, x.certain);
}
}  // namespace actorpipe::msg

namespace actorpipe {
// timeline_event and action are core types (no CAF); their inspectors live here, found by ADL.
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, action& x) {
  return f(caf::meta::type_name("action"), x.op, x.virtual_stage, x.microbatch);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, timeline_event& x) {
  msg::double_bits start{&x.start}, end{&x.end}, output_at{&x.output_at};
  return f(caf::meta::type_name("timeline_event"), x.rank, x.act, x.chunk, start, end, output_at, x.continues);
}
}  // namespace actorpipe

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(actorpipe::msg::activation)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(actorpipe::msg::targets)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(actorpipe::msg::gradient)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(actorpipe::msg::input_ready)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(actorpipe::msg::run)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(actorpipe::msg::try_fill)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(actorpipe::msg::compute_job)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(actorpipe::msg::job_done)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(actorpipe::msg::tied_sent)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(actorpipe::msg::tied_gradient)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(actorpipe::msg::parameter_arrived)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(actorpipe::msg::action_done)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(actorpipe::msg::gradients_ready)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(actorpipe::msg::shard_slice)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(actorpipe::msg::shard_work_done)

namespace actorpipe::msg {

// Runtime -> supervisor: start training; the answer goes to reply_to.
struct start_run {
  caf::actor reply_to;
};
// Supervisor -> feeder: feed step `step`.
struct start_step {
  int step;
};
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, start_step& x) {
  return f(caf::meta::type_name("start_step"), x.step);
}
// Supervisor -> itself: the deadline of a step.
struct step_deadline {
  int step;
};
// Supervisor -> itself: how long a failed run waits for the checkpoint it was writing.
struct checkpoint_deadline {
  int step;
};

}  // namespace actorpipe::msg

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(actorpipe::msg::start_run)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(actorpipe::msg::step_deadline)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(actorpipe::msg::checkpoint_deadline)

namespace actorpipe {
// Registers every message type that crosses processes with the actor system (names are part
// of the control-plane wire format).
void add_message_types(caf::actor_system_config& cfg);
}  // namespace actorpipe
