// Chunk actor: one virtual stage. Holds the inputs that arrived for it, tells its stage when an
// action's inputs are here, runs what the stage picks on the rank's compute thread, and sends
// F outputs to the next virtual stage and input-gradients to the previous one.
#include <algorithm>
#include <cstring>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "actors/messages.hpp"
#include "actors/run_context.hpp"
#include "core/log.hpp"
#include "core/model/error_text.hpp"
#include "core/model/layer_chunk.hpp"

namespace actorpipe {
namespace {

// "No gradient reached this virtual stage's input" (its loss does not depend on it), sent
// across the cut where a gradient would go: an i64 [1] tensor, which no gradient is (they are
// floating point). The stage before then computes no backward for the microbatch, as autograd
// in one piece would not (zeros gave its parameters gradients, and AdamW decayed them).
tensor_box no_gradient() {
  tensor_box t = tensor_box::empty(tensor_dtype::i64, {1});
  *static_cast<std::int64_t*>(t.data()) = 0;
  return t;
}

bool is_no_gradient(const tensor_box& t) {
  if (!t.defined() || t.shape() != std::vector<std::int64_t>{1}) return false;
  try {
    return t.dtype() == tensor_dtype::i64;
  } catch (const std::invalid_argument&) {  // an element type transports do not carry: a gradient
    return false;
  }
}

// Runs `job` on the rank's compute thread; if it throws, the supervisor hears "virtual stage v:
// <what> failed: <why>". The job reports its own success.
void on_compute_thread(caf::event_based_actor* self, const run_context& ctx, int id, const std::string& what,
                       std::function<void()> job) {
  auto sup = ctx.supervisor;
  const std::string where = ctx.describe_stage(id);
  self->send(ctx.compute[ctx.rank_of_stage(id)], msg::compute_job{[sup, where, what, job = std::move(job)] {
               try {
                 job();
               } catch (const std::exception& e) {
                 const bool certain = dynamic_cast<const certain_failure*>(&e) != nullptr;
                 caf::anon_send(sup, msg::failure{where + ": " + what + " failed: " + error_text(e), -1, false, certain});
               } catch (...) {
                 caf::anon_send(sup, msg::failure{where + ": " + what + " failed: an exception that is not a std::exception"});
               }
             }});
}

// The tie groups stage `id` takes part in (a stand-in stage holds no tied tensor: none), and
// how many tensors it receives from the other holders (of its replica) per step.
std::vector<int> tie_groups_of(const run_context& ctx, int id, int& expected_in) {
  std::vector<int> groups;
  expected_in = 0;
  const int v = ctx.pipeline_stage(id);
  for (int g = 0; g < static_cast<int>(ctx.ties.size()); ++g) {
    const auto& holders = ctx.ties[g].stages;
    if (std::find(holders.begin(), holders.end(), v) == holders.end()) continue;
    const int n = static_cast<int>(ctx.runners[id]->tied_parameters(ctx.ties[g].key).size());
    if (n == 0) continue;
    groups.push_back(g);
    expected_in += n * static_cast<int>(holders.size() - 1);
  }
  return groups;
}

// Compute thread: a copy of stage id's tied gradients to every other holder of each key in
// its replica.
void send_tied_gradients(const run_context& ctx, int id, int step, const std::vector<int>& groups) {
  const int rank = ctx.rank_of_stage(id), v = ctx.pipeline_stage(id), replica = ctx.replica_of_stage(id);
  for (int g : groups) {
    const auto& group = ctx.ties[g];
    const auto own = tied_gradient_copies(*ctx.runners[id], group.key);
    if (static_cast<int>(own.size()) > run_context::max_tied_tensors)
      throw std::invalid_argument("tie key '" + group.key + "' holds " + std::to_string(own.size()) + " tensors; at most " +
                                  std::to_string(run_context::max_tied_tensors) + " are synced per key");
    for (int u : group.stages) {
      if (u == v) continue;
      for (int j = 0; j < static_cast<int>(own.size()); ++j)
        ctx.send_tensor(tensor_kind::tied_gradient, step, ctx.stage_id(replica, u), ctx.tied_slot(g, j, v), rank,
                        own[j].defined() ? own[j] : no_gradient());
    }
  }
}

// Compute thread: each tied tensor of stage id becomes the sum of every holder's copy, in
// virtual-stage order (`in`: the others' copies by slot).
void sum_tied_gradients(const run_context& ctx, int id, const std::vector<int>& groups,
                        const std::map<int, tensor_box>& in) {
  const int v = ctx.pipeline_stage(id);
  for (int g : groups) {
    const auto& group = ctx.ties[g];
    const auto own = tied_gradient_copies(*ctx.runners[id], group.key);
    std::vector<std::vector<tensor_box>> per_holder;
    for (int u : group.stages) {
      if (u == v) {
        per_holder.push_back(own);
        continue;
      }
      std::vector<tensor_box> theirs;
      for (int j = 0; j < static_cast<int>(own.size()); ++j) {
        const tensor_box& t = in.at(ctx.tied_slot(g, j, u));
        theirs.push_back(is_no_gradient(t) ? tensor_box() : t);
      }
      per_holder.push_back(std::move(theirs));
    }
    set_tied_gradient_sums(*ctx.runners[id], group.key, per_holder);
  }
}

// Compute thread: stage id's parameters (tied copies left to their owner) to process 0, their
// names by control message.
msg::parameter_names send_parameters(const run_context& ctx, int id, int step) {
  msg::parameter_names names{id, {}};
  int index = 0;
  for (auto& [name, t] : saved_tensors(*ctx.runners[id])) {
    names.names.push_back(name);
    ctx.send_tensor_to_process(0, tensor_kind::parameter, step, id, index++, ctx.rank_of_stage(id), t.contiguous());
  }
  return names;
}

// One virtual stage's chunk (of one replica): the inputs that arrived for it, and one member
// per message. Once it has run the step's last backward it sums its tied gradients with the
// other holders, then hands its gradients to its optimizer shard.
class chunk {
 public:
  chunk(caf::event_based_actor* self, std::shared_ptr<const run_context> ctx, int id)
      : self_(self),
        ctx_(std::move(ctx)),
        id_(id),
        v_(ctx_->pipeline_stage(id)),
        replica_(ctx_->replica_of_stage(id)),
        rank_(ctx_->rank_of_stage(id)),
        last_(v_ + 1 == ctx_->virtual_stages) {
    groups_ = tie_groups_of(*ctx_, id_, expected_tied_in_);
  }

