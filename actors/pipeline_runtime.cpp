// Builds a run and drives it: one actor system, detached compute actors (one thread per rank),
// chunk / stage / optimizer actors, a feeder and a supervisor.
#include "actors/pipeline_runtime.hpp"

#include <set>
#include <stdexcept>

#include "actors/messages.hpp"
#include "actors/run_context.hpp"
#include "core/model/compute_threads.hpp"
#include "core/train/run_setup.hpp"

namespace actorpipe {

train_result run_pipeline(const train_options& o, const std::function<void(const step_metrics&)>& on_step,
                          const chunk_factory& make_chunk) {
  auto ctx = std::make_shared<run_context>();
  ctx->options = o;
  run_setup setup = prepare_run(o, make_chunk);
  ctx->place = setup.place;
  ctx->ranks = setup.place.ranks;
  ctx->stages = setup.place.num_virtual_stages();
  ctx->microbatches = o.microbatches;
  ctx->static_plan = setup.static_plan;
  ctx->runners = setup.runners;
  ctx->optimizers = setup.optimizers;
  ctx->source = setup.source;
  ctx->on_step = on_step;
  train_result result;
  result.data_description = ctx->source->describe();
  ctx->result = &result;

  std::string error;
  {
    caf::actor_system_config cfg;
    // The actors' own work is microseconds per message. CAF's default work-stealing workers
    // poll (one per core: ~6% of the CPU here, taken from the compute threads), and once they
    // back off they sleep 10 ms before looking again. The sharing scheduler blocks on a
    // condition variable and is woken by each message: no polling, no 10 ms stalls.
    cfg.set("scheduler.policy", caf::atom("sharing"));
    cfg.set("scheduler.max-threads", size_t{1});
    caf::actor_system sys{cfg};
    for (int r = 0; r < ctx->ranks; ++r) {
      ctx->compute.push_back(sys.spawn<caf::detached>(compute_actor));
      const int threads = o.threads_per_stage;
      caf::anon_send(ctx->compute.back(), msg::compute_job{[threads] { set_compute_threads(threads); }});
    }
    // Spawned before wiring finishes, but no message reaches them until start_run below, and
    // the context is complete by then (CAF's mailbox hands it over with a happens-before).
    std::shared_ptr<const run_context> shared = ctx;
    for (int v = 0; v < ctx->stages; ++v) ctx->chunks.push_back(sys.spawn(chunk_actor, shared, v));
    for (int r = 0; r < ctx->ranks; ++r) {
      ctx->stage.push_back(sys.spawn(stage_actor, shared, r));
      ctx->optimizer.push_back(sys.spawn(optimizer_actor, shared, r));
    }
    ctx->feeder = sys.spawn(feeder_actor, shared);
    ctx->supervisor = sys.spawn(supervisor_actor, shared);
    caf::scoped_actor self{sys};
    self->monitor(ctx->supervisor);  // should it ever die without answering, we still return
    self->send(ctx->supervisor, msg::start_run{self});
    self->receive([&](msg::run_finished& f) { error = std::move(f.error); },
                  [&](const caf::down_msg& d) {
                    error = "the supervisor stopped without finishing the run: " + sys.render(d.reason);
                    for (auto& a : ctx->compute) caf::anon_send_exit(a, caf::exit_reason::user_shutdown);
                    for (auto* group : {&ctx->chunks, &ctx->stage, &ctx->optimizer})
                      for (auto& a : *group) caf::anon_send_exit(a, caf::exit_reason::user_shutdown);
                    caf::anon_send_exit(ctx->feeder, caf::exit_reason::user_shutdown);
                  });
    // The context holds handles to the actors and the actors hold the context: wait until
    // every actor is down, then drop the handles, or a detached thread waits forever for its
    // actor's last reference and the actor system never shuts down.
    std::vector<caf::actor> all = ctx->compute;
    for (auto* group : {&ctx->chunks, &ctx->stage, &ctx->optimizer}) all.insert(all.end(), group->begin(), group->end());
    all.push_back(ctx->feeder);
    all.push_back(ctx->supervisor);
    std::set<caf::actor_addr> alive;
    for (auto& a : all) {
      alive.insert(a.address());
      self->monitor(a);
    }
    while (!alive.empty()) self->receive([&](const caf::down_msg& d) { alive.erase(d.source); });
    ctx->compute.clear(), ctx->chunks.clear(), ctx->stage.clear(), ctx->optimizer.clear();
    ctx->feeder = caf::actor{};
    ctx->supervisor = caf::actor{};
  }
  if (!error.empty()) throw std::runtime_error(error);
  result.parameters = collect_parameters(ctx->runners);
  result.predicted = predict_from_measured(setup, result.last_step);
  return result;
}

}  // namespace actorpipe
