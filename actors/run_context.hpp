// What every actor of one training run shares: options, placement, the chunk runners and
// optimizers (touched only on their rank's compute thread), and the actor handles. Built and
// wired by pipeline_runtime before the first message flows; read-only afterwards.
#pragma once

#include <caf/all.hpp>

#include <chrono>
#include <functional>
#include <memory>
#include <vector>

#include "core/data/token_source.hpp"
#include "core/model/chunk_compute.hpp"
#include "core/optim/optimizer.hpp"
#include "core/schedule/plan.hpp"
#include "core/schedule/policy.hpp"
#include "core/train/train_options.hpp"

namespace actorpipe {

struct run_context {
  train_options options;
  placement place;
  int ranks = 0, stages = 0, microbatches = 0;  // P, S = P * V virtual stages, M
  std::shared_ptr<const plan> static_plan;      // null for a dynamic policy
  std::vector<std::shared_ptr<chunk_compute>> runners;       // per virtual stage
  std::vector<std::shared_ptr<shard_optimizer>> optimizers;  // per virtual stage
  std::shared_ptr<const token_source> source;
  std::chrono::steady_clock::time_point epoch = std::chrono::steady_clock::now();

  std::vector<caf::actor> compute;     // per rank: detached, the rank's own thread
  std::vector<caf::actor> chunks;      // per virtual stage
  std::vector<caf::actor> stage;       // per rank
  std::vector<caf::actor> optimizer;   // per rank
  caf::actor feeder;
  caf::actor supervisor;

  std::function<void(const step_metrics&)> on_step;  // progress, called from the supervisor
  train_result* result = nullptr;  // written by the supervisor, read after the run ends

  double now() const { return std::chrono::duration<double>(std::chrono::steady_clock::now() - epoch).count(); }
  bool ties_embedding_copy() const { return stages > 1; }  // first and last chunk hold separate copies
  std::unique_ptr<rank_policy> make_policy(int rank) const;
};

caf::behavior compute_actor(caf::event_based_actor* self);
caf::behavior chunk_actor(caf::event_based_actor* self, std::shared_ptr<const run_context> ctx, int virtual_stage);
caf::behavior stage_actor(caf::event_based_actor* self, std::shared_ptr<const run_context> ctx, int rank);
caf::behavior optimizer_actor(caf::event_based_actor* self, std::shared_ptr<const run_context> ctx, int rank);
caf::behavior feeder_actor(caf::event_based_actor* self, std::shared_ptr<const run_context> ctx);
caf::behavior supervisor_actor(caf::event_based_actor* self, std::shared_ptr<const run_context> ctx);

}  // namespace actorpipe
