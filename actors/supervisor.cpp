// Supervisor actor: runs the steps. Feed, wait for every rank's flush (with a deadline), sum
// the tied embedding gradients, take the global gradient norm (summed per virtual stage in
// order, so the number does not depend on the rank layout), clip, step the optimizers, report
// metrics. Any failure, timeout or dead actor stops the job with a message naming the culprit.
#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include "actors/messages.hpp"
#include "actors/run_context.hpp"
#include "core/schedule/schedule_registry.hpp"
#include "core/sim/simulator.hpp"

namespace actorpipe {
namespace {

struct supervisor_state {
  caf::actor reply_to;
  int step = 0;
  bool stopped = false;
  double started = 0;
  std::vector<double> losses;
  int losses_got = 0;
  std::vector<msg::flush> flushes;
  std::map<int, std::string> waiting;  // rank -> what it waits for
  std::map<int, double> sq_parts;      // virtual stage -> sum of squares
  int parts_got = 0, optimizers_done = 0, tied_done = 0;
  // --save-final across processes: parameters of the other processes' virtual stages.
  std::map<int, std::vector<std::string>> gathered_names;           // virtual stage -> names
  std::map<std::pair<int, int>, tensor_box> gathered;                // (virtual stage, index)
  int gather_expected = 0;                                           // remote virtual stages
  double grad_norm = 0, lr = 0;
  std::map<caf::actor_addr, std::string> names;
};

// The pipelined part of a step: from the first action's start to the last one's end.
struct step_span {
  double first = 1e300, end = 0, busy = 0;
};

step_span span_of(const std::vector<msg::flush>& flushes) {
  step_span s;
  for (auto& f : flushes)
    for (auto& e : f.events) {
      s.first = std::min(s.first, e.start);
      s.end = std::max(s.end, e.end);
      s.busy += e.end - e.start;
    }
  return s;
}

// What a finished step reports: loss (mean over microbatches, in microbatch order), lr, norm,
// time, throughput and the measured bubble.
step_metrics step_report(const run_context& ctx, const supervisor_state& st) {
  const int P = ctx.ranks, M = ctx.microbatches;
  step_metrics m;
  m.step = st.step;
  for (double l : st.losses) m.loss += l;
  m.loss /= M;
  m.lr = st.lr;
  m.grad_norm = st.grad_norm;
  m.seconds = ctx.now() - st.started;
  m.tokens_per_s = m.seconds > 0 ? double(M) * ctx.options.microbatch_size * ctx.tokens_per_sample / m.seconds : 0;
  const step_span s = span_of(st.flushes);
  m.bubble_ratio = s.end > s.first ? 1.0 - s.busy / (P * (s.end - s.first)) : 0;
  m.peak_activations.assign(P, 0);
  for (auto& f : st.flushes) m.peak_activations[f.rank] = f.peak_activations;
  return m;
}

// The step's measured timeline, shifted so its pipelined part starts at 0, as the simulator
// draws one.
sim_result measured_timeline(const run_context& ctx, const std::vector<msg::flush>& flushes) {
  const int P = ctx.ranks;
  const double first = span_of(flushes).first;
  sim_result t;
  t.schedule = ctx.options.schedule;
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
      t.events.push_back(e);
    }
  }
  std::stable_sort(t.events.begin(), t.events.end(),
                   [](const timeline_event& a, const timeline_event& b) { return a.rank < b.rank; });
  summarize_timeline(t);
  return t;
}

}  // namespace

