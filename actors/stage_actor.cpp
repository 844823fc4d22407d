// Stage actor: one per rank. Owns the rank's policy, knows which actions are ready (inputs
// arrived, local prerequisites done), hands one action at a time to its chunk, measures what
// ran, and reports the flush when the rank has run every action of the step.
#include <algorithm>
#include <set>

#include "actors/messages.hpp"
#include "actors/run_context.hpp"
#include "core/log.hpp"
#include "core/model/error_text.hpp"
#include "core/schedule/plan.hpp"

namespace actorpipe {
namespace {

// One rank's stage: its state and one member per message it handles. The rank is one of the
// grid's; its policy is its pipeline rank's, and its actions' virtual stages are its replica's.
class stage {
 public:
  stage(caf::event_based_actor* self, std::shared_ptr<const run_context> ctx, int rank)
      : self_(self),
        ctx_(std::move(ctx)),
        rank_(rank),
        pipeline_rank_(ctx_->grid.pipeline_rank_of(rank)),
        replica_(ctx_->grid.replica_of(rank)),
        policy_(ctx_->make_policy(pipeline_rank_)),
        eval_policy_(ctx_->eval_plan ? make_static_policy(*ctx_->eval_plan, pipeline_rank_) : nullptr),
        current_(policy_.get()) {}

  void on_input_ready(const msg::input_ready& r);
  void on_replan(const msg::replan& p);
  void on_action_done(const msg::action_done& d);
  void on_try_fill();

 private:
  void enter(int step);
  bool ready(const action& a) const;
  void dispatch();
  void run(const action& a, bool fill = false);
  void report_waiting(std::string what);
  bool input_far_off() const;
  void accept_input(const msg::input_ready& r);
  void record(const msg::action_done& d);

