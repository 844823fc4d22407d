// Turning train_options into the pieces of a run, shared by the actor runtime and the
// reference trainer: validated options, the model (by name), placement, plan (or none for a
// dynamic policy), partition, tie groups, chunks, optimizers and the data.
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "core/data/microbatch.hpp"
#include "core/held_names.hpp"
#include "core/model/chunk_compute.hpp"
#include "core/optim/data_parallel_optimizer.hpp"
#include "core/optim/optimizer.hpp"
#include "core/partition.hpp"
#include "core/schedule/plan.hpp"
#include "core/topology.hpp"
#include "core/train/train_options.hpp"

namespace actorpipe {

struct model_definition;

// A tie key held by two or more virtual stages: their tied gradients are summed at flush.
struct tie_group {
  std::string key;
  std::vector<int> stages;  // ascending
};

struct run_setup {
  placement place;  // one pipeline's
  rank_grid grid;   // P pipeline ranks x D replicas
  std::shared_ptr<const plan> static_plan;  // null for a dynamic policy
  std::string policy;                       // the dynamic policy's name (policy_registry) when static_plan is null
  std::shared_ptr<const model_definition> model;
  std::vector<std::string> layer_names;     // the model's, in order
  std::string partition;                    // the method that chose `layers`
  std::vector<layer_range> layers;          // per virtual stage
  std::vector<tie_group> ties;
  // By virtual stage id (replica * S + virtual stage); null for one in another process.
  std::vector<std::shared_ptr<chunk_compute>> runners;
  std::vector<std::shared_ptr<shard_optimizer>> optimizers;             // one replica (D = 1)
  std::vector<std::shared_ptr<data_parallel_optimizer>> dp_optimizers;  // D > 1
  batch_function data;
  batch_function eval_data;  // the model's eval data, when it has some
  int eval_microbatches = 0;
  std::string data_description;
  double tokens_per_sample = 1;  // throughput counts samples * this ("tokens/s")
  int greedy_budget = 0;  // as in train_options: the policy's budget, 0 = its default
};

// Makes the compute of one virtual stage in place of the model's layer_chunk (a benchmark's
// fixed-cost stand-in, a test's instrumented chunk).
using chunk_factory = std::function<std::shared_ptr<chunk_compute>(const chunk_spec&)>;

// Checks every option (std::invalid_argument naming the option and value) and builds the run.
// With no_pipeline: one chunk holding the whole model on one rank.
// build_rank: which ranks (of the whole grid) this process builds runners and optimizers for
// (default: all); the others' entries stay null (a rank in another process).
// The options' own rules (ranges, flags that go together), each broken one a
// std::invalid_argument naming the flag: prepare_run checks them first; a front end may
// check them before it makes anything (a --save-dir folder, its lock).
void check_train_options(const train_options& options);

run_setup prepare_run(const train_options& options, const chunk_factory& make_chunk = {},
                      const std::function<bool(int rank)>& build_rank = {});

// The names the runners save their tensors under (saved_tensors: tied copies left out), each with its
// replica and virtual stage (runners are replica-major, `stages` per replica) and `process`.
std::vector<held_name> held_names(const std::vector<std::shared_ptr<chunk_compute>>& runners, int stages, int process);

// Every parameter once, by global name, in virtual stage order (tied copies left out).
// Null runners (ranks in other processes) are skipped.
std::vector<std::pair<std::string, tensor_box>> collect_parameters(const std::vector<std::shared_ptr<chunk_compute>>& runners);

// The simulator's view of the measured step: the same plan (or policy) on per-(op, virtual
// stage) costs averaged from the measured timeline.
// `ran`: the plan that ran, where it is not setup.static_plan (rebuilt on measured costs).
sim_result predict_from_measured(const run_setup& setup, const sim_result& measured, const plan* ran = nullptr);

// The step from which a plan rebuilt on measured costs applies (the step before it is
// measured), or -1 where the plan stays as generated: a plan file, a dynamic policy, one step,
// or options.plan_on_measured_costs off.
int replan_step(const train_options& options);

// The job's ranks (stages x dp; 1 for --no-pipeline) over the processes of the job
// (assign_ranks_to_processes, its messages naming --stages and --dp).
std::vector<int> ranks_over_processes(const train_options& options, int processes, const std::vector<int>& per_process);

}  // namespace actorpipe
