// What every actor of one training run shares: options, placement, the chunk runners and
// optimizers (touched only on their rank's compute thread), and the actor handles. Built and
// wired by pipeline_runtime before the first message flows; read-only afterwards.
#pragma once

#include <caf/all.hpp>

#include <atomic>
#include <chrono>
#include <functional>
#include <string>
#include <memory>
#include <vector>

#include "core/checkpoint/checkpoint_store.hpp"
#include "core/model/chunk_compute.hpp"
#include "core/optim/optimizer.hpp"
#include "core/schedule/plan.hpp"
#include "core/schedule/policy_registry.hpp"
#include "core/train/run_setup.hpp"
#include "core/train/train_options.hpp"
#include "transport/transport.hpp"

namespace actorpipe {

// Ranks and virtual stages are numbered over the whole grid (core/topology.hpp): rank
// replica * P + pipeline rank, virtual stage id replica * S + virtual stage. A plan's actions
// name a pipeline's virtual stage (0..S-1); stage_id() puts it in a replica.
struct run_context {
  train_options options;
  placement place;  // one pipeline's
  rank_grid grid;   // P x D
  // P pipeline ranks, S = P * V virtual stages (not the options' `stages`, which is P), M
  // microbatches, per pipeline; D replicas.
  int ranks = 0, virtual_stages = 0, microbatches = 0, replicas = 1;
  std::shared_ptr<const plan> static_plan;      // null for a dynamic policy
  std::string policy;                           // the dynamic policy's name when static_plan is null
  // Plans rebuilt on measured costs apply from step replan_from (-1: none), rebuilt again after
  // every step up to replan_until on the costs of all the steps measured (0-based indices).
  int replan_from = -1, replan_until = -1;
  int first_step = 0;    // a resumed run starts here (the checkpoint's steps done)
  std::string resumed_manifest_digest;  // the checkpoint it resumes from, by what its manifest holds
  std::string process0_run_mark;        // a multi-process job's: process 0's job_place::run_mark
  bool eval_pending = false;  // its checkpoint's run stopped before the evaluation due there
  std::string eval_pending_change;  // ... and this run's eval data differ (pending_eval_change)
  std::vector<std::shared_ptr<chunk_compute>> runners;       // per virtual stage id
  std::vector<std::shared_ptr<shard_optimizer>> optimizers;  // per virtual stage id (D = 1)
  std::vector<std::shared_ptr<data_parallel_optimizer>> dp_optimizers;  // per virtual stage id (D > 1)
  std::vector<tie_group> ties;  // tie keys held by 2+ virtual stages
  batch_function batches;  // the model's data
  // Evaluation (a model with eval data): rounds of M microbatches per replica run as steps of
  // their own, numbered from eval_step_base, each rank's forwards in its plan's order
  // (eval_plan: the plan's F actions), nothing kept for a backward. Round r, replica d,
  // microbatch m evaluates eval microbatch r*M*D + d*M + m.
  static constexpr int eval_step_base = 1 << 30;
  static bool is_eval_step(int step) { return step >= eval_step_base; }
  // A step as messages name it: counted from 1, as the progress line counts; an evaluation
  // round's id as what it is.
  static std::string step_name(int step) {
    return is_eval_step(step) ? "an evaluation pass" : "step " + std::to_string(step + 1);
  }
  std::shared_ptr<const plan> eval_plan;
  batch_function eval_batches;
  int eval_microbatches = 0;
  int eval_rounds() const {
    const int per_round = microbatches * replicas;
    return (eval_microbatches + per_round - 1) / per_round;
  }
  std::shared_ptr<const model_definition> model;
  std::function<void(const eval_record&)> on_eval;  // progress, called from the supervisor
  double tokens_per_sample = 1;
  std::chrono::steady_clock::time_point epoch = std::chrono::steady_clock::now();

  // Processes of the job: which one hosts each rank, and which one this is. Handles of actors
  // in other processes are local proxies that forward over the control plane; compute actors
  // and runners exist only for local ranks. Tensors move through `data`.
  int process = 0, processes = 1;
  std::vector<int> process_of_rank;  // per rank of the grid
  std::string partition;             // the method that cut the layers, as resolved (run_setup::partition)
  std::shared_ptr<transport::tensor_transport> data;