  void on_activation(msg::activation& a);
  void on_targets(msg::targets& t);
  void on_gradient(msg::gradient& g);
  void on_tied_sent(const msg::tied_sent& t);
  void on_tied_gradient(msg::tied_gradient& g);
  void on_gather_parameters(const msg::gather_parameters& g);
  void on_run(const msg::run& r);
  void on_job_done(msg::job_done& d);

 private:
  void enter(int step);
  void fail(const std::string& what);
  void forward_ready(int step, int m);
  void maybe_sum_tied(int step);
  void take_inputs(const action& a, tensor_box& input, tensor_box& extra);
  void send_outputs(msg::job_done& d);
  void gradients_final(int step);

  caf::event_based_actor* self_;
  std::shared_ptr<const run_context> ctx_;
  const int id_, v_, replica_, rank_;  // id: replica * S + v
  const bool last_;
  std::vector<int> groups_;  // the tie groups this stage takes part in
  int expected_tied_in_ = 0;  // tensors from the other holders per step
  int step_ = -1;
  std::map<int, tensor_box> inputs_, grads_, targets_;  // by microbatch
  int weight_grads_done_ = 0;  // B and W actions run this step
  // Tied sync: our copies are sent, and the other holders' gradients (by slot) have arrived.
  int tied_sent_step_ = -1;
  std::map<int, std::map<int, tensor_box>> tied_in_;  // by step, then slot
};

// Steps run one after another: the first message of a new step means the old one is over.
void chunk::enter(int step) {
  if (step == step_) return;
  step_ = step;
  inputs_.clear();
  grads_.clear();
  targets_.clear();
  weight_grads_done_ = 0;
}

void chunk::fail(const std::string& what) {
  self_->send(ctx_->supervisor, msg::failure{"virtual stage " + std::to_string(v_) + " (rank " + std::to_string(rank_) +
                                              "): " + what});
}

// F is ready when its input (and, on the last stage, its targets) arrived.
void chunk::forward_ready(int step, int m) {
  if (inputs_.count(m) && (!last_ || targets_.count(m)))
    self_->send(ctx_->stage[rank_], msg::input_ready{step, false, v_, m});
}

void chunk::on_activation(msg::activation& a) {
  enter(a.step);
  inputs_[a.microbatch] = std::move(a.tensor);
  forward_ready(a.step, a.microbatch);
}

void chunk::on_targets(msg::targets& t) {
  enter(t.step);
  targets_[t.microbatch] = std::move(t.tensor);
  forward_ready(t.step, t.microbatch);
}

void chunk::on_gradient(msg::gradient& g) {
  enter(g.step);
  grads_[g.microbatch] = is_no_gradient(g.tensor) ? tensor_box() : std::move(g.tensor);
  self_->send(ctx_->stage[rank_], msg::input_ready{g.step, true, v_, g.microbatch});
}

// The step's last backward has run: the gradients are final but for the tied sum. With tied
// tensors, send our copies to the other holders (the sum follows once theirs are here);
// without, hand the gradients to the optimizer shard now.
void chunk::gradients_final(int step) {
  if (groups_.empty()) {
    self_->send(ctx_->optimizer_shards[id_], msg::gradients_ready{step});
    return;
  }
  auto me = caf::actor_cast<caf::actor>(self_);
  auto ctx = ctx_;
  const int id = id_;
  const auto groups = groups_;
  on_compute_thread(self_, *ctx_, id_, "tied gradient sync", [=] {
    send_tied_gradients(*ctx, id, step, groups);
    caf::anon_send(me, msg::tied_sent{step});
  });
}

void chunk::on_tied_sent(const msg::tied_sent& t) {
  tied_sent_step_ = t.step;
  maybe_sum_tied(t.step);
}

void chunk::on_tied_gradient(msg::tied_gradient& g) {
  tied_in_[g.step][g.slot] = std::move(g.tensor);
  maybe_sum_tied(g.step);
}

// Everything for the tied sync is here: sum on the compute thread, then report.
void chunk::maybe_sum_tied(int step) {
  auto it = tied_in_.find(step);
  if (tied_sent_step_ != step || it == tied_in_.end() || static_cast<int>(it->second.size()) < expected_tied_in_)
    return;
  auto in = std::move(it->second);
  tied_in_.erase(it);
  auto ctx = ctx_;
  const int id = id_;
  const auto groups = groups_;
  on_compute_thread(self_, *ctx_, id_, "tied gradient sync", [=] {
    sum_tied_gradients(*ctx, id, groups, in);
    caf::anon_send(ctx->optimizer_shards[id], msg::gradients_ready{step});
  });
}

// --save-final across processes: every parameter to process 0.
void chunk::on_gather_parameters(const msg::gather_parameters& g) {
  auto ctx = ctx_;
  const int id = id_, step = g.step;
  on_compute_thread(self_, *ctx_, id_, "sending parameters",
                    [=] { caf::anon_send(ctx->supervisor, send_parameters(*ctx, id, step)); });
}

// The tensors action `a` consumes, taken out of what arrived: F's input (and the last stage's
// targets), B's or I's output gradient (the last stage starts from its loss).
void chunk::take_inputs(const action& a, tensor_box& input, tensor_box& extra) {
  const int m = a.microbatch;
  if (a.op == op_kind::forward) {
    input = std::move(inputs_.at(m));
    inputs_.erase(m);
    if (last_) {
      extra = std::move(targets_.at(m));
      targets_.erase(m);
    }
  } else if (produces_input_grad(a.op) && !last_) {
    input = std::move(grads_.at(m));
    grads_.erase(m);
  }
}

// One action as it runs on the rank's compute thread, with everything it needs captured; the
// result goes back to the chunk as job_done.
struct action_job {
  std::shared_ptr<const run_context> ctx;
  std::shared_ptr<chunk_compute> runner;
  caf::actor chunk;
  action a;
  tensor_box input, extra;  // F: input (and the last stage's targets); B/I: output gradient
  double loss_scale = 1;
  int step = 0;
  bool eval = false, last = false;
  // B hands its input gradient on as soon as it exists, then runs its weight part: the stage
  // before waits for I, not I + W (the same products, the same bits).
  bool early = false;
  int to = -1, rank = 0;  // early: the virtual stage before (in this replica), this rank
  int id = -1;            // this virtual stage's id
  // An F or I counted in the rank's queued_forward_or_input until it starts.
  bool counted = false;
  // A W run out of turn: may pause once, when an F or I waits for the compute thread, and
  // continue behind it (the F or I touches none of the W's gradients: same bits).
  bool may_pause = false;
  std::vector<double> earlier_parts;  // (start, end) of the parts it ran before pausing

