// The supervisor actor's class, shared by the files that implement it: supervisor.cpp (the
// steps: feed, flush, norm, optimizer step, replan, finish), supervisor_checkpoint.cpp
// (checkpoints) and supervisor_eval.cpp (evaluation passes). Internal to actors/.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "actors/messages.hpp"
#include "actors/run_context.hpp"
#include "core/checkpoint/checkpoint_store.hpp"
#include "core/train/evaluation.hpp"

namespace actorpipe::detail {

struct supervisor_state {
  caf::actor reply_to;
  int step = 0;
  bool stopped = false;
  // A failure that arrived before start_run (a process that refused the job as it formed, or
  // was lost then): the run stops with it as it starts.
  std::string early_error;
  bool early_certain = false;  // its msg::failure::certain
  double started = 0;
  std::vector<double> losses;
  int losses_got = 0;
  std::vector<msg::flush> flushes;
  std::map<int, std::string> waiting;  // rank -> what it waits for
  std::map<int, std::vector<double>> sq_parts;  // virtual stage id -> its sums of squares
  int optimizers_done = 0;
  double sync_start = 1e300, sync_end = 0;  // data-parallel gradient sync, this step
  std::map<int, double> stage_sync;          // virtual stage id -> its sync's seconds
  std::vector<long long> state_bytes;        // per rank, as the shards report it
  // --save-final across processes: parameters of the other processes' virtual stages.
  std::map<int, std::vector<std::string>> gathered_names;           // virtual stage -> names
  std::map<std::pair<int, int>, tensor_box> gathered;                // (virtual stage, index)
  int gather_expected = 0;                                           // remote virtual stages
  double grad_norm = 0, lr = 0;
  bool optimizers_asked = false;  // this step's optimizer_step is out
  std::map<caf::actor_addr, std::string> names;
};

// The supervisor: the step's state (supervisor_state) and one member per message.
class supervisor {
 public:
  supervisor(caf::event_based_actor* self, std::shared_ptr<const run_context> ctx)
      : self_(self),
        ctx_(std::move(ctx)),
        P_(ctx_->world_ranks()),
        M_(ctx_->microbatches * ctx_->replicas),
        shards_(ctx_->stage_ids()),
        running_plan_(ctx_->static_plan) {}

  void on_start_run(const msg::start_run& s);
  void on_down(const caf::down_msg& dm);
  void on_loss(const msg::loss_report& l);
  void on_waiting(const msg::waiting& w);
  void on_flush(msg::flush& f);
  void on_grad_sq_parts(const msg::grad_sq_parts& g);
  void on_optimizer_done(const msg::optimizer_done& d);
  void on_stop_request(const msg::stop_request& r);
  void on_deadline(const msg::step_deadline& d);
  void on_checkpoint_deadline(const msg::checkpoint_deadline& d);
  void on_parameter_names(msg::parameter_names& n);
  void on_parameter_arrived(msg::parameter_arrived& p);
  void on_state_snapshotted(const msg::state_snapshotted& s);
  void on_state_written(const msg::state_written& w);
  void on_eval_output(msg::eval_output& o);
  void on_failure(const msg::failure& f);
  // `certain`: every run would fail so (msg::failure::certain).
  void stop(std::string error, bool diverged = false, bool certain = false);

 private:
  void watch(const caf::actor& a, std::string name);
  void begin_step(int k);
  void after_step(int done);
  void go_on(int done);
  void start_save(int done, double due_at);
  void stop_if_signalled(int done);
  // The stop signal asked for: this process's (options.stop_signal), else one a follower
  // passed on (msg::stop_request); 0 for none.
  int asked_signal() const;
  bool periodic_save_due(int done) const;
  void checkpoint_failed(const std::string& why);
  void save_ended();
  bool complete_checkpoint_first(const std::string& error);
  void end_run(std::string error);
  void start_eval(int done);
  void begin_eval_round();
  // The --step-timeout deadline of the step or eval round that began now (st_.step): one in
  // the actor clock at a time, moved on to the current one when an older one comes due. (One
  // a step stayed there for --step-timeout after its step: ~200 B each, 60,000 at 100 steps
  // a second with the default 600 s, and process 0 grew for as long.)
  void arm_deadline();
  void maybe_eval_round_done();
  // A stop asked for while a pass (after a step that is not the run's last) is between rounds:
  // the pass is dropped there, as one skipped for a stop, and the run goes on to its end
  // (that step's checkpoint records the pass as due). True when it did.
  bool drop_eval_for_stop();
  void finish_eval();
  void eval_failed(const std::string& why);
  void maybe_step_optimizers();
  bool replan(int measured, double measured_bubble);
  void finish();
  void maybe_gathered();
  std::vector<std::pair<std::string, tensor_box>> all_parameters();
  std::string stall_detail() const;

  caf::event_based_actor* self_;
  std::shared_ptr<const run_context> ctx_;
  const int P_, M_, shards_;  // ranks of the grid, microbatches of every replica, optimizer shards
  supervisor_state st_;
  // The checkpoint being taken: its partial directory, what is still to come, what is written.
  struct checkpoint_in_flight {
    int step = 0;
    std::string partial;
    int snapshots_left = 0, writes_left = 0;
    bool failed = false;  // a part or the commit failed: it is not committed, its directory goes
    bool eval_pending = false;  // the evaluation due after `step` was skipped (the run stops)
    std::vector<checkpoint_file> files;
    std::set<int> written;  // stage ids whose part reported (written or not)
    double due_at = 0, started_at = 0, resumed_at = 0;  // step done; snapshot asked; training went on
  };
  std::optional<checkpoint_in_flight> save_;
  // The evaluation pass under way: after which step, its round and the round's step id, what
  // came back (flushes this round, outputs by eval microbatch).
  struct eval_in_flight {
    int done = 0, round = 0, rounds = 0, step_id = 0, outputs = 0;
    bool made_up = false;  // the pass a resumed run makes up before its first step
    std::vector<eval_piece> pieces;
    double started = 0;
  };
  std::optional<eval_in_flight> eval_;
  int next_eval_id_ = 0;      // eval rounds so far (their step ids follow eval_step_base)
  int evaluated_after_ = -1;  // the step count the last pass came after
  int deferred_save_ = -1;       // a save due while the previous one was still being written
  bool saves_failed_ = false;    // a checkpoint failed: no more are taken, the run stops
  double deferred_at_ = 0;       // when it was due
  bool finish_after_save_ = false;
  // The run failed while a checkpoint whose state was all taken before was being written, by
  // this process alone: the run's error, given once that checkpoint is committed or given up.
  std::optional<std::string> failed_run_;
  bool certain_ = false;  // the run's error is a failure every run would meet (run_finished::certain)
  static constexpr int checkpoint_patience_s = 60;  // how long it waits for that checkpoint
  bool stopping_ = false;  // a stop signal came: this step is the last (checkpointed with save_dir)
  std::string callback_error_;  // on_step threw: the run fails with this after its step's checkpoint
  int requested_signal_ = 0;  // a stop signal another process got (msg::stop_request)
  // Plans rebuilt on measured costs (run_context::replan_from .. replan_until): the plan the
  // stages run (the static one until a rebuilt one replaces it) and the actions measured so far.
  std::shared_ptr<const plan> running_plan_;
  std::vector<timeline_event> measured_events_;
  bool deadline_pending_ = false;  // a step_deadline is in the actor clock
  double deadline_from_ = 0;       // when the step or eval round st_.step began (ctx_->now())
};

}  // namespace actorpipe::detail
