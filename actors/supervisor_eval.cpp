// The supervisor's evaluation passes (models with eval data): rounds of forward-only steps
// through the same actors, the last stage's outputs collected, then the model's loss and
// metrics.
#include <cstring>
#include <string>

#include "actors/supervisor.hpp"
#include "core/log.hpp"
#include "core/model/error_text.hpp"
#include "core/signal_name.hpp"

namespace actorpipe::detail {

// An evaluation pass after `done` steps: rounds of M microbatches per replica, each run as a
// step of its own through the same actors (forwards only), the last stage's outputs
// collected here; then the summary, and after_step(done) goes on.
void supervisor::start_eval(int done) {
  eval_.emplace();
  eval_->done = done;
  eval_->rounds = ctx_->eval_rounds();
  eval_->pieces.resize(static_cast<std::size_t>(eval_->rounds) * static_cast<std::size_t>(M_));
  eval_->started = ctx_->now();
  begin_eval_round();
}

void supervisor::begin_eval_round() {
  eval_->step_id = run_context::eval_step_base + next_eval_id_++;
  eval_->outputs = 0;
  st_.step = eval_->step_id;
  st_.flushes.clear();
  st_.waiting.clear();
  for (auto& f : ctx_->feeders) self_->send(f, msg::start_eval{eval_->step_id, eval_->round});
  arm_deadline();
}

void supervisor::on_eval_output(msg::eval_output& o) {
  if (!eval_ || o.step != eval_->step_id || failed_run_) return;
  const std::size_t at = static_cast<std::size_t>(eval_->round) * static_cast<std::size_t>(M_) +
                         static_cast<std::size_t>(o.microbatch);
  if (o.microbatch < 0 || o.microbatch >= M_) {
    stop("an eval output names microbatch " + std::to_string(o.microbatch) + " of " + std::to_string(M_));
    return;
  }
  eval_piece& p = eval_->pieces[at];
  p.shape = std::move(o.shape);
  p.outputs.resize(o.output_bits.size());
  if (!p.outputs.empty()) std::memcpy(p.outputs.data(), o.output_bits.data(), p.outputs.size() * sizeof(float));
  p.target_shape = std::move(o.target_shape);
  p.targets = std::move(o.targets);
  ++eval_->outputs;
  maybe_eval_round_done();
}

void supervisor::maybe_eval_round_done() {
  if (static_cast<int>(st_.flushes.size()) < P_ || eval_->outputs < M_) return;
  if (++eval_->round < eval_->rounds) {
    if (!drop_eval_for_stop()) begin_eval_round();
  } else {
    finish_eval();
  }
}

bool supervisor::drop_eval_for_stop() {
  const int signal = asked_signal();
  // After the last step the pass is the run's final one: it runs to its end.
  if (signal == 0 || eval_->done >= ctx_->options.steps) return false;
  const int done = eval_->done;
  const bool made_up = eval_->made_up;
  log_info(signal_name(signal) + ": the evaluation after step " + std::to_string(done) + " stops after round " +
           std::to_string(eval_->round) + " of " + std::to_string(eval_->rounds));
  eval_.reset();
  stop_if_signalled(done);
  if (made_up)
    go_on(done);  // the checkpoint this run started from still records the pass as due
  else
    after_step(done);  // says the pass is skipped; the checkpoint of step `done` records it
  return true;
}

void supervisor::finish_eval() {
  const int done = eval_->done;
  const bool made_up = eval_->made_up;
  eval_record r;
  try {
    r = summarize_eval(*ctx_->model, done, eval_->pieces);
  } catch (const std::exception& e) {
    eval_failed("the evaluation after step " + std::to_string(done) + ": " + error_text(e));
    return;
  }
  r.seconds = ctx_->now() - eval_->started;
  eval_.reset();
  evaluated_after_ = done;
  if (ctx_->on_eval) try {
      ctx_->on_eval(r);
    } catch (const std::exception& e) {
      stop("the on_eval callback after step " + std::to_string(done) + " threw: " + error_text(e));
      return;
    } catch (...) {
      stop("the on_eval callback after step " + std::to_string(done) + " threw an exception that is not a std::exception");
      return;
    }
  if (ctx_->result) ctx_->result->evals.push_back(std::move(r));
  stop_if_signalled(done);  // a stop asked for during the pass: no further step
  if (made_up)
    go_on(done);  // step `done`'s checkpoint is the one this run started from
  else
    after_step(done);
}

// An evaluation pass that failed: what the run trained must not go with it (a metric that
// throws after the last step lost every step, the checkpoint due there and --save-final). The
// run stops at this step as a requested stop does, with its checkpoint (with save_dir) and
// its parameters, and the error goes with the result for the caller to report.
void supervisor::eval_failed(const std::string& why) {
  const int done = eval_->done;
  const bool made_up = eval_->made_up;
  log_error(why + ": the run stops after step " + std::to_string(done) + ", keeping what it trained" +
            (ctx_->options.save_dir.empty() ? std::string() : " (a checkpoint of that step)"));
  if (ctx_->result && ctx_->result->eval_error.empty()) ctx_->result->eval_error = why;
  eval_.reset();
  evaluated_after_ = done;  // not made up on a resume either: it would fail again
  stopping_ = true;
  if (made_up)
    go_on(done);
  else
    after_step(done);
}

// A failure report. An action of an evaluation round that failed (its step an eval round's)
// fails the pass, not the run's training; any other stops the run.
void supervisor::on_failure(const msg::failure& f) {
  if (eval_ && !st_.stopped && run_context::is_eval_step(f.step)) {
    eval_failed("the evaluation after step " + std::to_string(eval_->done) + ": " + f.what);
    return;
  }
  stop(f.what, f.diverged, f.certain);
}

}  // namespace actorpipe::detail