  void operator()() const {
    msg::job_done d{step, a, {}, 0, 0, 0, 0, 0, {}, nullptr, -1, earlier_parts};
    d.start = ctx->now();
    if (!eval && ctx->backward_done && (a.op == op_kind::backward || a.op == op_kind::weight_grad)) {
      // The step's last backward action of this chunk: after it, every microbatch's is done.
      const std::atomic<int>* done = &ctx->backward_done[3 * id];
      const int b = done[0], i = done[1], w = done[2];
      const bool last = b + w + 1 == ctx->microbatches && (a.op == op_kind::backward ? i == w : i == w + 1);
      ctx->in_last_backward[id].store(last);
    }
    if (counted) ctx->queued_forward_or_input[rank].fetch_sub(1);
    const bool producer = !eval && a.op != op_kind::weight_grad && ctx->started_step;  // of another stage's input
    const bool back = a.op != op_kind::forward;
    const int slot = producer ? ctx->action_slot(id, a.microbatch, back) : -1;
    if (producer) {
      ctx->started_at[slot].store(d.start);
      ctx->started_step[slot].store(2 * step);
    }
    try {
      if (eval) {
        evaluate(d);
      } else if (may_pause) {  // a W
        auto waits = [this] { return ctx->queued_forward_or_input[rank].load() > 0; };
        if (!runner->weight_grad_until(a.microbatch, waits)) {
          continue_later(d.start);
          return;
        }
      } else {
        train(d);
      }
    } catch (const std::exception& e) {
      d.error = error_text(e);
      d.certain = dynamic_cast<const certain_failure*>(&e) != nullptr;
    } catch (...) {  // a user's layer may throw anything
      d.error = "an exception that is not a std::exception";
    }
    d.end = ctx->now();
    if (!eval && a.op != op_kind::forward && ctx->backward_done) {
      std::atomic<int>* done = &ctx->backward_done[3 * id];  // B, I, W
      ++done[a.op == op_kind::backward ? 0 : a.op == op_kind::input_grad ? 1 : 2];
      ctx->in_last_backward[id].store(false);
      if (done[0] + done[2] == ctx->microbatches && done[1] == done[2])  // every microbatch's backward: the next step's
        done[0] = done[1] = done[2] = 0;
    }
    if (producer) {
      ctx->last_took[ctx->took_slot(id, back)].store((d.output_at >= 0 ? d.output_at : d.end) - d.start);
      ctx->started_step[slot].store(2 * step + 1);  // its output is on its way
    }
    // The rank's counts, read on the thread that runs each of its chunks: the chunks' reports
    // reach the stage actor each through its own chunk actor, so in another order than they
    // ran, and a sum of each chunk's last report counted an F before the B that ran ahead of it
    // (interleaved's peak came out one too high).
    for (int other = 0; other < static_cast<int>(ctx->runners.size()); ++other) {
      if (ctx->rank_of_stage(other) != rank || !ctx->runners[other]) continue;
      d.live_stashes += ctx->runners[other]->live_stashes();
      d.pending_weight_grads += ctx->runners[other]->pending_weight_grads();
    }
    caf::anon_send(chunk, std::move(d));
  }

