// What a training run is asked to do and what it reports; shared by the actor runtime, the
// single-thread reference trainer and the CLI. No torch, no CAF.
#pragma once

#include <algorithm>

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/data/token_source.hpp"
#include "core/model/gpt_config.hpp"
#include "core/model/tensor_box.hpp"
#include "core/sim/simulator.hpp"

namespace actorpipe {

struct train_options {
  // Which model (a registered name, core/model/layer_model.hpp) and, for the built-in "gpt",
  // its shape.
  std::string model_name = "gpt";
  gpt_config model;
  // How layers are cut over stages * chunks virtual stages: uniform, parameters, type:REGEX,
  // profile or counts:A,B,... (core/partition.hpp); empty: the model's default.
  std::string partition;
  // Schedule: a registered plan generator, a plan file, or a registered dynamic policy (greedy, or
  // one user code registered: core/schedule/policy_registry.hpp).
  std::string schedule = "1f1b";
  std::string schedule_file;
  // The plan file's text where the caller has read it (the CLI reads --schedule-file once, so
  // that a pipe, `--schedule-file <(actorpipe simulate ... --format plan)`, works); unset:
  // run_setup reads schedule_file. Errors still name schedule_file.
  std::optional<std::string> schedule_text;
  int stages = 2;
  int chunks = 1;
  // Data parallel: dp replicas of the pipeline (stages x dp ranks, core/topology.hpp), each on
  // its own microbatches; their gradients are summed through the optimizer-shard actors in
  // buckets of bucket_mb MiB. zero_stage 1 splits each stage's AdamW state over the replicas
  // (ZeRO-1); 0 keeps it whole on each.
  int dp = 1;
  int zero_stage = 0;
  double bucket_mb = 4;
  int microbatches = 4;  // per replica: a step covers microbatches * microbatch_size * dp samples
  int microbatch_size = 4;
  int greedy_budget = 0;  // a dynamic policy's budget (greedy: live activations on a rank's first chunk); 0 = its default
  int steps = 10;
  double lr = 3e-4;
  int warmup_steps = 0;
  double min_lr_ratio = 0.1;  // the decay's floor, a fraction of lr (core/optim/optimizer.hpp: lr_at)
  std::string lr_decay_style = "linear";  // after the warm-up: linear, cosine or constant
  // The step the decay reaches lr x min_lr_ratio at, counted from 1 (0: steps); the lr stays
  // there after it. Past steps, the run ends mid-decay (the first part of a longer schedule).
  int lr_decay_steps = 0;
  double grad_clip = 1.0;
  double weight_decay = 0.1;
  // AdamW's moment decays and the denominator's epsilon (core/optim/optimizer.hpp).
  double adam_beta1 = 0.9;
  double adam_beta2 = 0.95;
  double adam_eps = 1e-8;
  std::string data = "synthetic";  // "synthetic" or "file"
  std::string data_file;           // .bin: uint16 tokens; anything else: UTF-8 text as bytes
  // A blend of files (Megatron-LM's --data-path W1 A W2 B ...; parse_data_files reads the
  // command line's values): with data "file", the files and their weights, and data_file the
  // values as given ("0.3 a.bin 0.7 b.bin"), for messages and checkpoints. Empty: data_file is
  // the one file. Read by models that say so (model_definition::reads_data_blend: the gpt).
  std::vector<data_file_part> data_blend;
  // The model flags the command line was given aloud (--layers, --set hidden=..., ...): those
  // the model does not follow (model_definition::flags_followed) get a note.
  std::vector<std::string> model_flags_given;
  std::uint64_t data_seed = 1234;
  int threads_per_stage = 1;
  bool activation_checkpointing = false;
  double step_timeout_s = 600;  // a step that takes longer stops the job naming the stuck ranks
  // Set to a signal's number (train's SIGINT / SIGTERM handler): the run stops after the step in
  // flight, a checkpoint of it first where save_dir is set. Null or 0: no such request.
  const std::atomic<int>* stop_signal = nullptr;
  // Called in every process of a multi-process job once the job has formed, before anything is
  // spawned, with process 0's job_place::run_mark: a check that needs every process there
  // (train: each sees process 0's --save-dir, its lock naming this run). What it throws ends the
  // job (std::invalid_argument: refused, exit 2).
  std::function<void(const std::string& process0_run_mark)> after_join;
  bool no_pipeline = false;     // the reference: unpartitioned, one thread, same microbatches
  // Rebuild a generated plan on the per-(op, virtual stage) costs measured in an early step
  // (zb-h1 and zbv order their W passes by cost; the others come out the same).
  bool plan_on_measured_costs = true;
  // A full backward B on a virtual stage with one before it runs as its input-gradient part,
  // sends that gradient on, then runs its weight part: the stage before starts its backward a
  // W earlier (1F1B's bubble shrinks from F + B to F + I). The same numbers; false runs B as
  // one block, the textbook schedule.
  bool early_input_grad = true;
  // A rank whose next listed action waits for an input runs the next weight gradient (W) of
  // its plan out of turn, when that W is ready (make_static_policy): zero-bubble's W passes
  // fill the gaps a noisy machine opens beyond the plan's. Only a wait whose input is not on
  // its way: where the action producing it runs in this process, not while it is about to
  // deliver (stage_actor.cpp). The same numbers; false runs every rank's list strictly in order.
  bool fill_weight_grads = true;
  // Such a W pauses between its weight products when an F or I reaches the rank's compute
  // thread meanwhile, and runs the rest right after it (once): a fill never holds up the
  // action the rank waited for by more than one product. The same numbers; false runs it whole.
  bool pause_filled_weight_grads = true;
  bool gather_parameters = true;  // multi-process: every final parameter to process 0 (--save-final)
  // How many of the job's ranks this process runs: set by prepare_run before it makes the model
  // (a model's size check counts what this process holds); 0: every rank.
  int ranks_in_process = 0;
  // Checkpoints (core/checkpoint): every save_every steps (and after the last) into save_dir,
  // keeping the newest keep_last (0: all); resume from a directory of them or one of them.
  std::string save_dir;
  int save_every = 0;
  int keep_last = 0;
  std::string resume;
  std::string init_from;  // start from these weights (safetensors, global names), fresh optimizer
  // Evaluation (models with eval data): a forward-only pass every eval_every steps (0: only
  // after the last step), over the eval set's first eval_microbatches microbatches (0: all of
  // it). The built-in gpt's eval set: text.eval_file (a held-out token file, read in
  // consecutive windows), or eval_split's tail of data_file; with synthetic data and no file,
  // a held-out stream of the same source, of eval_microbatches (0: microbatches)
  // microbatches, when either number is set.
  int eval_every = 0;
  int eval_microbatches = 0;
  // The built-in gpt on a data_file: the file's last eval_split of tokens (0 < eval_split < 1,
  // rounded down to whole tokens, or to the whole number a decimal share makes) are held out.
  // Training reads only the tokens before them, as it reads a file of just those, and the eval
  // set is the tail's consecutive windows, as text.eval_file's. 0: none.
  double eval_split = 0;
  // How many steps' metrics train_result::steps keeps: 0 every step (each holds per-rank
  // vectors, ~0.5 kB: 0.5 GB over a million steps); N the run's first and its last N (on_step
  // still sees every step). train keeps 1000.
  int keep_step_metrics = 0;
  // The built-in "bert" on GLUE-format TSV files: data_file is the training file.
  struct text_task {
    std::string eval_file;  // bert: the dev TSV; gpt: a held-out token file (as data_file)
    std::string vocab_file;  // a Hugging Face vocab.txt; empty: a word vocabulary from the training file
    bool lower_case = true;
    std::string columns;     // "A,LABEL" or "A,B,LABEL" (0-based); empty: chosen by the header
    int max_positions = 0;   // position embeddings (0: seq_len); 512 for bert-base weights
    int intermediate = 0;    // the MLP's inner width (0: 4 x hidden)
  } text;
};

// The ranks of the job that this process runs (train_options::ranks_in_process, else all:
// stages x dp, or 1 without a pipeline), and the stages each pipeline has.
inline int ranks_in_this_process(const train_options& o) {
  if (o.ranks_in_process > 0) return o.ranks_in_process;
  return o.no_pipeline ? 1 : o.stages * o.dp;
}
inline int pipeline_stages(const train_options& o) { return o.no_pipeline ? 1 : o.stages; }
// Of a model's `layers` blocks, how many one microbatch's activations for the backward span on a
// rank at the least: its share of the blocks (rounded down), or with activation checkpointing
// one virtual stage's (recomputed one at a time); at least one.
inline int blocks_kept_per_microbatch(const train_options& o, int layers) {
  const long long cut = static_cast<long long>(pipeline_stages(o)) *
                        (o.activation_checkpointing && !o.no_pipeline ? std::max(1, o.chunks) : 1);
  return static_cast<int>(std::max<long long>(1, layers / std::max<long long>(1, cut)));
}

// One evaluation pass: after `step` steps, the loss over every evaluated row, the model's
// metrics, and every output (float32, row-major) with its shape, concatenated in eval order,
// with the targets in the same order: a target of -100 marks a padding row (the last
// microbatch filled up), whose outputs count in no metric.
struct eval_record {
  int step = 0;
  double loss = 0;
  std::vector<std::pair<std::string, double>> metrics;
  std::vector<std::int64_t> output_shape;
  std::vector<float> outputs;
  std::vector<std::int64_t> targets;
  double seconds = 0;
};

struct step_metrics {
  int step = 0;
  double loss = 0;  // mean over the step's microbatches
  double lr = 0;
  double grad_norm = 0;  // before clipping
  double seconds = 0;
  double tokens_per_s = 0;
  double bubble_ratio = 0;  // measured: 1 - busy / (ranks * step time)
  // Data parallel: from the first gradient bucket sent to the last shard reduced, and the part
  // of it after the last rank's last action (what the pipeline did not hide).
  double sync_seconds = 0;
  double exposed_sync_seconds = 0;
  // Per virtual stage id: from its first bucket out to its shard reduced (D > 1).
  std::vector<double> stage_sync_seconds;
  std::vector<long long> optimizer_state_bytes;  // per rank: the AdamW moments it holds
  std::vector<int> peak_activations;  // per rank, measured in the chunk runners' stashes
  // Per rank: seconds its actions ran in the step (their measured spans, summed). Ranks doing
  // the same work that differ here ran on cores of different speed: a pipeline keeps the pace
  // of its slowest rank.
  std::vector<double> busy_seconds;
};

// One checkpoint this run wrote.
struct checkpoint_record {
  std::string path;
  int step = 0;
  long long bytes = 0;       // every part file (the manifest aside)
  double pause_seconds = 0;  // training held: for the previous save to be committed, then the snapshot
  double write_seconds = 0;  // from the snapshot's start to the commit (the parts are written in the background)
};

struct train_result {
  std::vector<step_metrics> steps;  // every step, or the first and the last keep_step_metrics
  std::vector<std::pair<std::string, tensor_box>> parameters;  // final, by global name, each once
  sim_result last_step;   // the measured timeline of the last step (seconds; replica 0's ranks)
  sim_result last_step_all_ranks;  // dp > 1: the same step on every rank of every replica (--trace)
  sim_result predicted;   // the simulator on the plan that ran, with per-stage costs averaged from last_step
  std::string data_description;
  std::string partition;  // the method that cut the layers
  std::string split;      // which layers each virtual stage holds, in words
  std::string grid;       // which ranks form a pipeline, which a data-parallel group
  std::vector<long long> optimizer_state_bytes;  // per rank: the AdamW moments it holds
  // The plan rebuilt on measured costs (null if none was), and what that did, in words.
  std::shared_ptr<const plan> replanned;
  std::string replan_report;
  std::vector<checkpoint_record> checkpoints;  // written by this run (process 0's view), in order
  std::string resumed_from;              // the checkpoint it resumed from, if any
  std::vector<std::string> refused;      // newer checkpoints it could not resume from, and why
  std::vector<eval_record> evals;        // in order
  // A checkpoint that could not be written (a full disk): the run stopped after the step in
  // flight with what it had trained (parameters, metrics, timeline), and this says why; the
  // command reports it as a failure once those are written.
  std::string checkpoint_error;
  // An evaluation pass that failed (the model's metrics threw, a target out of range, an eval
  // forward failed): the run stopped after the step it followed, with what it had trained (a
  // checkpoint of that step with save_dir, the parameters), and this says why; the command
  // reports it as a failure once those are written.
  std::string eval_error;
  int stopped_by_signal = 0;  // the signal that ended the run after steps.back().step + 1 steps (0: it ran them all); every process of a job has process 0's
};

// Adds a step's metrics to `steps`, keeping the first and the last `keep` (0: all).
inline void keep_step(std::vector<step_metrics>& steps, const step_metrics& m, int keep) {
  steps.push_back(m);
  if (keep > 0 && steps.size() > static_cast<size_t>(keep) + 1) steps.erase(steps.begin() + 1);
}

}  // namespace actorpipe
