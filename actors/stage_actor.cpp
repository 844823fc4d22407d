// Stage actor: one per rank. Owns the rank's policy, knows which actions are ready (inputs
// arrived, local prerequisites done), hands one action at a time to its chunk, measures what
// ran, and reports the flush when the rank has run every action of the step.
#include <algorithm>
#include <set>

#include "actors/messages.hpp"
#include "actors/run_context.hpp"
#include "core/log.hpp"
#include "core/schedule/plan.hpp"

namespace actorpipe {
namespace {

struct stage_state {
  std::unique_ptr<rank_policy> policy;
  int step = -1;
  std::set<std::pair<int, int>> fwd_in, grad_in, f_done, i_done;  // (virtual stage, microbatch)
  std::vector<std::pair<action, double>> running;  // handed to the compute thread, with start times
  std::map<int, int> live, pending;  // per virtual stage, as the chunk runners last reported
  int peak = 0, peak_pending = 0;
  std::vector<timeline_event> events;
  std::string last_waiting;
  bool replanned = false;                 // the rebuilt plan (run_context::replan_from) arrived
  std::vector<msg::input_ready> held;     // inputs of steps that must wait for it
};

}  // namespace

std::unique_ptr<rank_policy> run_context::make_policy(int rank) const {
  if (static_plan) return make_static_policy(*static_plan, rank);
  return actorpipe::make_policy(policy, ranks, microbatches, place.chunks(), rank, options.greedy_budget);
}

caf::behavior stage_actor(caf::event_based_actor* self, std::shared_ptr<const run_context> ctx, int rank) {
  auto st = std::make_shared<stage_state>();
  st->policy = ctx->make_policy(rank);
  auto enter = [st](int step) {
    if (step == st->step) return;
    st->step = step;
    st->policy->reset();
    st->fwd_in.clear(), st->grad_in.clear(), st->f_done.clear(), st->i_done.clear();
    st->running.clear();
    st->live.clear(), st->pending.clear();
    st->peak = st->peak_pending = 0;
    st->events.clear();
    st->last_waiting.clear();
  };
  auto ready = [st, ctx](const action& a) {
    return action_ready(a, ctx->virtual_stages, [&](awaited d, int v, int m) {
      const auto key = std::make_pair(v, m);
      switch (d) {
        case awaited::input: return st->fwd_in.count(key) > 0;
        case awaited::forward_done: return st->f_done.count(key) > 0;
        case awaited::gradient: return st->grad_in.count(key) > 0;
        case awaited::input_grad_done: return st->i_done.count(key) > 0;
      }
      return false;
    });
  };
  // Up to two actions in flight: the second waits in the compute actor's mailbox and starts the
  // moment the first ends, instead of after a done -> stage -> chunk -> compute round trip.
  // So a stall report can say what a busy rank is stuck in: the oldest action in flight.
  auto report_running = [=] {
    if (st->running.empty()) return;
    std::string what = to_string(st->running.front().first) + " to finish (handed to the compute thread at " +
                       std::to_string(st->running.front().second) + " s)";
    if (what == st->last_waiting) return;
    st->last_waiting = what;
    self->send(ctx->supervisor, msg::waiting{st->step, rank, what});
  };
  auto dispatch = [=] {
    while (st->running.size() < 2 && !st->policy->finished()) {
      auto a = st->policy->next(ready);
      if (!a) break;
      st->running.emplace_back(*a, ctx->now());
      self->send(ctx->chunk_actors[a->virtual_stage], msg::run{st->step, *a});
    }
    report_running();
    if (!st->running.empty() || st->policy->finished()) return;
    // Idle: tell the supervisor what we wait for, so a stall can be explained.
    std::string what = st->policy->waiting_for();
    if (what != st->last_waiting) {
      st->last_waiting = what;
      self->send(ctx->supervisor, msg::waiting{st->step, rank, what});
    }
  };
  auto on_input = [=](const msg::input_ready& r) {
    enter(r.step);
    (r.is_gradient ? st->grad_in : st->fwd_in).insert({r.virtual_stage, r.microbatch});
    dispatch();
  };
  return {
      [=](msg::input_ready& r) {
        // Across processes an input of the next step can overtake the plan on its way here.
        if (ctx->replan_from >= 0 && r.step >= ctx->replan_from && !st->replanned) {
          st->held.push_back(r);
          return;
        }
        on_input(r);
      },
      [=](msg::replan& p) {
        try {
          const plan rebuilt = parse_plan(p.plan_text, "plan rebuilt on measured costs");
          st->policy = make_static_policy(rebuilt, rank);
        } catch (const std::exception& e) {
          self->send(ctx->supervisor, msg::failure{"rank " + std::to_string(rank) + ": the rebuilt plan: " + e.what()});
          return;
        }
        st->replanned = true;
        log_debug("rank " + std::to_string(rank) + ": runs the plan rebuilt on measured costs from step " +
                  std::to_string(p.from_step + 1));
        st->step = -1;  // the next input enters its step with the new policy reset
        auto held = std::move(st->held);
        st->held.clear();
        for (auto& r : held) on_input(r);
      },
      [=](msg::action_done& d) {
        const action a = d.act;
        st->policy->completed(a);
        st->running.erase(std::find_if(st->running.begin(), st->running.end(),
                                       [&](const std::pair<action, double>& r) { return r.first == a; }));
        const auto key = std::make_pair(a.virtual_stage, a.microbatch);
        if (a.op == op_kind::forward) st->f_done.insert(key);
        if (produces_input_grad(a.op)) st->i_done.insert(key);
        st->live[a.virtual_stage] = d.live_stashes;
        st->pending[a.virtual_stage] = d.pending_weight_grads;
        int live = 0, pending = 0;
        for (auto& [v, n] : st->live) live += n;
        for (auto& [v, n] : st->pending) pending += n;
        st->peak = std::max(st->peak, live);
        st->peak_pending = std::max(st->peak_pending, pending);
        st->events.push_back({rank, a, ctx->place.chunk_of[a.virtual_stage], d.start, d.end});
        if (st->policy->finished()) {
          ACTORPIPE_LOG(debug, "rank " + std::to_string(rank) + ": step " + std::to_string(st->step + 1) + " done, " +
                                   std::to_string(st->events.size()) + " actions, peak " + std::to_string(st->peak) +
                                   " live activations");
          self->send(ctx->supervisor, msg::flush{st->step, rank, std::move(st->events), st->peak, st->peak_pending});
          st->events.clear();
          return;
        }
        dispatch();
      },
  };
}

}  // namespace actorpipe
