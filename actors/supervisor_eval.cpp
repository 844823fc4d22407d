// The supervisor's evaluation passes (models with eval data): rounds of forward-only steps
// through the same actors, the last stage's outputs collected, then the model's loss and
// metrics.
#include <cstring>
#include <string>

#include "actors/supervisor.hpp"
#include "core/model/error_text.hpp"

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
  self_->delayed_send(self_,
                      std::chrono::duration_cast<caf::timespan>(std::chrono::duration<double>(ctx_->options.step_timeout_s)),
                      msg::step_deadline{eval_->step_id});
}

void supervisor::on_eval_output(msg::eval_output& o) {
  if (!eval_ || o.step != eval_->step_id) return;
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
  if (++eval_->round < eval_->rounds)
    begin_eval_round();
  else
    finish_eval();
}

void supervisor::finish_eval() {
  const int done = eval_->done;
  const bool made_up = eval_->made_up;
  eval_record r;
  try {
    r = summarize_eval(*ctx_->model, done, eval_->pieces);
  } catch (const std::exception& e) {
    stop("the evaluation after step " + std::to_string(done) + ": " + error_text(e));
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

}  // namespace actorpipe::detail