  // The W paused: the rest goes behind the F or I that waits (once; it runs to the end then).
  void continue_later(double started) const {
    action_job rest = *this;
    rest.may_pause = false;
    rest.earlier_parts.push_back(started);
    rest.earlier_parts.push_back(ctx->now());
    ACTORPIPE_LOG(trace, "rank " + std::to_string(rank) + ": " + to_string(a) + " pauses for an F or I");
    caf::anon_send(ctx->compute[rank], msg::compute_job{std::move(rest)});
  }

  // An eval round: forwards only, nothing kept.
  void evaluate(msg::job_done& d) const {
    if (a.op != op_kind::forward) throw std::logic_error("an eval round runs forwards only");
    d.output = runner->evaluate(a.microbatch, input);
    if (last) d.eval = std::make_shared<const eval_piece>(make_eval_piece(*ctx->model, d.output, extra));
  }

  void train(msg::job_done& d) const {
    switch (a.op) {
      case op_kind::forward: {
        auto res = runner->forward(a.microbatch, input, extra, loss_scale);
        d.output = std::move(res.output);
        d.loss = res.loss;
        break;
      }
      case op_kind::backward:
        if (early)
          backward_sending_early(d);
        else
          d.output = runner->backward(a.microbatch, input, false);
        break;
      case op_kind::input_grad: d.output = runner->backward(a.microbatch, input, true); break;
      case op_kind::weight_grad: runner->weight_grad(a.microbatch); break;
    }
  }

