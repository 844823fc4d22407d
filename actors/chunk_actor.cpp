// Chunk actor: one virtual stage. Holds the inputs that arrived for it, tells its stage when an
// action's inputs are here, runs what the stage picks on the rank's compute thread, and sends
// F outputs to the next virtual stage and input-gradients to the previous one.
#include <map>

#include "actors/messages.hpp"
#include "actors/run_context.hpp"
#include "core/model/chunk_runner.hpp"

namespace actorpipe {
namespace {

struct chunk_state {
  int step = -1;
  std::map<int, tensor_box> inputs, grads, targets;  // by microbatch
  // Tied embedding sync: our copy is sent, and the other copy's gradient has arrived.
  int tied_sent_step = -1;
  std::map<int, tensor_box> tied_other;  // by step
};

}  // namespace

caf::behavior chunk_actor(caf::event_based_actor* self, std::shared_ptr<const run_context> ctx, int v) {
  auto st = std::make_shared<chunk_state>();
  const int rank = ctx->place.rank_of[v];
  const bool last = v + 1 == ctx->stages;
  // Steps run one after another: the first message of a new step means the old one is over.
  auto enter = [st](int step) {
    if (step == st->step) return;
    st->step = step;
    st->inputs.clear();
    st->grads.clear();
    st->targets.clear();
  };
  // The first and last chunks of the GPT each hold a copy of the tied embedding.
  bool holds_tied = false;
  for (auto& [name, t] : ctx->runners[v]->named_parameters()) holds_tied = holds_tied || name == "tok_emb.weight";
  auto fail = [=](std::string what) {
    self->send(ctx->supervisor, msg::failure{"virtual stage " + std::to_string(v) + " (rank " + std::to_string(rank) +
                                             "): " + std::move(what)});
  };
  // Both halves of the tied sync are here: add the other copy's gradient to ours.
  auto maybe_sum_tied = [=](int step) {
    auto it = st->tied_other.find(step);
    if (st->tied_sent_step != step || it == st->tied_other.end()) return;
    tensor_box other = std::move(it->second);
    st->tied_other.erase(it);
    auto runner = ctx->runners[v];
    auto sup = ctx->supervisor;
    self->send(ctx->compute[rank], msg::compute_job{[=] {
                 try {
                   add_tied_gradient(*runner, other);
                   caf::anon_send(sup, msg::tied_sync_done{step, v});
                 } catch (const std::exception& e) {
                   caf::anon_send(sup, msg::failure{"virtual stage " + std::to_string(v) + ": tied gradient sync failed: " + e.what()});
                 }
               }});
  };
  auto forward_ready = [=](int step, int m) {
    if (st->inputs.count(m) && (!last || st->targets.count(m)))
      self->send(ctx->stage[rank], msg::input_ready{step, false, v, m});
  };
  return {
      [=](msg::activation& a) {
        enter(a.step);
        st->inputs[a.microbatch] = std::move(a.tensor);
        forward_ready(a.step, a.microbatch);
      },
      [=](msg::targets& t) {
        enter(t.step);
        st->targets[t.microbatch] = std::move(t.tensor);
        forward_ready(t.step, t.microbatch);
      },
      [=](msg::gradient& g) {
        enter(g.step);
        st->grads[g.microbatch] = std::move(g.tensor);
        self->send(ctx->stage[rank], msg::input_ready{g.step, true, v, g.microbatch});
      },
      [=](msg::tied_sync& t) {
        if (!holds_tied) {  // a stage without the embedding (a stand-in): nothing to sum
          self->send(ctx->supervisor, msg::tied_sync_done{t.step, v});
          return;
        }
        // Send a copy of our tied gradient to the other copy (first <-> last virtual stage).
        const int other = v == 0 ? ctx->stages - 1 : 0;
        auto runner = ctx->runners[v];
        auto me = caf::actor_cast<caf::actor>(self);
        auto sup = ctx->supervisor;
        const int step = t.step;
        self->send(ctx->compute[rank], msg::compute_job{[=] {
                     try {
                       ctx->send_tensor(tensor_kind::tied_gradient, step, other, 0, rank, tied_gradient_copy(*runner));
                       caf::anon_send(me, msg::tied_sent{step});
                     } catch (const std::exception& e) {
                       caf::anon_send(sup, msg::failure{"virtual stage " + std::to_string(v) + ": tied gradient sync failed: " + e.what()});
                     }
                   }});
      },
      [=](msg::tied_sent& t) {
        st->tied_sent_step = t.step;
        maybe_sum_tied(t.step);
      },
      [=](msg::tied_gradient& g) {
        st->tied_other[g.step] = std::move(g.tensor);
        maybe_sum_tied(g.step);
      },
      [=](msg::gather_parameters& g) {
        // --save-final across processes: every parameter to process 0, names by control message.
        auto runner = ctx->runners[v];
        auto sup = ctx->supervisor;
        const int step = g.step;
        self->send(ctx->compute[rank], msg::compute_job{[=] {
                     try {
                       msg::parameter_names names{v, {}};
                       int index = 0;
                       for (auto& [name, t] : runner->named_parameters()) {
                         names.names.push_back(name);
                         ctx->send_tensor_to_process(0, tensor_kind::parameter, step, v, index++, rank, t.contiguous());
                       }
                       caf::anon_send(sup, std::move(names));
                     } catch (const std::exception& e) {
                       caf::anon_send(sup, msg::failure{"virtual stage " + std::to_string(v) + ": sending parameters failed: " + e.what()});
                     }
                   }});
      },
      [=](msg::run& r) {
        const action a = r.act;
        const int m = a.microbatch;
        tensor_box input, extra;
        if (a.op == op_kind::forward) {
          input = std::move(st->inputs.at(m));
          st->inputs.erase(m);
          if (last) {
            extra = std::move(st->targets.at(m));
            st->targets.erase(m);
          }
        } else if (produces_input_grad(a.op) && !last) {
          input = std::move(st->grads.at(m));
          st->grads.erase(m);
        }
        auto runner = ctx->runners[v];
        auto me = caf::actor_cast<caf::actor>(self);
        const double loss_scale = 1.0 / ctx->microbatches;
        const int step = r.step;
        auto work = [ctx, runner, me, a, input, extra, loss_scale, step] {
          msg::job_done d{step, a, {}, 0, 0, 0, 0, 0, {}};
          d.start = ctx->now();
          try {
            switch (a.op) {
              case op_kind::forward: {
                auto res = runner->forward(a.microbatch, input, extra, loss_scale);
                d.output = std::move(res.output);
                d.loss = res.loss;
                break;
              }
              case op_kind::backward: d.output = runner->backward(a.microbatch, input, false); break;
              case op_kind::input_grad: d.output = runner->backward(a.microbatch, input, true); break;
              case op_kind::weight_grad: runner->weight_grad(a.microbatch); break;
            }
          } catch (const std::exception& e) {
            d.error = e.what();
          }
          d.end = ctx->now();
          d.live_stashes = runner->live_stashes();
          d.pending_weight_grads = runner->pending_weight_grads();
          caf::anon_send(me, std::move(d));
        };
        self->send(ctx->compute[rank], msg::compute_job{std::move(work)});
      },
      [=](msg::job_done& d) {
        const action a = d.act;
        if (!d.error.empty()) {
          self->send(ctx->supervisor, msg::failure{"rank " + std::to_string(rank) + ", step " + std::to_string(d.step) +
                                                   ": " + to_string(a) + " failed: " + d.error});
          return;
        }
        if (!d.output.defined() && ((a.op == op_kind::forward && !last) || (produces_input_grad(a.op) && v > 0))) {
          fail(to_string(a) + " produced no tensor to send");
          return;
        }
        if (a.op == op_kind::forward) {
          if (last)
            self->send(ctx->supervisor, msg::loss_report{d.step, a.microbatch, d.loss});
          else
            ctx->send_tensor(tensor_kind::activation, d.step, v + 1, a.microbatch, rank, std::move(d.output));
        } else if (produces_input_grad(a.op) && v > 0) {
          ctx->send_tensor(tensor_kind::gradient, d.step, v - 1, a.microbatch, rank, std::move(d.output));
        }
        self->send(ctx->stage[rank],
                   msg::action_done{d.step, a, d.start, d.end, d.live_stashes, d.pending_weight_grads});
      },
  };
}

}  // namespace actorpipe