caf::behavior supervisor_actor(caf::event_based_actor* self, std::shared_ptr<const run_context> ctx) {
  auto st = std::make_shared<supervisor_state>();
  const int P = ctx->ranks, M = ctx->microbatches;

  // The actors of this process (the other processes stop on their own when the runtime tells
  // them the run is over).
  auto all_actors = [ctx] { return ctx->local_actors(); };
  auto stop = [=](std::string error) {
    if (st->stopped) return;
    st->stopped = true;
    for (auto& a : all_actors()) self->send_exit(a, caf::exit_reason::user_shutdown);
    self->send(st->reply_to, msg::run_finished{std::move(error)});
    self->quit();
  };
  auto begin_step = [=](int k) {
    st->step = k;
    st->started = ctx->now();
    st->losses.assign(M, 0.0);
    st->losses_got = 0;
    st->flushes.clear();
    st->waiting.clear();
    st->sq_parts.clear();
    st->parts_got = st->optimizers_done = st->tied_done = 0;
    for (auto& f : ctx->feeders) self->send(f, msg::start_step{k});
    self->delayed_send(self, std::chrono::duration_cast<caf::timespan>(std::chrono::duration<double>(ctx->options.step_timeout_s)),
                       msg::step_deadline{k});
  };
  // After step `measured`: rebuild the plan on its per-(op, virtual stage) costs and send it to
  // every stage, for the steps from `measured + 1` on. The rebuilt plan is kept only if the
  // simulator, on those costs, finds it faster than the one that ran. False if the job stopped.
  auto replan = [=](int measured, double measured_bubble) {
    std::vector<timeline_event> events;
    for (auto& f : st->flushes) events.insert(events.end(), f.events.begin(), f.events.end());
    auto costs = std::make_shared<const cost_model>(mean_costs(events, ctx->virtual_stages));
    std::shared_ptr<const plan> use = ctx->static_plan;
    std::string report;
    try {
      auto rebuilt = std::make_shared<const plan>(
          make_schedule(ctx->options.schedule, schedule_request{P, M, ctx->place.chunks(), costs}));
      // Generators that do not order by cost (1f1b, interleaved, ...) give the same plan: no report.
      if (format_plan(*rebuilt) != format_plan(*ctx->static_plan)) {
        const sim_result before = simulate(*ctx->static_plan, *costs), after = simulate(*rebuilt, *costs);
        char line[320];
        if (after.makespan < before.makespan * (1 - 1e-9)) {
          use = rebuilt;
          std::snprintf(line, sizeof line,
                        "plan: %s rebuilt on the costs measured in step %d; simulated on them, bubble %.1f%% -> %.1f%% "
                        "(pipeline %.4f -> %.4f s); measured bubble %.1f%% in step %d",
                        ctx->options.schedule.c_str(), measured + 1, 100 * before.bubble_ratio,
                        100 * after.bubble_ratio, before.makespan, after.makespan, 100 * measured_bubble, measured + 1);
        } else {
          std::snprintf(line, sizeof line,
                        "plan: %s as generated is already the best for the costs measured in step %d (simulated "
                        "bubble %.1f%%)",
                        ctx->options.schedule.c_str(), measured + 1, 100 * before.bubble_ratio);
        }
        report = line;
      }
    } catch (const std::exception& e) {
      stop(std::string("rebuilding the plan on the measured costs failed: ") + e.what());
      return false;
    }
    const std::string text = format_plan(*use);
    for (auto& s : ctx->stage) self->send(s, msg::replan{measured + 1, text});
    if (ctx->result) {
      if (use != ctx->static_plan) ctx->result->replanned = use;
      ctx->result->replan_report = report;
    }
    return true;
  };
  // Virtual stages that hold a tie key with another.
  auto tie_holders = [=] {
    std::set<int> out;
    for (const auto& g : ctx->ties) out.insert(g.stages.begin(), g.stages.end());
    return out;
  };
  // After every flush and loss: tied-weight sync, then the norm.
  auto maybe_flushed = [=] {
    if (static_cast<int>(st->flushes.size()) < P || st->losses_got < M) return;
    const int k = st->step;
    const auto holders = tie_holders();
    if (holders.empty()) {
      for (auto& o : ctx->optimizer) self->send(o, msg::grad_norm_request{k});
      return;
    }
    // The holders swap gradients through the transport and each sums them in stage order.
    for (int v : holders) self->send(ctx->chunk_actors[v], msg::tied_sync{k});
  };
  // After the last step: every parameter on this process (--save-final in a multi-process job).
  auto finish = [=] {
    if (ctx->processes == 1 || !ctx->options.gather_parameters) {
      stop("");
      return;
    }
    st->gather_expected = 0;
    for (int v = 0; v < ctx->virtual_stages; ++v)
      if (!ctx->is_local_stage(v)) {
        self->send(ctx->chunk_actors[v], msg::gather_parameters{st->step});
        ++st->gather_expected;
      }
    if (st->gather_expected == 0) stop("");
  };
  auto maybe_gathered = [=] {
    if (static_cast<int>(st->gathered_names.size()) < st->gather_expected) return;
    size_t expected = 0;
    for (auto& [v, names] : st->gathered_names) expected += names.size();
    if (st->gathered.size() < expected) return;
    std::vector<std::pair<std::string, tensor_box>> all;
    for (int v = 0; v < ctx->virtual_stages; ++v) {
      std::vector<std::pair<std::string, tensor_box>> mine;
      if (ctx->is_local_stage(v)) {
        const auto copies = ctx->runners[v]->tied_copies();  // counted once, where owned
        for (auto& p : ctx->runners[v]->named_parameters())
          if (std::find(copies.begin(), copies.end(), p.first) == copies.end()) mine.push_back(p);
      } else {  // the chunk left its copies out
        auto& names = st->gathered_names[v];
        for (size_t i = 0; i < names.size(); ++i) mine.emplace_back(names[i], st->gathered[{v, int(i)}]);
      }
      for (auto& p : mine) all.push_back(std::move(p));
    }
    if (ctx->result) ctx->result->parameters = std::move(all);
    stop("");
  };

  self->set_down_handler([=](caf::down_msg& dm) {
    if (st->stopped) return;
    auto it = st->names.find(dm.source);
    std::string who = it != st->names.end() ? it->second : "an actor";
    stop(who + " stopped unexpectedly during step " + std::to_string(st->step) + ": " + self->system().render(dm.reason));
  });

  return {
      [=](msg::start_run& s) {
        st->reply_to = s.reply_to;
        auto watch = [&](const caf::actor& a, std::string name) {
          self->monitor(a);
          st->names[a.address()] = std::move(name);
        };
        for (int r = 0; r < P; ++r) {
          if (!ctx->is_local_rank(r)) continue;  // another process: its link reports its loss
          watch(ctx->compute[r], "compute actor of rank " + std::to_string(r));
          watch(ctx->stage[r], "stage actor of rank " + std::to_string(r));
          watch(ctx->optimizer[r], "optimizer actor of rank " + std::to_string(r));
        }
        for (int v = 0; v < ctx->virtual_stages; ++v)
          if (ctx->is_local_stage(v)) watch(ctx->chunk_actors[v], "chunk actor of virtual stage " + std::to_string(v));
        watch(ctx->feeder, "feeder");
        begin_step(0);
      },
      [=](msg::loss_report& l) {
        if (l.step != st->step) return;
        st->losses[l.microbatch] = l.loss;
        ++st->losses_got;
        maybe_flushed();
      },
      [=](msg::waiting& w) {
        if (w.step == st->step) st->waiting[w.rank] = w.what;
      },
      [=](msg::flush& f) {
        if (f.step != st->step) return;
        st->flushes.push_back(std::move(f));
        maybe_flushed();
      },
      [=](msg::tied_sync_done& t) {
        if (t.step != st->step || ++st->tied_done < static_cast<int>(tie_holders().size())) return;
        for (auto& o : ctx->optimizer) self->send(o, msg::grad_norm_request{t.step});
      },
      [=](msg::grad_sq_parts& g) {
        if (g.step != st->step) return;
        for (auto& [v, sq] : g.per_stage) st->sq_parts[v] = sq;
        if (++st->parts_got < P) return;
        double total = 0;
        for (auto& [v, sq] : st->sq_parts) total += sq;  // virtual stage order
        st->grad_norm = std::sqrt(total);
        if (!std::isfinite(st->grad_norm)) {
          stop("step " + std::to_string(st->step) + ": the gradient norm is " + std::to_string(st->grad_norm) +
               ": training diverged (try a lower --lr or --grad-clip)");
          return;
        }
        const auto& o = ctx->options;
        st->lr = lr_at(st->step, o.lr, o.warmup_steps, o.steps, o.min_lr_ratio);
        const double coef = clip_coefficient(st->grad_norm, o.grad_clip);
        for (auto& opt : ctx->optimizer) self->send(opt, msg::optimizer_step{st->step, coef, st->lr});
      },
      [=](msg::optimizer_done& d) {
        if (d.step != st->step || ++st->optimizers_done < P) return;
        const int k = st->step;
        const auto& o = ctx->options;
        const step_metrics m = step_report(*ctx, *st);
        if (ctx->result) {
          ctx->result->steps.push_back(m);
          if (k + 1 == o.steps) ctx->result->last_step = measured_timeline(*ctx, st->flushes);
        }
        if (ctx->on_step) ctx->on_step(m);
        if (k + 1 == ctx->replan_from && !replan(k, m.bubble_ratio)) return;
        if (k + 1 < o.steps)
          begin_step(k + 1);
        else
          finish();
      },
      [=](msg::step_deadline& d) {
        if (d.step != st->step || st->stopped) return;
        std::string detail;
        for (int r = 0; r < P; ++r) {
          bool flushed = std::any_of(st->flushes.begin(), st->flushes.end(), [r](auto& f) { return f.rank == r; });
          if (flushed) continue;
          auto it = st->waiting.find(r);
          detail += (detail.empty() ? "" : "; ") + std::string("rank ") + std::to_string(r) + " waits for " +
                    (it != st->waiting.end() ? it->second : "its first input");
        }
        if (detail.empty()) detail = "every rank flushed; the optimizer step did not finish";
        char secs[32];
        std::snprintf(secs, sizeof secs, "%g", ctx->options.step_timeout_s);
        stop("step " + std::to_string(d.step) + " did not finish within " + secs + " s (--step-timeout): " + detail);
      },
      [=](msg::failure& f) { stop(f.what); },
      [=](msg::parameter_names& n) {
        st->gathered_names[n.virtual_stage] = std::move(n.names);
        maybe_gathered();
      },
      [=](msg::parameter_arrived& p) {
        st->gathered[{p.virtual_stage, p.index}] = std::move(p.tensor);
        maybe_gathered();
      },
  };
}

}  // namespace actorpipe