  caf::event_based_actor* self_;
  std::shared_ptr<const run_context> ctx_;
  int rank_, pipeline_rank_, replica_;
  std::unique_ptr<rank_policy> policy_;
  std::unique_ptr<rank_policy> eval_policy_;  // eval rounds: the plan's forwards only
  rank_policy* current_ = nullptr;            // the policy of the step under way
  int step_ = -1;
  std::set<std::pair<int, int>> fwd_in_, grad_in_, f_done_, i_done_;  // (virtual stage, microbatch)
  std::vector<std::pair<action, double>> running_;  // handed to the compute thread, with start times
  int peak_ = 0, peak_pending_ = 0;
  std::vector<timeline_event> events_;
  std::string last_waiting_;
  int planned_from_ = -1;               // the latest rebuilt plan (run_context::replan_from) that arrived applies from this step
  std::vector<msg::input_ready> held_;  // inputs of steps that must wait for one
  bool fill_asked_ = false;             // a try_fill is on its way to this actor,
  int fill_step_ = -1;                  // asked in this step
  double last_w_s_ = -1;                // the rank's latest W, all its parts (seconds)
  std::int64_t handed_over_ = 0;        // actions handed to the chunks in this run (msg::run::order)
};

// Steps run one after another: the first input of a new step means the old one is over.
void stage::enter(int step) {
  if (step == step_) return;
  step_ = step;
  current_ = run_context::is_eval_step(step) && eval_policy_ ? eval_policy_.get() : policy_.get();
  current_->reset();
  fwd_in_.clear(), grad_in_.clear(), f_done_.clear(), i_done_.clear();
  running_.clear();
  peak_ = peak_pending_ = 0;
  events_.clear();
  last_waiting_.clear();
  // A policy whose reset() kept the last step's state says it is finished at once: the step
  // then waited for nothing until --step-timeout blamed the inputs.
  if (const std::size_t listed = current_->all_actions().size(); listed > 0 && current_->finished())
    self_->send(ctx_->supervisor, msg::failure{"rank " + std::to_string(rank_) + ", " + run_context::step_name(step_) +
                                               ": its schedule's policy says it is finished right after reset(), before "
                                               "any of the " + std::to_string(listed) +
                                               " actions it lists ran: does its reset() start a step afresh?"});
}

// An F counts as done once it is handed to the compute thread: that thread runs the stage's
// actions in the order they were handed over (msg::run::order), so the last stage's B or I (which awaits nothing else)
// waits in the compute actor's mailbox behind its own F instead of after a done -> stage ->
// chunk -> compute round trip (~0.2 ms on the 2-vCPU machines, once per microbatch on the
// slowest stage). Not so a W behind its I: handed over early, a W could no longer give way to
// an F or I whose input arrives while the I runs.
bool stage::ready(const action& a) const {
  return action_ready(a, ctx_->virtual_stages, [&](awaited d, int v, int m) {
    const auto key = std::make_pair(v, m);
    switch (d) {
      case awaited::input: return fwd_in_.count(key) > 0;
      case awaited::forward_done:
        return f_done_.count(key) > 0 ||
               std::any_of(running_.begin(), running_.end(), [&](const std::pair<action, double>& r) {
                 return r.first == action{op_kind::forward, v, m};
               });
      case awaited::gradient: return grad_in_.count(key) > 0;
      case awaited::input_grad_done: return i_done_.count(key) > 0;
    }
    return false;
  });
}

// Tells the supervisor what the rank waits for (once per change), so a stall can be explained.
void stage::report_waiting(std::string what) {
  if (what == last_waiting_) return;
  last_waiting_ = what;
  self_->send(ctx_->supervisor, msg::waiting{step_, rank_, std::move(what)});
}

// Up to two actions in flight: the second waits in the compute actor's mailbox and starts the
// moment the first ends, instead of after a done -> stage -> chunk -> compute round trip.
// A busy rank waits for the oldest action in flight; an idle one for what its policy names.
void stage::dispatch() {
  while (running_.size() < 2 && !current_->finished()) {
    auto a = current_->next([this](const action& x) { return ready(x); });
    if (!a) break;
    run(*a);
  }
  // Idle and waiting: after the messages already queued (an input among them runs the listed
  // action), the policy may fill the wait.
  if (running_.empty() && !current_->finished() && !fill_asked_ && ctx_->options.fill_weight_grads) {
    fill_asked_ = true;
    fill_step_ = step_;
    self_->send(self_, msg::try_fill{});
  }
  if (!running_.empty())
    report_waiting(to_string(running_.front().first) + " to finish (handed to the compute thread at " +
                   std::to_string(running_.front().second) + " s)");
  else if (!current_->finished())
    report_waiting(current_->waiting_for());
}

void stage::run(const action& a, bool fill) {
  running_.emplace_back(a, ctx_->now());
  self_->send(ctx_->chunk_actors[ctx_->stage_id(replica_, a.virtual_stage)], msg::run{step_, a, fill, handed_over_++});
}

// Whether the input the rank waits for is far enough off for a W piece: a piece started in
// a wait holds up the action waited for until it ends, and most waits on a busy machine are an
// input on its way. Where the action producing that input runs in this process, the stage can
// tell: not started yet (the wait is at least that whole action: fill), its output already
// left (the input is on its way: wait), or running: fill only if, by how long its virtual
// stage's latest one took, it is due no sooner than a quarter of this rank's latest W from now.
// Where the producer runs elsewhere (another process, the data), the stage cannot tell, and
// fills. (Filling also once a running producer is that much overdue filled the 2-vCPU
// machine's scheduling delays: pipeline_overhead's zbv rows 1.035-1.039 against 1.021-1.023.)
bool stage::input_far_off() const {
  const auto next = current_->next_listed();
  if (!next || !ctx_->started_step) return true;
  dependency deps[2];
  const dependency* from = nullptr;  // the one on another virtual stage: its input
  for (int i = 0, n = dependencies_of(*next, ctx_->virtual_stages, deps); i < n; ++i)
    if (deps[i].virtual_stage != next->virtual_stage) from = &deps[i];
  if (!from) return true;  // the data, or this rank's own F or I
  const bool back = from->what == dependency::kind::input_grad;
  const int id = ctx_->stage_id(replica_, from->virtual_stage);
  if (!ctx_->is_local_rank(ctx_->rank_of_stage(id))) return true;
  const int slot = ctx_->action_slot(id, next->microbatch, back);
  const int mark = ctx_->started_step[slot].load();
  if (mark < 0 || mark / 2 != step_) return true;  // not started in this step
  if (mark % 2 == 1 || last_w_s_ < 0) return false;  // on its way; or no W measured yet to judge by
  const double due = ctx_->started_at[slot].load() + ctx_->last_took[ctx_->took_slot(id, back)].load();
  return due - ctx_->now() >= 0.25 * last_w_s_;
}

void stage::on_try_fill() {
  fill_asked_ = false;
  // Only in the step that asked: readiness is this step's (enter() clears it for the next).
  if (fill_step_ != step_ || !running_.empty() || current_->finished()) return;
  if (!input_far_off()) return;
  if (auto a = current_->fill([this](const action& x) { return ready(x); })) {
    ACTORPIPE_LOG(trace, "rank " + std::to_string(rank_) + ": runs " + to_string(*a) + " while it waits for " +
                             current_->waiting_for());
    run(*a, true);
  }
}

void stage::accept_input(const msg::input_ready& r) {
  enter(r.step);
  (r.is_gradient ? grad_in_ : fwd_in_).insert({r.virtual_stage, r.microbatch});
  dispatch();
}

void stage::on_input_ready(const msg::input_ready& r) {
  // Across processes an input of the next step can overtake the plan on its way here.
  if (ctx_->replan_from >= 0 && r.step >= ctx_->replan_from && !run_context::is_eval_step(r.step) &&
      planned_from_ < std::min(r.step, ctx_->replan_until)) {
    held_.push_back(r);
    return;
  }
  accept_input(r);
}

void stage::on_replan(const msg::replan& p) {
  if (p.changed) {
    try {
      const plan rebuilt = parse_plan(p.plan_text, "plan rebuilt on measured costs");
      policy_ = make_static_policy(rebuilt, pipeline_rank_, ctx_->options.fill_weight_grads);
    } catch (const std::exception& e) {
      self_->send(ctx_->supervisor, msg::failure{"rank " + std::to_string(rank_) + ": the rebuilt plan: " + error_text(e)});
      return;
    }
    // The next input enters its step with the new policy reset. An eval round under way keeps
    // its own policy (and its inputs are never held).
    if (!run_context::is_eval_step(step_)) {
      step_ = -1;
      current_ = policy_.get();
    }
  }
  planned_from_ = p.from_step;
  log_debug("rank " + std::to_string(rank_) + (p.changed ? ": runs the plan rebuilt on measured costs from step "
                                                          : ": keeps its plan (rebuilt on measured costs: the same) from step ") +
            std::to_string(p.from_step + 1));
  auto held = std::move(held_);
  held_.clear();
  for (auto& r : held) on_input_ready(r);  // held again if it waits for a later plan
}

// What a finished action changes: prerequisites met, memory peaks, the timeline.
void stage::record(const msg::action_done& d) {
  const action a = d.act;
  current_->completed(a);
  running_.erase(std::find_if(running_.begin(), running_.end(),
                              [&](const std::pair<action, double>& r) { return r.first == a; }));
  const auto key = std::make_pair(a.virtual_stage, a.microbatch);
  if (a.op == op_kind::forward) f_done_.insert(key);
  if (produces_input_grad(a.op)) i_done_.insert(key);
  peak_ = std::max(peak_, d.live_stashes);  // the rank's, as the action left it (chunk_actor)
  peak_pending_ = std::max(peak_pending_, d.pending_weight_grads);
  const int chunk = ctx_->place.chunk_of[a.virtual_stage];
  double took = d.end - d.start;
  for (size_t i = 0; i + 1 < d.earlier_parts.size(); i += 2) {  // a W that paused: its parts before the last
    events_.push_back({rank_, a, chunk, d.earlier_parts[i], d.earlier_parts[i + 1], -1, true});
    took += d.earlier_parts[i + 1] - d.earlier_parts[i];
  }
  events_.push_back({rank_, a, chunk, d.start, d.end, d.output_at});
  if (a.op == op_kind::weight_grad) last_w_s_ = took;
}

void stage::on_action_done(const msg::action_done& d) {
  record(d);
  if (!current_->finished()) {
    dispatch();
    // Every action it lists has run and none is left to start, yet it is not finished: the
    // step waited for what never comes, until --step-timeout blamed the policy's wait.
    if (running_.empty() && !current_->finished()) {
      const std::size_t listed = current_->all_actions().size();
      if (listed > 0 && actions_in(events_) >= listed)
        self_->send(ctx_->supervisor, msg::failure{"rank " + std::to_string(rank_) + ", " + run_context::step_name(step_) +
                                                   ": its schedule's policy ran all " + std::to_string(listed) +
                                                   " actions it lists but does not say it is finished"});
    }
    return;
  }
  // A policy that says it is finished before its rank ran all it listed would leave the step
  // waiting for what never comes, until --step-timeout blamed something else.
  const std::size_t ran = actions_in(events_), listed = current_->all_actions().size();
  if (ran < listed) {
    self_->send(ctx_->supervisor, msg::failure{"rank " + std::to_string(rank_) + ", " + run_context::step_name(step_) +
                                               ": its schedule's policy said it was finished after " + std::to_string(ran) +
                                               " of the " + std::to_string(listed) + " actions it lists"});
    return;
  }
  ACTORPIPE_LOG(debug, "rank " + std::to_string(rank_) + ": step " + std::to_string(step_ + 1) + " done, " +
                           std::to_string(actions_in(events_)) + " actions, peak " + std::to_string(peak_) + " live activations");
  self_->send(ctx_->supervisor, msg::flush{step_, rank_, std::move(events_), peak_, peak_pending_});
  events_.clear();
}

}  // namespace

void run_context::send_tensor_to_process(int process_index, tensor_kind kind, int step, int v, int microbatch,
                                         int from_rank, tensor_box t) const {
  tensor_meta meta;
  meta.kind = kind;
  meta.step = step;
  meta.virtual_stage = v;
  meta.microbatch = microbatch;
  meta.source_rank = from_rank;
  try {
    data->send(process_index, std::move(meta), std::move(t));
  } catch (const std::exception& e) {
    // The transport refuses it before anything moves (std::invalid_argument): every run would.
    const bool certain = dynamic_cast<const std::invalid_argument*>(&e) != nullptr;
    const std::string index = std::to_string(microbatch);
    std::string what;
    switch (kind) {
      case tensor_kind::activation: what = "the activation of microbatch " + index; break;
      case tensor_kind::gradient: what = "the input gradient of microbatch " + index; break;
      case tensor_kind::targets:
      case tensor_kind::tokens: what = "the data of microbatch " + index; break;
      case tensor_kind::tied_gradient: what = "tied gradient " + index; break;
      case tensor_kind::parameter: what = "parameter " + index; break;
      default: what = "gradient bucket " + index; break;
    }
    const std::string process = "process " + std::to_string(process_index);
    const std::string where = kind == tensor_kind::parameter ? " of " + describe_stage(v) + " to " + process
                                                             : " to " + describe_stage(v) + " (" + process + ")";
    caf::anon_send(supervisor, msg::failure{"rank " + std::to_string(from_rank) + ", " + step_name(step) + ": sending " +
                                                what + where + " failed" +
                                                (certain ? std::string(" (") + refused_frame_words + ")" : std::string()) +
                                                ": " + e.what(),
                                            step, false, certain});
  }
}

std::unique_ptr<rank_policy> run_context::make_policy(int rank) const {
  if (static_plan) return make_static_policy(*static_plan, rank, options.fill_weight_grads);
  return actorpipe::make_policy(policy, ranks, microbatches, place.chunks(), rank, options.greedy_budget);
}

caf::behavior stage_actor(caf::event_based_actor* self, std::shared_ptr<const run_context> ctx, int rank) {
  // What throws here is the rank's policy (its next, fill, finished or waiting_for): the job
  // stops with its message, naming the rank, instead of CAF's "stopped unexpectedly".
  self->set_exception_handler([ctx, rank](caf::scheduled_actor*, std::exception_ptr& e) -> caf::error {
    std::string what = "an exception of unknown type";
    try {
      std::rethrow_exception(e);
    } catch (const std::exception& x) {
      what = error_text(x);
    } catch (...) {
    }
    const std::string whose = ctx->policy.empty() ? std::string("its schedule's policy") : "policy '" + ctx->policy + "'";
    caf::anon_send(ctx->supervisor, msg::failure{"rank " + std::to_string(rank) + ": " + whose + " failed: " + what});
    return caf::make_error(caf::sec::runtime_error, what);
  });
  // Marks the rank's stage busy while it handles a message (run_context::stage_busy_since).
  struct busy {
    const run_context& ctx;
    int rank;
    busy(const run_context& c, int r) : ctx(c), rank(r) {
      if (ctx.stage_busy_since) ctx.stage_busy_since[rank].store(ctx.now());
    }
    ~busy() {
      if (ctx.stage_busy_since) ctx.stage_busy_since[rank].store(-1);
    }
  };
  const run_context* c = ctx.get();
  auto s = std::make_shared<stage>(self, std::move(ctx), rank);
  return {
      [s, c, rank](msg::input_ready& r) { busy b(*c, rank); s->on_input_ready(r); },
      [s, c, rank](msg::replan& p) { busy b(*c, rank); s->on_replan(p); },
      [s, c, rank](msg::action_done& d) { busy b(*c, rank); s->on_action_done(d); },
      [s, c, rank](msg::try_fill&) { busy b(*c, rank); s->on_try_fill(); },
  };
}

}  // namespace actorpipe