  std::vector<caf::actor> compute;     // per rank (empty handle for a rank in another process)
  // Per rank: F and I jobs posted to its compute actor and not started yet. A W run out of turn
  // pauses for them (chunk actor). Counted by the chunk actors, read on the compute thread.
  std::shared_ptr<std::atomic<int>[]> queued_forward_or_input;
  // Per stage id: this step's B, I and W finished on its rank's compute thread (3 counters per
  // id, back to 0 once the step's backward work is done), and whether the action running now is
  // the step's last of them (a B, or the W of the last split one; never an I, a W follows it).
  // Only during that last action may a data-parallel bucket leave before the step's end
  // (optimizer_shard_actor): no action after it touches the gradients. A count of the first
  // step's contributions decided before, and a layer used more often in a later step (a
  // conditional layer, an expert) lost the rest of its gradient.
  std::shared_ptr<std::atomic<int>[]> backward_done;
  std::shared_ptr<std::atomic<bool>[]> in_last_backward;
  // Per rank: since when (run clock) its stage actor has been handling one message, or -1.
  // The actors share one scheduler thread: a policy that never returns stops them all, the
  // supervisor's step deadline too, so process 0's own thread watches these (pipeline_runtime).
  std::shared_ptr<std::atomic<double>[]> stage_busy_since;
  // Set by the teardown when it gave up on an actor stuck in an action: the run's context and
  // transport then stay alive (the actor may still return into them), and the caller's result
  // and callbacks are unhooked.
  bool abandoned = false;
  // Per local (virtual stage id, microbatch, F or B/I): 2 x the step in which it last started
  // on its compute thread (+ 1 once its output left), and when it started (run clock); per
  // (virtual stage id, F or B/I): how long the latest one took until its output left. Written
  // by the compute threads; read by a stage that would fill a wait, to tell how soon the input
  // it waits for comes (stage_actor.cpp).
  std::shared_ptr<std::atomic<int>[]> started_step;
  std::shared_ptr<std::atomic<double>[]> started_at, last_took;
  int action_slot(int id, int microbatch, bool back) const { return (id * microbatches + microbatch) * 2 + back; }
  int took_slot(int id, bool back) const { return id * 2 + back; }
  void track_producers() {  // nothing started yet
    const int slots = stage_ids() * microbatches * 2;
    const auto n = static_cast<std::size_t>(slots);
    started_step.reset(new std::atomic<int>[n]);
    for (int i = 0; i < slots; ++i) started_step[i].store(-1);
    started_at.reset(new std::atomic<double>[n]());
    last_took.reset(new std::atomic<double>[static_cast<std::size_t>(stage_ids()) * 2]());
  }
  std::vector<caf::actor> chunk_actors;  // per virtual stage id
  std::vector<caf::actor> stage;       // per rank
  std::vector<caf::actor> optimizer_shards;  // per virtual stage id
  std::vector<caf::actor> feeders;     // per process
  caf::actor feeder;                   // this process's
  caf::actor supervisor;

  std::function<void(const step_metrics&)> on_step;  // progress, called from the supervisor
  train_result* result = nullptr;  // written by the supervisor, read after the run ends
  // This process's checkpoint parts written on threads of their own (optimizer shards): the
  // runtime waits for them before the actor system goes, and removes what a checkpoint that
  // cannot complete left.
  std::shared_ptr<checkpoint_writes> checkpoint_parts = std::make_shared<checkpoint_writes>();

  double now() const { return std::chrono::duration<double>(std::chrono::steady_clock::now() - epoch).count(); }
  // The tied sync's slot of (tie group g, tensor j, sender stage) in a tensor frame's index.
  int tied_slot(int group, int tensor, int sender) const {
    int base = 0;
    for (int i = 0; i < group; ++i) base += max_tied_tensors;
    return (base + tensor) * virtual_stages + sender;
  }
  static constexpr int max_tied_tensors = 64;  // per tie key
  int world_ranks() const { return ranks * replicas; }
  int stage_ids() const { return virtual_stages * replicas; }
  int stage_id(int replica, int v) const { return replica * virtual_stages + v; }
  int replica_of_stage(int id) const { return id / virtual_stages; }
  int pipeline_stage(int id) const { return id % virtual_stages; }  // v in 0..S-1
  int rank_of_stage(int id) const {
    return grid.rank(replica_of_stage(id), place.rank_of[static_cast<std::size_t>(pipeline_stage(id))]);
  }
  int process_of_stage(int id) const { return process_of_rank[static_cast<std::size_t>(rank_of_stage(id))]; }
  bool is_local_rank(int r) const { return process_of_rank[static_cast<std::size_t>(r)] == process; }
  bool is_local_stage(int id) const { return process_of_stage(id) == process; }
  // "virtual stage 3", or "virtual stage 3 of replica 1" with data parallelism: for messages.
  std::string describe_stage(int id) const {
    return "virtual stage " + std::to_string(pipeline_stage(id)) +
           (replicas > 1 ? " of replica " + std::to_string(replica_of_stage(id)) : "");
  }
  // This process's actors but the supervisor (the others' are proxies).
  std::vector<caf::actor> local_actors() const {
    std::vector<caf::actor> all;
    for (std::size_t r = 0; r < static_cast<std::size_t>(world_ranks()); ++r)
      if (is_local_rank(static_cast<int>(r))) all.insert(all.end(), {compute[r], stage[r]});
    for (std::size_t id = 0; id < static_cast<std::size_t>(stage_ids()); ++id)
      if (is_local_stage(static_cast<int>(id))) all.insert(all.end(), {chunk_actors[id], optimizer_shards[id]});
    all.push_back(feeder);
    return all;
  }
  // Sends a tensor to the chunk (or optimizer shard) of virtual stage id `to` (any process)
  // through the transport.
  void send_tensor(tensor_kind kind, int step, int to, int microbatch, int from_rank, tensor_box t) const {
    send_tensor_to_process(process_of_stage(to), kind, step, to, microbatch, from_rank, std::move(t));
  }
  // A tensor the transport cannot send (its frame would break the limits: more dimensions or
  // bytes than a frame holds) fails the run with a message naming what it was; the sender's
  // actor goes on (it ended on CAF's "unhandled exception").
  void send_tensor_to_process(int process_index, tensor_kind kind, int step, int v, int microbatch, int from_rank,
                              tensor_box t) const;
  std::unique_ptr<rank_policy> make_policy(int rank) const;
};

caf::behavior compute_actor(caf::event_based_actor* self);
caf::behavior chunk_actor(caf::event_based_actor* self, std::shared_ptr<const run_context> ctx, int stage_id);
caf::behavior stage_actor(caf::event_based_actor* self, std::shared_ptr<const run_context> ctx, int rank);
caf::behavior optimizer_shard_actor(caf::event_based_actor* self, std::shared_ptr<const run_context> ctx, int stage_id);
caf::behavior feeder_actor(caf::event_based_actor* self, std::shared_ptr<const run_context> ctx);
caf::behavior supervisor_actor(caf::event_based_actor* self, std::shared_ptr<const run_context> ctx);

}  // namespace actorpipe
