// Supervisor actor: runs the steps. Feed, wait for every rank's flush (with a deadline) and
// every optimizer shard's sum of squares (each sends it once its stage's gradients are final:
// tied sums and data-parallel reduction done), take the global gradient norm (summed by
// virtual stage id, so the number does not depend on the rank layout or on timing), clip, step
// the optimizer shards, report metrics. Any failure, timeout or dead actor stops the job with a
// message naming the culprit. Checkpoints: supervisor_checkpoint.cpp; evaluation passes:
// supervisor_eval.cpp.
#include <algorithm>
#include <cstring>
#include <cmath>
#include <map>
#include <optional>
#include <set>

#include "actors/supervisor.hpp"
#include "core/log.hpp"
#include "core/model/error_text.hpp"
#include "core/number_text.hpp"
#include "core/optim/optimizer.hpp"
#include "core/signal_name.hpp"
#include "core/schedule/schedule_registry.hpp"
#include "core/sim/plan_choice.hpp"
#include "core/sim/simulator.hpp"

namespace actorpipe {
namespace detail {

// The pipelined part of a step: from the first action's start to the last one's end.
struct step_span {
  double first = 1e300, end = 0;
};

step_span span_of(const std::vector<msg::flush>& flushes) {
  step_span s;
  for (auto& f : flushes)
    for (auto& e : f.events) {
      s.first = std::min(s.first, e.start);
      s.end = std::max(s.end, e.end);
    }
  return s;
}

// What a finished step reports: loss (mean over every replica's microbatches, in order), lr,
// norm, time, throughput, the measured bubble and the gradient sync's hidden and exposed parts.
step_metrics step_report(const run_context& ctx, const supervisor_state& st) {
  const int P = ctx.world_ranks(), M = ctx.microbatches * ctx.replicas;
  step_metrics m;
  m.step = st.step;
  for (double l : st.losses) m.loss += l;
  m.loss /= M;
  m.lr = st.lr;
  m.grad_norm = st.grad_norm;
  m.seconds = ctx.now() - st.started;
  m.tokens_per_s = m.seconds > 0 ? double(M) * ctx.options.microbatch_size * ctx.tokens_per_sample / m.seconds : 0;
  m.peak_activations.assign(P, 0);
  m.busy_seconds.assign(P, 0.0);
  for (auto& f : st.flushes) {
    m.peak_activations[f.rank] = f.peak_activations;
    for (auto& e : f.events) m.busy_seconds[f.rank] += e.end - e.start;
  }
  const step_span s = span_of(st.flushes);
  double busy = 0;
  for (double b : m.busy_seconds) busy += b;
  m.bubble_ratio = s.end > s.first ? 1.0 - busy / (P * (s.end - s.first)) : 0;
  m.optimizer_state_bytes = st.state_bytes;
  if (st.sync_end > st.sync_start) {
    m.sync_seconds = st.sync_end - st.sync_start;
    m.exposed_sync_seconds = st.sync_end - std::max(st.sync_start, std::min(s.end, st.sync_end));
    for (auto& [id, seconds] : st.stage_sync) m.stage_sync_seconds.push_back(seconds);
  }
  return m;
}

// The step's measured timeline, shifted so its pipelined part starts at 0, as the simulator
// draws one, on ranks 0..P-1: replica 0's (the other replicas run the same plan), or with
// P = every rank, all replicas' (ranks replica x ranks-per-replica + pipeline rank).
sim_result measured_timeline(const run_context& ctx, const std::vector<msg::flush>& all, int P) {
  std::vector<msg::flush> flushes;
  for (auto& f : all)
    if (f.rank < P) flushes.push_back(f);
  const double first = span_of(flushes).first;
  sim_result t;
  t.schedule = ctx.options.schedule_file.empty() ? ctx.options.schedule : ctx.options.schedule_file;  // as the summary names it
  t.stages = P;
  t.chunks = ctx.place.chunks();
  t.microbatches = ctx.microbatches;
  t.peak_activations.assign(P, 0);
  t.peak_pending_weight_grads.assign(P, 0);
  for (auto& f : flushes) {
    t.peak_activations[f.rank] = f.peak_activations;
    t.peak_pending_weight_grads[f.rank] = f.peak_pending_weight_grads;
    for (auto e : f.events) {
      e.start -= first, e.end -= first;
      if (e.output_at >= 0) e.output_at -= first;
      t.events.push_back(e);
    }
  }
  std::stable_sort(t.events.begin(), t.events.end(),
                   [](const timeline_event& a, const timeline_event& b) { return a.rank < b.rank; });
  summarize_timeline(t);
  return t;
}


// The plan for the steps after a measured one: `use` is what choose_plan (plan_choice.hpp)
// picks among the plan that ran (`running`) and the plans rebuilt on the measured costs, as
// measured and with the ranks' speeds made equal; `report` says which and why ("" where the
// generator does not order by cost: 1f1b, interleaved, ...). `measured` names the steps the
// costs come from ("step 1", "steps 1-2"), `last` the step that just ran (1-based). `text` is
// `use`'s text form where it replaces the running plan, else empty.
struct rebuilt_plan {
  std::shared_ptr<const plan> use;
  std::string report, text;
};

rebuilt_plan rebuild_plan(const run_context& ctx, const std::shared_ptr<const cost_model>& costs,
                          const std::shared_ptr<const plan>& running, const std::string& measured, int last,
                          double measured_bubble) {
  rebuilt_plan r{running, "", ""};
  const plan_choice c =
      choose_plan(ctx.options.schedule, ctx.ranks, ctx.microbatches, ctx.place, *costs, running);
  const bool generated_runs = running == ctx.static_plan;  // no rebuilt plan has replaced it yet
  const char* name = ctx.options.schedule.c_str();
  char line[640];
  if (c.use == running) {
    // Every rebuilt plan is the generated one. Plans of B alone (1f1b, interleaved), and those
    // of built-ins that ignore costs (dualpipev's fixed phases), never change with costs:
    // nothing to say (dualpipev was said to be "rebuilt ... kept").
    if (c.candidates == 1 && generated_runs && (!running->uses_split_backward() || !orders_by_cost(name))) return r;
    if (c.candidates == 1 && generated_runs)
      std::snprintf(line, sizeof line,
                    "plan: %s rebuilt on the median costs measured in %s is the plan generated (simulated bubble "
                    "%.1f%%): kept",
                    name, measured.c_str(), 100 * c.on_measured.bubble_ratio);
    else if (c.candidates == 1)
      std::snprintf(line, sizeof line,
                    "plan: %s rebuilt on the median costs measured in %s is the plan that ran in step %d (simulated "
                    "bubble %.1f%%)",
                    name, measured.c_str(), last, 100 * c.on_measured.bubble_ratio);
    else
      std::snprintf(line, sizeof line,
                    "plan: %s as %s is kept for the median costs measured in %s (simulated bubble %.1f%%): of it and "
                    "the plans rebuilt on them (as measured, and with the ranks' speeds made equal), it loses least "
                    "to the best on the worse of those two costs",
                    name, generated_runs ? "generated" : ("it ran in step " + std::to_string(last)).c_str(),
                    measured.c_str(), 100 * c.on_measured.bubble_ratio);
    r.report = line;
    return r;
  }
  r.use = c.use;
  r.text = format_plan(*c.use);
  char regret[96] = "the best candidate";
  if (c.worst_regret > 1) std::snprintf(regret, sizeof regret, "within %.1f%% of the best candidate", 100 * (c.worst_regret - 1));
  // Both pictures: a plan chosen for the worse of the two may lose a little on the one as
  // measured (the line read as a regression without the other).
  std::snprintf(line, sizeof line,
                "plan: %s rebuilt on the median costs measured in %s%s; simulated on them, bubble %.1f%% -> %.1f%% "
                "(pipeline %.4f -> %.4f s), with the ranks' speeds made equal %.1f%% -> %.1f%%; %s both on those "
                "costs and with the ranks' speeds made equal; measured bubble %.1f%% in step %d",
                name, measured.c_str(), c.built_on == "equal speeds" ? " (the ranks' speeds made equal)" : "",
                100 * c.running_on_measured.bubble_ratio, 100 * c.on_measured.bubble_ratio,
                c.running_on_measured.makespan, c.on_measured.makespan, 100 * c.running_on_equal.bubble_ratio,
                100 * c.on_equal.bubble_ratio, regret, 100 * measured_bubble, last);
  r.report = line;
  return r;
}



// Every local actor is watched: one that dies stops the job with its name. Actors of other
// processes are not: their links report.
void supervisor::on_start_run(const msg::start_run& s) {
  st_.reply_to = s.reply_to;
  if (!st_.early_error.empty()) {
    stop(st_.early_error, false, st_.early_certain);
    return;
  }
  for (int r = 0; r < P_; ++r) {
    if (!ctx_->is_local_rank(r)) continue;
    watch(ctx_->compute[r], "compute actor of rank " + std::to_string(r));
    watch(ctx_->stage[r], "stage actor of rank " + std::to_string(r));
  }
  for (int id = 0; id < shards_; ++id) {
    if (!ctx_->is_local_stage(id)) continue;
    watch(ctx_->chunk_actors[id], "chunk actor of " + ctx_->describe_stage(id));
    watch(ctx_->optimizer_shards[id], "optimizer shard of " + ctx_->describe_stage(id));
  }
  watch(ctx_->feeder, "feeder");
  // The pass its checkpoint's run skipped when it stopped, where this run's --eval-every also
  // wants one there; then the first step (not after_step: that step's checkpoint is the one
  // this run started from).
  const int first = ctx_->first_step;
  const std::string skipped =
      "the evaluation due after step " + std::to_string(first) + " did not run before the checkpoint's run stopped";
  if (ctx_->eval_pending && ctx_->eval_microbatches > 0 && eval_due(ctx_->options, first)) {
    if (ctx_->eval_pending_change.empty())
      log_info(skipped + ": it runs first");
    else
      log_warn(skipped + ": it runs first, on " + ctx_->eval_pending_change);
    start_eval(first);
    eval_->made_up = true;
    return;
  }
  if (ctx_->eval_pending)  // a pass the run asked for, which this one will not make
    log_warn(skipped + ", and this run " +
             (ctx_->eval_microbatches == 0
                  ? std::string("has no evaluation data (--eval-file") +
                        (ctx_->options.model_name == "gpt" ? " or --eval-split)" : ")")
              : ctx_->options.eval_every == 0 ? std::string("evaluates after its last step only (--eval-every 0)")
                                              : "evaluates at other steps (--eval-every " +
                                                    std::to_string(ctx_->options.eval_every) + ")") +
             ": it does not run");
  begin_step(first);
}

void supervisor::watch(const caf::actor& a, std::string name) {
  self_->monitor(a);
  st_.names[a.address()] = std::move(name);
}

void supervisor::on_down(const caf::down_msg& dm) {
  if (st_.stopped || failed_run_) return;  // (this process's actors go while a checkpoint completes)
  auto it = st_.names.find(dm.source);
  std::string who = it != st_.names.end() ? it->second : "an actor";
  stop(who + " stopped unexpectedly during " + run_context::step_name(st_.step) + ": " + self_->system().render(dm.reason));
}

// Ends the job: the actors of this process stop (the other processes stop on their own when
// the runtime tells them the run is over), and the runtime hears why ("" for success).
void supervisor::stop(std::string error, bool diverged, bool certain) {
  // While the checkpoint of a failed run completes, what else fails (its actors stopping) is
  // that failure's echo: the run ends with the first once the checkpoint is done.
  if (st_.stopped || failed_run_) return;
  // A failure after a stop was asked for ends the run as that stop (see stopped_on_request):
  // a process lost as the job stops, say. Not a diverged step: that is the run's own failure,
  // whenever the signal came (a Ctrl-C during it made the exit 130 or 1 by a race).
  if (!error.empty() && ctx_->result && !diverged) {
    if (const int asked = asked_signal(); asked != 0) ctx_->result->stopped_by_signal = asked;
  }
  if (!st_.reply_to) {  // before start_run: nobody to tell yet
    if (st_.early_error.empty()) {
      st_.early_certain = !error.empty() && certain;
      st_.early_error = error.empty() ? "the run stopped before it began" : std::move(error);
    }
    return;
  }
  certain_ = !error.empty() && certain;
  if (!error.empty() && complete_checkpoint_first(error)) return;
  end_run(std::move(error));
}

// A run that fails while a checkpoint is written keeps it when it can: every shard had its
// state in memory before the failure (the snapshot is the step's, whatever came after), and
// every part still to come is this process's (written by threads of its own: another
// process's part may be lost with that process). The run's actors stop now; the run ends when
// the checkpoint is committed or fails, or at msg::checkpoint_deadline. True if it waits.
bool supervisor::complete_checkpoint_first(const std::string& error) {
  if (!save_ || save_->failed || save_->snapshots_left > 0) return false;
  for (int id = 0; id < shards_; ++id)
    if (!save_->written.count(id) && !ctx_->is_local_stage(id)) return false;
  failed_run_ = error;
  deferred_save_ = -1;  // its state was never taken
  finish_after_save_ = false;
  log_info("the run failed; the checkpoint of step " + std::to_string(save_->step) +
           " (its state taken before the failure) is completed before it stops");
  for (auto& a : ctx_->local_actors()) self_->send_exit(a, caf::exit_reason::user_shutdown);
  self_->delayed_send(self_, std::chrono::seconds(checkpoint_patience_s), msg::checkpoint_deadline{save_->step});
  return true;
}

void supervisor::on_checkpoint_deadline(const msg::checkpoint_deadline& d) {
  if (!failed_run_ || !save_ || save_->step != d.step || st_.stopped) return;
  log_error("the checkpoint of step " + std::to_string(d.step) + " was not complete " + std::to_string(checkpoint_patience_s) +
            " s after the run failed: it is given up");
  save_->failed = true;
  end_run(*failed_run_);
}

void supervisor::end_run(std::string error) {
  st_.stopped = true;
  // A checkpoint being taken will not complete: the runtime removes what it left.
  if (save_ && !error.empty()) {
    ctx_->checkpoint_parts->discard(ctx_->options.save_dir + "/" + save_->partial);
    if (!save_->failed)
      log_warn("the checkpoint of step " + std::to_string(save_->step) + ", being written when the run failed, is not complete: " +
               (save_->snapshots_left > 0 ? "not every stage's state was taken" : "another process's part of it had not come") +
               "; it is removed");
  }
  for (auto& a : ctx_->local_actors()) self_->send_exit(a, caf::exit_reason::user_shutdown);
  const bool certain = !error.empty() && certain_;
  self_->send(st_.reply_to, msg::run_finished{std::move(error), 0, certain});
  self_->quit();
}

void supervisor::begin_step(int k) {
  st_.step = k;
  st_.started = ctx_->now();
  st_.losses.assign(M_, 0.0);
  st_.losses_got = 0;
  st_.flushes.clear();
  st_.waiting.clear();
  st_.sq_parts.clear();
  st_.optimizers_done = 0;
  st_.optimizers_asked = false;
  st_.sync_start = 1e300, st_.sync_end = 0;
  st_.stage_sync.clear();
  st_.state_bytes.clear();
  for (auto& f : ctx_->feeders) self_->send(f, msg::start_step{k});
  arm_deadline();
}

void supervisor::arm_deadline() {
  deadline_from_ = ctx_->now();
  if (deadline_pending_) return;  // it comes due for an older step, and moves on to this one
  deadline_pending_ = true;
  self_->delayed_send(self_,
                      std::chrono::duration_cast<caf::timespan>(std::chrono::duration<double>(ctx_->options.step_timeout_s)),
                      msg::step_deadline{st_.step});
}

void supervisor::on_loss(const msg::loss_report& l) {
  if (l.step != st_.step || failed_run_) return;
  st_.losses[l.microbatch] = l.loss;
  ++st_.losses_got;
  maybe_step_optimizers();
}

void supervisor::on_waiting(const msg::waiting& w) {
  if (w.step == st_.step) st_.waiting[w.rank] = w.what;
}

void supervisor::on_flush(msg::flush& f) {
  if (f.step != st_.step || failed_run_) return;
  if (eval_) {
    st_.flushes.push_back(std::move(f));
    maybe_eval_round_done();
    return;
  }
  st_.flushes.push_back(std::move(f));
  maybe_step_optimizers();
}

// A shard's stage is final (tied sums and data-parallel reduction done): its sum of squares.
void supervisor::on_grad_sq_parts(const msg::grad_sq_parts& g) {
  if (g.step != st_.step || failed_run_) return;
  for (auto& [id, sq] : g.per_stage) st_.sq_parts[id] = sq;
  if (g.sync_end > g.sync_start) {
    st_.sync_start = std::min(st_.sync_start, g.sync_start);
    st_.sync_end = std::max(st_.sync_end, g.sync_end);
    for (auto& [id, sq] : g.per_stage) st_.stage_sync[id] = g.sync_end - g.sync_start;
  }
  st_.state_bytes.resize(P_, 0);
  st_.state_bytes[g.rank] += g.state_bytes;
  maybe_step_optimizers();
}

// Every rank flushed, every loss and every shard's sums of squares are here: the norm (added
// one by one in virtual stage order, so parameter by parameter in model order whatever the
// cut), the clip coefficient and the learning rate go to the shards.
void supervisor::maybe_step_optimizers() {
  if (static_cast<int>(st_.flushes.size()) < P_ || st_.losses_got < M_ || static_cast<int>(st_.sq_parts.size()) < shards_)
    return;
  if (st_.optimizers_asked) return;
  double total = 0;
  for (auto& [id, sums] : st_.sq_parts)  // id order
    for (double sq : sums) total += sq;
  st_.grad_norm = std::sqrt(total);
  if (const std::string why = divergence_error(st_.step, st_.losses, st_.grad_norm); !why.empty()) {
    stop(why, true);
    return;
  }
  const auto& o = ctx_->options;
  st_.lr = lr_at(st_.step, o.lr, o.warmup_steps, o.steps, o.min_lr_ratio, parse_lr_decay(o.lr_decay_style),
                 o.lr_decay_steps);
  const double coef = clip_coefficient(st_.grad_norm, o.grad_clip);
  // Parameters that are kept after this step (its checkpoint, the run's end, a stop asked for)
  // are checked: an update can overflow where the loss and the norm were still finite.
  const int done = st_.step + 1;
  const bool kept = done >= o.steps || periodic_save_due(done) || stopping_ || asked_signal() != 0 ||
                    (ctx_->eval_microbatches > 0 && eval_due(o, done));
  for (auto& shard : ctx_->optimizer_shards) self_->send(shard, msg::optimizer_step{st_.step, coef, st_.lr, kept});
  st_.optimizers_asked = true;
}

// Another process got a stop signal: the job stops after the step in flight, as for one of
// this process's own (the first one wins).
void supervisor::on_stop_request(const msg::stop_request& r) {
  if (requested_signal_ != 0) return;
  requested_signal_ = r.signal;
  log_info("process " + std::to_string(r.process) + " got " + signal_name(r.signal) +
           ": the job stops after the step in flight");
}

// Whether --save-every asks for a checkpoint after `done` steps.
bool supervisor::periodic_save_due(int done) const {
  const auto& o = ctx_->options;
  return !o.save_dir.empty() && o.save_every > 0 && done % o.save_every == 0;
}

// A stop signal (this process's, or one a follower passed on) with steps left after `done`:
// step `done` is the run's last (checkpointed where there is a --save-dir).
int supervisor::asked_signal() const {
  const int own = ctx_->options.stop_signal ? ctx_->options.stop_signal->load() : 0;
  return own != 0 ? own : requested_signal_;
}

void supervisor::stop_if_signalled(int done) {
  const auto& o = ctx_->options;
  const int signal = asked_signal();
  if (signal == 0 || done >= o.steps || stopping_) return;
  stopping_ = true;
  if (ctx_->result) ctx_->result->stopped_by_signal = signal;
  log_info(signal_name(signal) + ": step " + std::to_string(done) + " of " + std::to_string(o.steps) +
           " is this run's last" + (o.save_dir.empty() ? "" : "; its checkpoint follows"));
}

// The step is over: report it, maybe rebuild the plan, start the next step or finish.
void supervisor::on_optimizer_done(const msg::optimizer_done& d) {
  if (d.step != st_.step || failed_run_ || ++st_.optimizers_done < shards_) return;
  const int k = st_.step;
  const auto& o = ctx_->options;
  const step_metrics m = step_report(*ctx_, st_);
  if (ctx_->result) {
    // The first step this run ran (a resumed one's is not step 0).
    if (ctx_->result->steps.empty()) ctx_->result->optimizer_state_bytes = m.optimizer_state_bytes;
    keep_step(ctx_->result->steps, m, o.keep_step_metrics);
  }
  // A caller's callback that throws fails the run with its message (it was CAF's "unhandled
  // exception", and the caller heard "the supervisor stopped"), once the step it followed, which
  // is complete, has its checkpoint (with save_dir: it was lost, and a resume went back a step).
  if (ctx_->on_step) try {
      ctx_->on_step(m);
    } catch (const std::exception& e) {
      callback_error_ = "the on_step callback after step " + std::to_string(k + 1) + " threw: " + error_text(e);
    } catch (...) {
      callback_error_ =
          "the on_step callback after step " + std::to_string(k + 1) + " threw an exception that is not a std::exception";
    }
  if (!callback_error_.empty()) {
    if (o.save_dir.empty()) {
      stop(callback_error_);
      return;
    }
    stopping_ = true;  // this step is the last: its checkpoint, then the error (finish)
  }
  // After the callback: a stop it asks for (early stopping) ends the run at this step, as the
  // unpipelined run does (it trained one step more).
  stop_if_signalled(k + 1);
  // The last step's timeline; and before an evaluation pass or a checkpoint, after which the
  // run may end (a stop asked for during the pass, a checkpoint that fails).
  const auto keep_timeline = [this] {
    ctx_->result->last_step = measured_timeline(*ctx_, st_.flushes, ctx_->ranks);
    if (ctx_->replicas > 1) ctx_->result->last_step_all_ranks = measured_timeline(*ctx_, st_.flushes, ctx_->world_ranks());
  };
  if (ctx_->result &&
      (k + 1 == o.steps || stopping_ || periodic_save_due(k + 1) || (ctx_->eval_microbatches > 0 && eval_due(o, k + 1))))
    keep_timeline();
  if (!stopping_ && ctx_->replan_from >= 0 && k + 1 >= ctx_->replan_from && k + 1 <= ctx_->replan_until) {
    if (!replan(k, m.bubble_ratio)) return;
    // A stop asked for while the plan was rebuilt (tens of seconds on a large plan): this step
    // is the last (the run waited for the rebuild, then trained one more), and its timeline
    // the last step's.
    stop_if_signalled(k + 1);
    if (stopping_ && ctx_->result) keep_timeline();
  }
  after_step(k + 1);
}

// After `done` steps: a checkpoint when one is due (the next step starts once every shard has
// its snapshot in memory; the next save waits until this one is committed), then the next step
// or the end.
void supervisor::after_step(int done) {
  const auto& o = ctx_->options;
  if (ctx_->eval_microbatches > 0 && eval_due(o, done) && evaluated_after_ != done) {
    if (!stopping_) {
      start_eval(done);  // comes back here when the pass is over
      return;
    }
    log_info("the evaluation due after step " + std::to_string(done) + " is skipped: the run stops" +
             (o.save_dir.empty() ? std::string() : " (a run resumed from its checkpoint runs it first)"));
  }
  const bool due = !saves_failed_ && !o.save_dir.empty() && (periodic_save_due(done) || done == o.steps || stopping_);
  if (!due) {
    go_on(done);
    return;
  }
  if (save_) {  // the previous one is still being written
    deferred_save_ = done;
    deferred_at_ = ctx_->now();
    return;
  }
  start_save(done, ctx_->now());
}

void supervisor::go_on(int done) {
  if (done < ctx_->options.steps && !stopping_)
    begin_step(done);
  else
    finish();
}



// After step `measured`: rebuild the plan on the per-(op, virtual stage) median costs of every
// step measured so far (run_context::replan_from - 1 .. measured: the second rebuild pools two
// steps, so one slow phase of the machine in the first weighs less) and send it to every stage,
// for the steps from `measured + 1` on. A rebuilt plan replaces the one that ran only where
// choose_plan prefers it: on those costs and on them with the ranks' speeds made equal, it loses
// less to the best candidate. False if the job stopped.
bool supervisor::replan(int measured, double measured_bubble) {
  for (auto& f : st_.flushes) measured_events_.insert(measured_events_.end(), f.events.begin(), f.events.end());
  auto costs = std::make_shared<const cost_model>(median_costs(measured_events_, ctx_->virtual_stages));
  const int from = ctx_->replan_from;  // 1-based: the first measured step
  const std::string steps =
      measured + 1 == from ? "step " + std::to_string(from) : "steps " + std::to_string(from) + "-" + std::to_string(measured + 1);
  // A large plan takes seconds to rebuild (about 4 s at 64 virtual stages x 256 microbatches
  // on two CPUs): said first, so that the pause is not taken for a hang.
  const long long forwards = static_cast<long long>(ctx_->virtual_stages) * ctx_->microbatches;
  if (forwards >= 4096 && running_plan_ && running_plan_->uses_split_backward())
    log_info("plan: rebuilding " + ctx_->options.schedule + " on the costs measured in " + steps + " (" +
             std::to_string(ctx_->virtual_stages) + " virtual stages x " + std::to_string(ctx_->microbatches) +
             " microbatches: this may take a while; --unit-cost-plan skips it)");
  rebuilt_plan r;
  try {
    r = rebuild_plan(*ctx_, costs, running_plan_, steps, measured + 1, measured_bubble);
  } catch (const std::exception& e) {
    stop(std::string("rebuilding the plan on the measured costs failed: ") + error_text(e));
    return false;
  }
  const bool changed = r.use != running_plan_;
  running_plan_ = r.use;
  // Every stage holds the next step's inputs until this arrives, changed or not.
  for (auto& s : ctx_->stage) self_->send(s, msg::replan{measured + 1, changed, r.text});
  if (measured + 1 == ctx_->replan_until) measured_events_ = {};  // no further rebuild
  if (ctx_->result) {
    if (r.use != ctx_->static_plan) ctx_->result->replanned = r.use;
    if (!r.report.empty()) {
      auto& report = ctx_->result->replan_report;
      report += (report.empty() ? "" : "\n") + r.report;
    }
  }
  return true;
}

// After the last step: every parameter on this process (--save-final in a multi-process job):
// replica 0's, from its stages in other processes.
void supervisor::finish() {
  if (save_) {  // the last checkpoint is still being written
    finish_after_save_ = true;
    return;
  }
  if (!callback_error_.empty()) {  // its step's checkpoint is committed (or failed, and said so)
    stop(callback_error_);
    return;
  }
  if (ctx_->processes == 1 || !ctx_->options.gather_parameters) {
    stop("");
    return;
  }
  st_.gather_expected = 0;
  for (int v = 0; v < ctx_->virtual_stages; ++v)
    if (!ctx_->is_local_stage(v)) {
      self_->send(ctx_->chunk_actors[v], msg::gather_parameters{st_.step});
      ++st_.gather_expected;
    }
  maybe_gathered();  // with every one of replica 0's stages here, at once
}

void supervisor::on_parameter_names(msg::parameter_names& n) {
  st_.gathered_names[n.virtual_stage] = std::move(n.names);
  maybe_gathered();
}

void supervisor::on_parameter_arrived(msg::parameter_arrived& p) {
  st_.gathered[{p.virtual_stage, p.index}] = std::move(p.tensor);
  maybe_gathered();
}

// Every virtual stage's parameters in stage order: local ones from their runners, the others
// as gathered; tied copies are counted once, where owned (a remote chunk left its copies out).
std::vector<std::pair<std::string, tensor_box>> supervisor::all_parameters() {
  std::vector<std::pair<std::string, tensor_box>> all;
  for (int v = 0; v < ctx_->virtual_stages; ++v) {
    if (ctx_->is_local_stage(v)) {  // as the other processes send theirs: buffers too (a BatchNorm's statistics)
      for (auto& t : saved_tensors(*ctx_->runners[v])) all.push_back(std::move(t));
      continue;
    }
    auto& names = st_.gathered_names[v];
    for (size_t i = 0; i < names.size(); ++i) all.emplace_back(names[i], st_.gathered[{v, int(i)}]);
  }
  return all;
}

void supervisor::maybe_gathered() {
  if (static_cast<int>(st_.gathered_names.size()) < st_.gather_expected) return;
  size_t expected = 0;
  for (auto& [v, names] : st_.gathered_names) expected += names.size();
  if (st_.gathered.size() < expected) return;
  auto all = all_parameters();
  if (ctx_->result) ctx_->result->parameters = std::move(all);
  stop("");
}

// What each rank that has not flushed waits for, as the stage actors last reported.
std::string supervisor::stall_detail() const {
  std::string detail;
  for (int r = 0; r < P_; ++r) {
    bool flushed = std::any_of(st_.flushes.begin(), st_.flushes.end(), [r](auto& f) { return f.rank == r; });
    if (flushed) continue;
    auto it = st_.waiting.find(r);
    detail += (detail.empty() ? "" : "; ") + std::string("rank ") + std::to_string(r) + " waits for " +
              (it != st_.waiting.end() ? it->second : "its first input");
  }
  if (!detail.empty()) return detail;
  std::string shards;  // flushed, but a stage's gradients never became final (tied sum, reduction)
  for (int id = 0; id < shards_; ++id)
    if (!st_.sq_parts.count(id))
      shards += (shards.empty() ? "" : ", ") + ctx_->describe_stage(id);
  if (!shards.empty()) return "every rank flushed; the gradients of " + shards + " are not final (tied sum or gradient sync)";
  return "every rank flushed; the optimizer step did not finish";
}

void supervisor::on_deadline(const msg::step_deadline& d) {
  deadline_pending_ = false;
  if (st_.stopped) return;
  if (d.step != st_.step) {  // an older step's: the current one's, from when it began
    const double left = ctx_->options.step_timeout_s - (ctx_->now() - deadline_from_);
    if (left > 0) {
      deadline_pending_ = true;
      self_->delayed_send(self_, std::chrono::duration_cast<caf::timespan>(std::chrono::duration<double>(left)),
                          msg::step_deadline{st_.step});
      return;
    }
  }
  const std::string secs = number_text(ctx_->options.step_timeout_s);
  if (eval_) {
    stop("the evaluation after step " + std::to_string(eval_->done) + " (round " + std::to_string(eval_->round + 1) +
         " of " + std::to_string(eval_->rounds) + ") did not finish within " + secs + " s (--step-timeout): " +
         stall_detail());
    return;
  }
  stop(run_context::step_name(st_.step) + " of " + std::to_string(ctx_->options.steps) + " did not finish within " + secs + " s (--step-timeout): " + stall_detail());
}

}  // namespace detail

caf::behavior supervisor_actor(caf::event_based_actor* self, std::shared_ptr<const run_context> ctx) {
  auto s = std::make_shared<detail::supervisor>(self, std::move(ctx));
  self->set_down_handler([s](caf::down_msg& dm) { s->on_down(dm); });
  return {
      [s](msg::start_run& r) { s->on_start_run(r); },
      [s](msg::loss_report& l) { s->on_loss(l); },
      [s](msg::waiting& w) { s->on_waiting(w); },
      [s](msg::flush& f) { s->on_flush(f); },
      [s](msg::grad_sq_parts& g) { s->on_grad_sq_parts(g); },
      [s](msg::optimizer_done& d) { s->on_optimizer_done(d); },
      [s](msg::step_deadline& d) { s->on_deadline(d); },
      [s](msg::checkpoint_deadline& d) { s->on_checkpoint_deadline(d); },
      [s](msg::failure& f) { s->on_failure(f); },
      [s](const msg::stop_request& r) { s->on_stop_request(r); },
      [s](msg::parameter_names& n) { s->on_parameter_names(n); },
      [s](msg::parameter_arrived& p) { s->on_parameter_arrived(p); },
      [s](msg::state_snapshotted& x) { s->on_state_snapshotted(x); },
      [s](msg::state_written& x) { s->on_state_written(x); },
      [s](msg::eval_output& o) { s->on_eval_output(o); },
  };
}

}  // namespace actorpipe
