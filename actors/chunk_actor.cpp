// Chunk actor: one virtual stage. Holds the inputs that arrived for it, tells its stage when an
// action's inputs are here, runs what the stage picks on the rank's compute thread, and sends
// F outputs to the next virtual stage and input-gradients to the previous one.
#include <algorithm>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "actors/messages.hpp"
#include "actors/run_context.hpp"
#include "core/model/layer_chunk.hpp"

namespace actorpipe {
namespace {

struct chunk_state {
  int step = -1;
  std::map<int, tensor_box> inputs, grads, targets;  // by microbatch
  // Tied sync: our copies are sent, and the other holders' gradients (by slot) have arrived.
  int tied_sent_step = -1;
  std::map<int, std::map<int, tensor_box>> tied_in;  // by step, then slot
};

// Runs `job` on the rank's compute thread; if it throws, the supervisor hears "virtual stage v:
// <what> failed: <why>". The job reports its own success.
void on_compute_thread(caf::event_based_actor* self, const run_context& ctx, int v, const std::string& what,
                       std::function<void()> job) {
  auto sup = ctx.supervisor;
  self->send(ctx.compute[ctx.place.rank_of[v]], msg::compute_job{[sup, v, what, job = std::move(job)] {
               try {
                 job();
               } catch (const std::exception& e) {
                 caf::anon_send(sup, msg::failure{"virtual stage " + std::to_string(v) + ": " + what + " failed: " + e.what()});
               }
             }});
}

// The tie groups stage v takes part in (a stand-in stage holds no tied tensor: none), and how
// many tensors it receives from the other holders per step.
std::vector<int> tie_groups_of(const run_context& ctx, int v, int& expected_in) {
  std::vector<int> groups;
  expected_in = 0;
  for (int g = 0; g < static_cast<int>(ctx.ties.size()); ++g) {
    const auto& holders = ctx.ties[g].stages;
    if (std::find(holders.begin(), holders.end(), v) == holders.end()) continue;
    const int n = static_cast<int>(ctx.runners[v]->tied_parameters(ctx.ties[g].key).size());
    if (n == 0) continue;
    groups.push_back(g);
    expected_in += n * static_cast<int>(holders.size() - 1);
  }
  return groups;
}

// Compute thread: a copy of stage v's tied gradients to every other holder of each key.
void send_tied_gradients(const run_context& ctx, int v, int step, const std::vector<int>& groups) {
  const int rank = ctx.place.rank_of[v];
  for (int g : groups) {
    const auto& group = ctx.ties[g];
    const auto own = tied_gradient_copies(*ctx.runners[v], group.key);
    if (static_cast<int>(own.size()) > run_context::max_tied_tensors)
      throw std::invalid_argument("tie key '" + group.key + "' holds " + std::to_string(own.size()) + " tensors; at most " +
                                  std::to_string(run_context::max_tied_tensors) + " are synced per key");
    for (int u : group.stages) {
      if (u == v) continue;
      for (int j = 0; j < static_cast<int>(own.size()); ++j)
        ctx.send_tensor(tensor_kind::tied_gradient, step, u, ctx.tied_slot(g, j, v), rank, own[j]);
    }
  }
}

// Compute thread: each tied tensor of stage v becomes the sum of every holder's copy, in
// virtual-stage order (`in`: the others' copies by slot).
void sum_tied_gradients(const run_context& ctx, int v, const std::vector<int>& groups,
                        const std::map<int, tensor_box>& in) {
  for (int g : groups) {
    const auto& group = ctx.ties[g];
    const auto own = tied_gradient_copies(*ctx.runners[v], group.key);
    std::vector<std::vector<tensor_box>> per_holder;
    for (int u : group.stages) {
      if (u == v) {
        per_holder.push_back(own);
        continue;
      }
      std::vector<tensor_box> theirs;
      for (int j = 0; j < static_cast<int>(own.size()); ++j) theirs.push_back(in.at(ctx.tied_slot(g, j, u)));
      per_holder.push_back(std::move(theirs));
    }
    set_tied_gradient_sums(*ctx.runners[v], group.key, per_holder);
  }
}

// Compute thread: stage v's parameters (tied copies left to their owner) to process 0, their
// names by control message.
msg::parameter_names send_parameters(const run_context& ctx, int v, int step) {
  msg::parameter_names names{v, {}};
  int index = 0;
  const auto& runner = *ctx.runners[v];
  const auto copies = runner.tied_copies();
  for (auto& [name, t] : runner.named_parameters()) {
    if (std::find(copies.begin(), copies.end(), name) != copies.end()) continue;
    names.names.push_back(name);
    ctx.send_tensor_to_process(0, tensor_kind::parameter, step, v, index++, ctx.place.rank_of[v], t.contiguous());
  }
  return names;
}

}  // namespace

caf::behavior chunk_actor(caf::event_based_actor* self, std::shared_ptr<const run_context> ctx, int v) {
  auto st = std::make_shared<chunk_state>();
  const int rank = ctx->place.rank_of[v];
  const bool last = v + 1 == ctx->virtual_stages;
  // Steps run one after another: the first message of a new step means the old one is over.
  auto enter = [st](int step) {
    if (step == st->step) return;
    st->step = step;
    st->inputs.clear();
    st->grads.clear();
    st->targets.clear();
  };
  int expected_in = 0;
  const std::vector<int> my_groups = tie_groups_of(*ctx, v, expected_in);
  auto fail = [=](std::string what) {
    self->send(ctx->supervisor, msg::failure{"virtual stage " + std::to_string(v) + " (rank " + std::to_string(rank) +
                                             "): " + std::move(what)});
  };
  // Everything for the tied sync is here: sum on the compute thread, then report.
  auto maybe_sum_tied = [=](int step) {
    auto it = st->tied_in.find(step);
    if (st->tied_sent_step != step || it == st->tied_in.end() || static_cast<int>(it->second.size()) < expected_in) return;
    auto in = std::move(it->second);
    st->tied_in.erase(it);
    auto sup = ctx->supervisor;
    on_compute_thread(self, *ctx, v, "tied gradient sync", [=] {
      sum_tied_gradients(*ctx, v, my_groups, in);
      caf::anon_send(sup, msg::tied_sync_done{step, v});
    });
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
        if (my_groups.empty()) {  // a stand-in without the tied parameters: nothing to sum
          self->send(ctx->supervisor, msg::tied_sync_done{t.step, v});
          return;
        }
        auto me = caf::actor_cast<caf::actor>(self);
        const int step = t.step;
        on_compute_thread(self, *ctx, v, "tied gradient sync", [=] {
          send_tied_gradients(*ctx, v, step, my_groups);
          caf::anon_send(me, msg::tied_sent{step});
        });
      },
      [=](msg::tied_sent& t) {
        st->tied_sent_step = t.step;
        maybe_sum_tied(t.step);
      },
      [=](msg::tied_gradient& g) {
        st->tied_in[g.step][g.slot] = std::move(g.tensor);
        maybe_sum_tied(g.step);
      },
      [=](msg::gather_parameters& g) {
        // --save-final across processes: every parameter to process 0.
        auto sup = ctx->supervisor;
        const int step = g.step;
        on_compute_thread(self, *ctx, v, "sending parameters", [=] { caf::anon_send(sup, send_parameters(*ctx, v, step)); });
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