  void backward_sending_early(msg::job_done& d) const {
    tensor_box g = runner->backward(a.microbatch, input, true);
    d.output_at = ctx->now();  // before the send: the stage before may start before this thread runs again
    ctx->send_tensor(tensor_kind::gradient, step, to, a.microbatch, rank, g.defined() ? std::move(g) : no_gradient());
    runner->weight_grad(a.microbatch);
  }
};

// Runs the action on the rank's compute thread; the result comes back as job_done.
void chunk::on_run(const msg::run& r) {
  action_job job;
  job.ctx = ctx_;
  job.runner = ctx_->runners[id_];
  job.chunk = caf::actor_cast<caf::actor>(self_);
  job.a = r.act;
  take_inputs(job.a, job.input, job.extra);
  // The loss is the mean over every replica's microbatches: replicas' gradients add up.
  job.loss_scale = 1.0 / (double(ctx_->microbatches) * ctx_->replicas);
  job.step = r.step;
  job.eval = run_context::is_eval_step(r.step);
  job.last = last_;
  job.early = ctx_->options.early_input_grad && job.a.op == op_kind::backward && v_ > 0 && !job.eval;
  job.to = id_ - 1;
  job.id = id_;
  job.rank = rank_;
  if (ctx_->queued_forward_or_input && !job.eval) {
    job.may_pause = r.fill && job.a.op == op_kind::weight_grad && ctx_->options.pause_filled_weight_grads;
    job.counted = job.a.op == op_kind::forward || job.a.op == op_kind::input_grad;
    if (job.counted) ctx_->queued_forward_or_input[rank_].fetch_add(1);
  }
  self_->send(ctx_->compute[rank_], msg::compute_job{std::move(job), r.order});
}

// F's output to the next virtual stage (the last one reports its loss), B's or I's input
// gradient to the previous one.
void chunk::send_outputs(msg::job_done& d) {
  const action a = d.act;
  if (a.op == op_kind::forward && d.eval && last_) {
    const eval_piece& p = *d.eval;
    msg::eval_output out{d.step, -1, p.shape, std::vector<std::uint32_t>(p.outputs.size()), p.target_shape, p.targets};
    out.microbatch = replica_ * ctx_->microbatches + a.microbatch;  // in the round; the supervisor adds the round
    if (!p.outputs.empty()) std::memcpy(out.output_bits.data(), p.outputs.data(), p.outputs.size() * sizeof(float));
    self_->send(ctx_->supervisor, std::move(out));
  } else if (a.op == op_kind::forward) {
    if (last_)
      self_->send(ctx_->supervisor, msg::loss_report{d.step, replica_ * ctx_->microbatches + a.microbatch, d.loss});
    else
      ctx_->send_tensor(tensor_kind::activation, d.step, id_ + 1, a.microbatch, rank_, std::move(d.output));
  } else if (produces_input_grad(a.op) && v_ > 0) {
    ctx_->send_tensor(tensor_kind::gradient, d.step, id_ - 1, a.microbatch, rank_,
                      d.output.defined() ? std::move(d.output) : no_gradient());
  }
}

void chunk::on_job_done(msg::job_done& d) {
  const action a = d.act;
  if (!d.error.empty()) {
    self_->send(ctx_->supervisor, msg::failure{"rank " + std::to_string(rank_) + ", " + run_context::step_name(d.step) +
                                                   ": " + to_string(a) + " failed: " + d.error,
                                               d.step, false, d.certain});
    return;
  }
  const bool sent = d.output_at >= 0;  // an early B sent its gradient itself
  if (!d.output.defined() && a.op == op_kind::forward && !last_) {
    fail(to_string(a) + " produced no tensor to send");
    return;
  }
  if (!sent) send_outputs(d);
  self_->send(ctx_->stage[rank_], msg::action_done{d.step, a, d.start, d.end, d.live_stashes, d.pending_weight_grads,
                                                   d.output_at, std::move(d.earlier_parts)});
  if ((a.op == op_kind::backward || a.op == op_kind::weight_grad) && ++weight_grads_done_ == ctx_->microbatches)
    gradients_final(d.step);
}

}  // namespace

caf::behavior chunk_actor(caf::event_based_actor* self, std::shared_ptr<const run_context> ctx, int v) {
  auto c = std::make_shared<chunk>(self, std::move(ctx), v);
  return {
      [c](msg::activation& a) { c->on_activation(a); },
      [c](msg::targets& t) { c->on_targets(t); },
      [c](msg::gradient& g) { c->on_gradient(g); },
      [c](msg::tied_sent& t) { c->on_tied_sent(t); },
      [c](msg::tied_gradient& g) { c->on_tied_gradient(g); },
      [c](msg::gather_parameters& g) { c->on_gather_parameters(g); },
      [c](msg::run& r) { c->on_run(r); },
      [c](msg::job_done& d) { c->on_job_done(d); },
  };
}

}  // namespace actorpipe
