// `actorpipe train` implementation (CLI parsing lives in cli.cpp).
#include "apps/train_command.hpp"

#include <algorithm>
#include <climits>
#include <exception>
#include <atomic>
#include <chrono>
#include <csignal>
#include <ctime>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <limits>
#include <ostream>
#include <random>
#include <set>
#include <sstream>
#include <optional>
#include <stdexcept>
#include <thread>
#include <tuple>
#include <utility>

#include <nlohmann/json.hpp>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "actors/pipeline_runtime.hpp"
#include "apps/file_roles.hpp"
#include "apps/write_signals.hpp"
#include "core/checkpoint/checkpoint_store.hpp"
#include "core/checkpoint/run_meta.hpp"
#include "core/json_shape.hpp"
#include "core/blas_kernels.hpp"
#include "core/config.hpp"
#include "core/text_file.hpp"
#include "core/folder_probe.hpp"
#include "core/job_token.hpp"
#include "core/launch_env.hpp"
#include "core/log.hpp"
#include "core/median.hpp"
#include "core/exact_number.hpp"
#include "core/number_text.hpp"
#include "core/optim/optimizer.hpp"
#include "core/process_layout.hpp"
#include "core/run_room.hpp"
#include "core/signal_name.hpp"
#include "core/model/attention_kernel.hpp"
#include "core/model/compute_threads.hpp"
#include "core/model/safetensors.hpp"
#include "core/partition.hpp"
#include "core/schedule/plan.hpp"
#include "core/schedule/plan_validator.hpp"
#include "core/schedule/policy_registry.hpp"
#include "core/schedule/schedule_registry.hpp"
#include "core/sim/chrome_trace.hpp"
#include "core/time_limits.hpp"
#include "core/train/evaluation.hpp"
#include "core/train/reference_trainer.hpp"
#include "core/train/run_state.hpp"

// Defined in apps/hangup_at_start.cpp, which only programs link (weak: absent in a shared library).
extern "C" int actorpipe_hangup_at_start __attribute__((weak));

namespace actorpipe {
namespace {

std::string si(double x) {
  if (x >= 1e6) return printf_text("%.2fM", x / 1e6);
  if (x >= 1e3) return printf_text("%.1fk", x / 1e3);
  return printf_text("%.0f", x);
}

// A path without the slashes that end it ("/" stays "/").
std::string without_trailing_slashes(std::string path) {
  while (path.size() > 1 && path.back() == '/') path.pop_back();
  return path;
}

// Whether --set gave `key` (key=value).
bool set_by_override(const train_cli_options& o, const std::string& key) { return overrides_give(o.overrides, key); }

// The embedded default job (`make run`): a small GPT on the synthetic corpus whose loss falls
// from ~5.5 towards the corpus's floor of 1.43 nats in about half a minute on 2 cores.
job_config default_job() {
  job_config c;
  c.pp = 2;
  c.layers = 4;
  c.hidden = 128;
  c.heads = 4;
  c.seq_len = 64;
  c.steps = 60;
  c.lr = 3e-3;
  c.warmup_steps = 5;
  return c;
}

// Job config from --config (or the default job), --set and the flags (flags last), resolved
// by the config rules.
job_config resolve_job(const train_cli_options& o, const std::optional<std::string>& plan_text) {
  // Counts and rates given as flags, checked by the flags' names (the config's rules name its
  // keys: "pp=0 must be >= 1" for --stages 0). In a config, 0 microbatches means "derive it
  // from the batch rules"; a flag given 0 would silently mean the default instead, so the
  // flags take counts from 1.
  for (const auto& [flag, value] : {std::pair<const char*, const std::optional<int>&>{"--microbatches", o.microbatches},
                                    {"--microbatch-size", o.microbatch_size},
                                    {"--batch-size", o.batch_size},
                                    {"--stages", o.stages},
                                    {"--chunks", o.chunks},
                                    {"--dp", o.dp},
                                    {"--steps", o.steps},
                                    {"--layers", o.layers},
                                    {"--hidden", o.hidden},
                                    {"--heads", o.heads},
                                    {"--seq-len", o.seq_len},
                                    {"--vocab", o.vocab}})
    // A vocabulary of one token has nothing to predict: refused at 2, not at 1 then at 2.
    if (const int least = std::string(flag) == "--vocab" ? 2 : 1; value && *value < least)
      throw std::invalid_argument(std::string(flag) + " must be >= " + std::to_string(least) + ": got " +
                                  std::to_string(*value));
  // Named as given (the job config's rules would name its keys: grad_clip=-1).
  for (const auto& [flag, value, rule] :
       {std::tuple<const char*, const std::optional<double>&, const char*>{
            "--lr", o.lr, "a number > 0 within a float's normal range, 1.18e-38 to 3.4e38"},
        {"--grad-clip", o.grad_clip, "a finite number >= 0 (0 = no clipping)"},
        {"--weight-decay", o.weight_decay, "a finite number >= 0"}})
    if (value && (!std::isfinite(*value) || *value < 0 ||
                  (std::string(flag) == "--lr" &&
                   (*value < std::numeric_limits<float>::min() || *value > std::numeric_limits<float>::max()))))
      throw std::invalid_argument(std::string(flag) + " must be " + rule + ": got " + exact_number_text(*value));
  for (const auto& [flag, value] : {std::pair<const char*, const std::optional<double>&>{"--min-lr-ratio", o.min_lr_ratio},
                                    {"--adam-beta1", o.adam_beta1},
                                    {"--adam-beta2", o.adam_beta2},
                                    {"--adam-eps", o.adam_eps}})
    if (value)
      if (const std::string why = optimizer_setting_error(flag, *value); !why.empty()) throw std::invalid_argument(why);
  if (o.zero && *o.zero != 0 && *o.zero != 1)
    throw std::invalid_argument("--zero must be 0 or 1: got " + std::to_string(*o.zero) +
                                " (ZeRO-2/3, which also shard gradients and parameters, are not implemented)");
  // Whether flags changed the job a config file gives (for its rules' errors): a job key's flag
  // or --set, or --no-pipeline or --schedule-file, which set the stages, chunks and microbatches.
  const bool job_flags_given = refuse_flag_and_override(
      o.overrides,
      {{"--schedule", "schedule", o.schedule.has_value()}, {"--model", "model", o.model.has_value()},
       {"--partition", "partition", o.partition.has_value()}, {"--stages", "pp", o.stages.has_value()},
       {"--dp", "dp", o.dp.has_value()}, {"--zero", "zero_stage", o.zero.has_value()},
       {"--chunks", "chunks", o.chunks.has_value()}, {"--microbatches", "num_microbatches", o.microbatches.has_value()},
       {"--microbatch-size", "microbatch_size", o.microbatch_size.has_value()},
       {"--batch-size", "batch_size", o.batch_size.has_value()}, {"--steps", "steps", o.steps.has_value()},
       {"--layers", "layers", o.layers.has_value()}, {"--hidden", "hidden", o.hidden.has_value()},
       {"--heads", "heads", o.heads.has_value()}, {"--seq-len", "seq_len", o.seq_len.has_value()},
       {"--vocab", "vocab", o.vocab.has_value()}, {"--warmup-steps", "warmup_steps", o.warmup_steps.has_value()},
       {"--seed", "seed", o.seed.has_value()}, {"--lr", "lr", o.lr.has_value()},
       {"--grad-clip", "grad_clip", o.grad_clip.has_value()}, {"--weight-decay", "weight_decay", o.weight_decay.has_value()},
       {"--min-lr-ratio", "min_lr_ratio", o.min_lr_ratio.has_value()},
       {"--adam-beta1", "adam_beta1", o.adam_beta1.has_value()}, {"--adam-beta2", "adam_beta2", o.adam_beta2.has_value()},
       {"--adam-eps", "adam_eps", o.adam_eps.has_value()},
       {"--lr-decay-style", "lr_decay_style", o.lr_decay_style.has_value()},
       {"--lr-decay-steps", "lr_decay_steps", o.lr_decay_steps.has_value()}});
  const bool flags_over_config = job_flags_given || o.no_pipeline || !o.schedule_file.empty();
  std::set<std::string> config_keys;  // what the config file sets (read once: it may be a pipe)
  job_config c = o.config_path.empty() ? default_job() : load_config_file(o.config_path, &config_keys);
  apply_overrides(c, o.overrides);
  auto set = [&](const char* key, const auto& value) {
    if (value) apply_override(c, key, std::to_string(*value));
  };
  if (o.schedule) apply_override(c, "schedule", *o.schedule);
  if (o.model) c.model = *o.model;
  if (o.partition) c.partition = *o.partition;
  set("pp", o.stages);
  set("dp", o.dp);
  set("zero_stage", o.zero);
  set("chunks", o.chunks);
  // Without a config file or a chunk count, the schedule's own (2 for interleaved, zbv and
  // dualpipev), as simulate does.
  const auto set_by_user = [&o](const char* key) { return set_by_override(o, key); };
  const bool chunks_given = o.chunks || set_by_user("chunks");
  if (o.config_path.empty() && !chunks_given) c.chunks = default_chunks(c.schedule);
  // A plan file gives its stages, chunks and microbatches where neither a flag nor a config
  // does (where one does, it must match the file: run_setup); --no-pipeline takes its
  // microbatches, to be the reference of the plan's run.
  bool microbatches_from_file = false;
  std::optional<plan> file_plan;
  if (!o.schedule_file.empty()) file_plan = parse_plan(*plan_text, o.schedule_file);
  if (file_plan && !o.no_pipeline) {
    const plan& p = *file_plan;
    if (o.config_path.empty() && !o.stages && !set_by_user("pp")) c.pp = p.num_ranks();
    if (o.config_path.empty() && !chunks_given) c.chunks = p.chunks();
    // Before the rules on them (layers over stages x chunks, a config's included) blame
    // something else.
    const bool config = !o.config_path.empty();
    require_plan_file_count(o.schedule_file, config ? "stages (--stages, or pp in a config)" : "stages (--stages)", c.pp,
                            p.num_ranks());
    require_plan_file_count(o.schedule_file, config ? "chunks (--chunks, or chunks in a config)" : "chunks (--chunks)",
                            c.chunks, p.chunks());
  }
  if (file_plan && o.config_path.empty()) {
    const plan& p = *file_plan;
    // A batch size alone is cut into the plan's microbatches; with a microbatch size, it
    // gives their count itself (which must then match the plan's).
    const bool batch_given = o.batch_size || set_by_user("batch_size") || set_by_user("global_batch_size");
    const bool size_given = o.microbatch_size || set_by_user("microbatch_size");
    if (!o.microbatches && !set_by_user("num_microbatches") && !(batch_given && size_given)) {
      c.num_microbatches = p.microbatches;
      microbatches_from_file = true;
    }
  }
  set("num_microbatches", o.microbatches);
  set("microbatch_size", o.microbatch_size);
  set("batch_size", o.batch_size);
  // The three apart, one of them typed (a flag or --set; all three flags too): which was meant
  // cannot be told; refused, as simulate refuses it.
  {
    std::map<std::string, std::string> typed_flags;
    if (o.batch_size) typed_flags["batch_size"] = "--batch-size";
    if (o.microbatches) typed_flags["num_microbatches"] = "--microbatches";
    if (o.microbatch_size) typed_flags["microbatch_size"] = "--microbatch-size";
    require_typed_batch_keys_agree(c, o.overrides, typed_flags);
  }
  set("steps", o.steps);
  set("layers", o.layers);
  set("hidden", o.hidden);
  set("heads", o.heads);
  set("seq_len", o.seq_len);
  set("vocab", o.vocab);
  set("warmup_steps", o.warmup_steps);
  set("lr_decay_steps", o.lr_decay_steps);
  set("seed", o.seed);
  if (o.lr) apply_override(c, "lr", printf_text("%.17g", *o.lr));
  // BERT does not learn at the GPT's 3e-3 (its loss stays at chance): its own default.
  // A config file that does not set lr leaves it to the model's default too.
  if (c.model == "bert" && !o.lr && !set_by_user("lr") && !config_keys.count("lr")) c.lr = 2e-4;
  if (o.grad_clip) apply_override(c, "grad_clip", printf_text("%.17g", *o.grad_clip));
  if (o.weight_decay) apply_override(c, "weight_decay", printf_text("%.17g", *o.weight_decay));
  for (const auto& [key, value] : {std::pair<const char*, const std::optional<double>&>{"min_lr_ratio", o.min_lr_ratio},
                                   {"adam_beta1", o.adam_beta1},
                                   {"adam_beta2", o.adam_beta2},
                                   {"adam_eps", o.adam_eps}})
    if (value) apply_override(c, key, printf_text("%.17g", *value));
  if (o.lr_decay_style) c.lr_decay_style = lr_decay_name(parse_lr_decay(*o.lr_decay_style));
  // Without a batch size, 8 microbatches of 4 sequences unless one of them was given. A batch
  // size alone is cut into 8 microbatches, or the largest of 4, 2, 1 that divides it: the same
  // for a pipeline and for its reference (--no-pipeline), which took it as one microbatch.
  if (c.batch_size == 0 && c.global_batch_size == 0) {
    if (c.num_microbatches == 0) c.num_microbatches = 8;
    if (c.microbatch_size == 0) c.microbatch_size = 4;
  }
  bool batch_cut = false;  // a batch size alone, cut into microbatches here
  std::string cut_from;    // ... from which one
  if (c.batch_size > 0 && (o.batch_size || set_by_user("batch_size")) && c.num_microbatches == 0 &&
      c.microbatch_size == 0) {
    c.num_microbatches = microbatches_of_batch(c.batch_size);
    batch_cut = true;
    cut_from = "--batch-size " + std::to_string(c.batch_size);
  }
  // A global batch alone, the same per replica (one that dp does not divide is the config's
  // error to name).
  if (c.batch_size == 0 && c.global_batch_size > 0 && set_by_user("global_batch_size") && c.num_microbatches == 0 &&
      c.microbatch_size == 0 && c.dp >= 1 && c.global_batch_size % c.dp == 0) {
    c.num_microbatches = microbatches_of_batch(c.global_batch_size / c.dp);
    batch_cut = true;
    cut_from = "global_batch_size " + std::to_string(c.global_batch_size) + " (" +
               std::to_string(c.global_batch_size / c.dp) + " per replica)";
  }
  // Flags this run has no use for are named, not silently dropped.
  std::vector<std::string> unused;
  if (o.budget != 0 && (o.no_pipeline || !o.schedule_file.empty() || !is_dynamic_policy(c.schedule)))
    unused.push_back("--budget " + std::to_string(o.budget) + " is for a dynamic policy (--schedule greedy): " +
                     (o.no_pipeline ? std::string("--no-pipeline") : o.schedule_file.empty() ? c.schedule : o.schedule_file) +
                     " has no budget, and runs without it");
  if (o.no_pipeline) {
    std::string dropped;
    for (const auto& [flag, given] : {std::pair<const char*, bool>{"--stages", o.stages.has_value()},
                                      {"--chunks", o.chunks.has_value()},
                                      {"--schedule", o.schedule.has_value()},
                                      {"--schedule-file", !o.schedule_file.empty()},
                                      {"--partition", o.partition.has_value()},
                                      {"--set pp", set_by_user("pp")},
                                      {"--set chunks", set_by_user("chunks")},
                                      {"--set schedule", set_by_user("schedule")},
                                      {"--set partition", set_by_user("partition")},
                                      {"--unit-cost-plan", o.unit_cost_plan},
                                      {"--late-input-grad", o.late_input_grad},
                                      {"--no-w-fill", o.no_w_fill}})
      if (given) dropped += std::string(dropped.empty() ? "" : ", ") + flag;
    if (!dropped.empty())
      unused.push_back("--no-pipeline trains the whole model as one rank: " + dropped + " do" +
                       (dropped.find(',') == std::string::npos ? "es" : "") + " not apply" +
                       (microbatches_from_file ? " (but the plan's " + std::to_string(c.num_microbatches) +
                                                     (c.num_microbatches == 1 ? " microbatch does)" : " microbatches do)")
                                               : ""));
  }
  for (const auto& [flag, key, given, what] :
       {std::tuple<const char*, const char*, bool, const char*>{"--min-lr-ratio", "min_lr_ratio", o.min_lr_ratio.has_value(),
                                                                "where a decay ends"},
        {"--lr-decay-steps", "lr_decay_steps", o.lr_decay_steps.has_value(), "when a decay ends"}})
    if (c.lr_decay_style == "constant" && (given || set_by_user(key) || config_keys.count(key)))
      unused.push_back(std::string(given ? flag : key) + " is " + what + ", and " +
                       (o.lr_decay_style ? "--lr-decay-style constant" : "lr_decay_style=constant") +
                       " has none: it does not apply");
  // Past the warm-up, by the flags' names where the decay's end is a flag (the config's rule
  // names the keys).
  if (o.lr_decay_steps)
    if (const std::string why = lr_decay_steps_error(c.lr_decay_steps, c.warmup_steps); !why.empty())
      throw std::invalid_argument(why);
  if (o.no_pipeline) {
    // The reference runs the whole model on one thread: the pipeline's shape (stages, chunks,
    // schedule) does not apply, so its rules must not refuse, e.g., one microbatch.
    c.pp = 1;
    c.chunks = 1;
    c.schedule = "gpipe";
  }
  try {
    resolve_and_validate(c, !o.schedule_file.empty() && !o.no_pipeline);
  } catch (const std::invalid_argument& e) {
    std::string why = e.what();
    // The hint where the count it chose is what the rule refuses (not "steps=0", say).
    if (batch_cut && why.find("microbatch") != std::string::npos)
      why += " (" + cut_from + " alone is cut into " + std::to_string(c.num_microbatches) +
             (c.num_microbatches == 1 ? " microbatch" : " microbatches") +
             ", the largest of 8, 4, 2, 1 that divides it: give --microbatches)";
    throw std::invalid_argument(with_config_file(why, o.config_path, flags_over_config));
  }
  // The plan file's microbatches and its validity, before the run's header is printed (a
  // refused plan printed the header of a run that never began).
  if (file_plan && !o.no_pipeline) {
    require_plan_file_count(o.schedule_file, "microbatches (--microbatches, or --batch-size over --microbatch-size)",
                            c.num_microbatches, file_plan->microbatches);
    require_valid(*file_plan);
  }
  if (c.tp != 1)
    throw std::invalid_argument(with_config_file(
        "tp=" + std::to_string(c.tp) + ": this build has no tensor parallelism (tp = 1)", o.config_path, flags_over_config));
  if (c.precision != "fp32")
    throw std::invalid_argument(
        with_config_file("precision=" + c.precision + " is not supported yet: use fp32", o.config_path, flags_over_config));
  if (o.no_pipeline && (o.zero || set_by_user("zero_stage") || o.bucket_mb)) {
    const bool zero = o.zero || set_by_user("zero_stage");
    unused.push_back(std::string(zero ? "--zero" : "") + (zero && o.bucket_mb ? ", " : "") +
                     (o.bucket_mb ? "--bucket-mb" : "") + (zero && o.bucket_mb ? " are" : " is") +
                     " for data parallelism (--dp), and --no-pipeline trains one replica: " +
                     (zero && o.bucket_mb ? "they do" : "it does") + " not apply");
  } else if (o.bucket_mb && c.dp == 1)
    unused.push_back("--bucket-mb sizes the data-parallel gradient buckets, and --dp 1 has none to sync: it does not "
                     "apply");
  if (c.zero_stage > 0 && c.dp == 1 && !o.no_pipeline)
    unused.push_back("zero_stage=" + std::to_string(c.zero_stage) +
                     " splits the optimizer state over data-parallel replicas, and --dp 1 has one: each rank keeps all "
                     "of its own");
  if (c.model == "bert" && (o.vocab || set_by_user("vocab")))
    unused.push_back("--vocab is the GPT's: --model bert takes its vocabulary from --vocab-file (or builds one from the "
                     "training file)");
  for (auto& n : unused) c.notes.push_back(std::move(n));
  return c;
}

train_options to_train_options(const job_config& c, const train_cli_options& o) {
  train_options t;
  t.model.vocab = c.vocab;
  t.model.seq_len = c.seq_len;
  t.model.hidden = c.hidden;
  t.model.heads = c.heads;
  t.model.layers = c.layers;
  t.model.seed = c.seed;
  t.data_seed = c.seed;
  t.schedule = c.schedule;
  t.schedule_file = o.schedule_file;
  t.model_name = c.model;
  t.partition = o.no_pipeline ? std::string() : c.partition;  // the reference is not cut (its note says so)
  t.stages = c.pp;
  t.dp = c.dp;
  // A config's or --set's ZeRO-2/3 (the config takes them, as DeepSpeed's does): named by its
  // key, as given (the runtime's check named --zero, never typed).
  if (!o.zero && (c.zero_stage == 2 || c.zero_stage == 3))
    throw std::invalid_argument("zero_stage=" + std::to_string(c.zero_stage) +
                                " is not implemented: give 0 or 1 (ZeRO-2/3, which also shard gradients and parameters, "
                                "are not implemented)");
  t.zero_stage = c.zero_stage;
  if (o.bucket_mb) t.bucket_mb = *o.bucket_mb;
  t.chunks = c.chunks;
  t.microbatches = c.num_microbatches;
  t.microbatch_size = c.microbatch_size;
  t.steps = c.steps;
  t.lr = c.lr;
  t.warmup_steps = c.warmup_steps;
  t.grad_clip = c.grad_clip;
  t.weight_decay = c.weight_decay;
  t.min_lr_ratio = c.min_lr_ratio;
  t.lr_decay_style = c.lr_decay_style;
  t.lr_decay_steps = c.lr_decay_steps;
  t.adam_beta1 = c.adam_beta1;
  t.adam_beta2 = c.adam_beta2;
  t.adam_eps = c.adam_eps;
  t.greedy_budget = o.budget;
  t.threads_per_stage = o.threads_per_stage;
  t.activation_checkpointing = o.activation_checkpointing;
  t.step_timeout_s = o.step_timeout_s;
  t.no_pipeline = o.no_pipeline;
  t.plan_on_measured_costs = !o.unit_cost_plan;
  // The summary's lines cover the first step and the last 1000 (every step's per-rank
  // metrics kept process 0 growing by ~0.5 kB a step, without bound).
  t.keep_step_metrics = 1000;
  t.early_input_grad = !o.late_input_grad;
  t.fill_weight_grads = !o.no_w_fill;
  // "ckpt/" is "ckpt": its checkpoints are named ckpt/step-N, not ckpt//step-N.
  t.save_dir = without_trailing_slashes(o.save_dir);
  t.save_every = o.save_every;
  t.keep_last = o.keep_last;
  t.resume = without_trailing_slashes(o.resume);
  t.init_from = without_trailing_slashes(o.init_from);
  // A model of yours that reads --eval-file or --eval-split says so (model_definition::flags_followed).
  if (t.model_name == "bert" && o.eval_split != 0)  // bert's dev set is a file
    throw std::invalid_argument("--eval-split is for --model gpt, not --model bert (give bert its dev TSV: --eval-file)");
  if (t.model_name != "bert") {  // the text flags are bert's: elsewhere they would do nothing
    const std::pair<const char*, bool> bert_only[] = {
        {"--vocab-file", !o.vocab_file.empty()},
        {"--text-columns", !o.text_columns.empty()}, {"--no-lower-case", o.no_lower_case},
        {"--max-positions", o.max_positions != 0},  {"--intermediate", o.intermediate != 0}};
    for (const auto& [flag, given] : bert_only)
      if (given) throw std::invalid_argument(std::string(flag) + " is for --model bert, not --model " + t.model_name);
  }
  // The model flags given aloud (a config file gives every value: not counted), for the note
  // of those the model does not follow; --vocab to bert has its own note (resolve_job).
  for (const auto& [flag, key, given] : {std::tuple<const char*, const char*, bool>{"--layers", "layers", o.layers.has_value()},
                                         {"--hidden", "hidden", o.hidden.has_value()},
                                         {"--heads", "heads", o.heads.has_value()},
                                         {"--seq-len", "seq_len", o.seq_len.has_value()},
                                         {"--vocab", "vocab", o.vocab.has_value() && t.model_name != "bert"}})
    if (given || (set_by_override(o, key) && !(t.model_name == "bert" && std::string(key) == "vocab")))
      t.model_flags_given.push_back(flag);
  t.eval_every = o.eval_every;
  t.eval_microbatches = o.eval_microbatches;
  t.eval_split = o.eval_split;
  t.text.eval_file = o.eval_file;
  t.text.vocab_file = o.vocab_file;
  t.text.lower_case = !o.no_lower_case;
  t.text.columns = o.text_columns;
  t.text.max_positions = o.max_positions;
  t.text.intermediate = o.intermediate;
  if (!o.data_file.empty()) {
    t.data = "file";
    const std::vector<data_file_part> parts = parse_data_files(o.data_file);
    if (parts.size() == 1) {  // "0.5 a.bin" is a.bin
      t.data_file = parts.front().path;
    } else {
      for (const std::string& v : o.data_file) t.data_file += (t.data_file.empty() ? "" : " ") + v;
      t.data_blend = parts;
    }
  }
  return t;
}

long long count_elements(const std::vector<std::pair<std::string, tensor_box>>& params) {
  long long n = 0;
  for (auto& [name, t] : params) {
    long long k = 1;
    for (auto d : t.shape()) k *= d;
    n += k;
  }
  return n;
}

// This process's place in the job, from the launcher's variables and the multi-process flags;
// in a multi-process job also the process of each rank, and the log prefix of this process.
job_place place_in_job(const train_cli_options& o, const train_options& t, const launch_env& env,
                       std::vector<int>& layout) {
  job_place place = env;
  place.join_timeout_s = o.join_timeout_s;
  if (!(o.join_timeout_s > 0 && o.join_timeout_s <= max_timeout_s))
    throw std::invalid_argument("--join-timeout=" + printf_text("%g", o.join_timeout_s) + " must be > 0 and at most " +
                                printf_text("%g", max_timeout_s) + " seconds");
  place.heartbeat_timeout_s = o.heartbeat_timeout_s;
  // One rule, one message. Heartbeats go every second (a quarter of the timeout below 4 s): a
  // loaded machine misses ticks of a few milliseconds, and under 1 s a healthy job was stopped
  // as "lost".
  if (!(o.heartbeat_timeout_s == 0 || (o.heartbeat_timeout_s >= 1 && o.heartbeat_timeout_s <= max_timeout_s)))
    throw std::invalid_argument("--heartbeat-timeout=" + printf_text("%g", o.heartbeat_timeout_s) +
                                " must be 0 (never) or from 1 to " + printf_text("%g", max_timeout_s) + " seconds");
  if (!o.ranks_per_process.empty()) place.ranks_per_process = parse_ranks_per_process(o.ranks_per_process);
  if (place.processes > 1) {
    set_log_prefix(process_prefix(place.process));  // its ranks follow once they are assigned
    // Named as the launcher set it (SLURM_NTASKS, OMPI_COMM_WORLD_SIZE), not always WORLD_SIZE.
    const std::string size_is = env.size_variable + "=" + std::to_string(place.processes);
    if (o.no_pipeline) throw std::invalid_argument("--no-pipeline runs in one process, but " + size_is);
    const char* token = std::getenv(job_token_variable);
    if (!token || !*token)
      throw std::invalid_argument(size_is +
                                  " but ACTORPIPE_JOB_TOKEN is not set: start the job with actorpipe launch (which makes one), "
                                  "or export the same token to every process");
    check_job_token(token);
    place.token = token;
    try {
      layout = ranks_over_processes(t, place.processes, place.ranks_per_process);  // errors before training
    } catch (const std::invalid_argument& e) {
      std::string why = e.what();
      for (std::size_t at; env.size_variable != "WORLD_SIZE" && (at = why.find("WORLD_SIZE")) != std::string::npos;)
        why.replace(at, 10, env.size_variable);
      throw std::invalid_argument(why);
    }
    std::vector<int> own_ranks;
    for (int r = 0; r < static_cast<int>(layout.size()); ++r)
      if (layout[r] == place.process) own_ranks.push_back(r);
    set_log_prefix(process_prefix(place.process, own_ranks));
  } else if (!o.ranks_per_process.empty()) {
    throw std::invalid_argument("--ranks-per-process=" + o.ranks_per_process + " needs a multi-process job (WORLD_SIZE > 1)");
  }
  return place;
}

// A restart by actorpipe launch --max-restarts (ACTORPIPE_RESTART_COUNT > 0) resumes from the
// newest valid checkpoint in --save-dir that leaves steps to train (one of the last step
// would leave nothing: the one before it is taken, and the last interval runs again). With
// none but one of the last step (the job was stopped after its final save), the training is
// done: returns that checkpoint, and nothing trains again. With none at all, the run starts as
// it was configured, and says so.
std::optional<resume_choice> resume_after_restart(train_options& t, int restart) {
  if (restart == 0) return std::nullopt;
  const std::string what = "restart " + std::to_string(restart) + " of the job: ";
  const std::string as_configured = t.resume.empty() ? (t.init_from.empty() ? "from step 0" : "from --init-from " + t.init_from)
                                                     : "from --resume " + t.resume;
  if (t.save_dir.empty()) {
    log_warn(what + "there is no --save-dir, so nothing was saved; training starts again " + as_configured);
    return std::nullopt;
  }
  std::error_code ec;
  if (!std::filesystem::is_directory(t.save_dir, ec)) {
    log_warn(what + "no checkpoint in --save-dir " + t.save_dir + " yet; training starts again " + as_configured);
    return std::nullopt;
  }
  // The newest checkpoint holding the last step: the training was done (the search below
  // skips it, as it leaves no step to train, and took the one before: a save interval again).
  if (std::optional<resume_choice> last = finished_checkpoint(t.save_dir, t.steps)) {
    for (const auto& why : last->refused) log_warn("not resuming from a damaged checkpoint: " + why);
    log_info(what + last->path + " holds the last step (--steps " + std::to_string(t.steps) +
             "): the training was done before the job stopped, and runs no more");
    return last;
  }
  try {
    const resume_choice c = find_resume_checkpoint(t.save_dir, t.steps);
    for (const auto& why : c.refused) log_warn("not resuming from a damaged checkpoint: " + why);
    t.resume = c.path;
    t.init_from.clear();  // the checkpoint holds the weights
    log_info(what + "resuming from " + c.path + " (step " + std::to_string(c.manifest.step) + ")");
    return std::nullopt;
  } catch (const checkpoint_error& e) {
    // The search speaks of --resume; here it looked in --save-dir.
    std::string why = e.what();
    const std::string searched = "--resume '" + t.save_dir + "'";
    if (why.rfind(searched, 0) == 0) why = "--save-dir '" + t.save_dir + "'" + why.substr(searched.size());
    log_warn(what + "no checkpoint to resume from (" + why + "); training starts again " + as_configured);
    return std::nullopt;
  }
}

// A restarted job whose training was done: what it still owes (--save-final, from the
// checkpoint of the last step: the same parameters, by the same names), and what it cannot
// give (the last step's timeline).
void finish_from_checkpoint(std::ostream& out, const train_cli_options& o, const resume_choice& last) {
  const std::string& checkpoint = last.path;
  if (!o.save_final_path.empty()) {
    std::vector<std::string> parts;
    for (const auto& f : last.manifest.files) parts.push_back(checkpoint + "/" + f.name);
    const auto parameters = load_parameters(parts, [](const std::string&) { return true; });
    save_safetensors(o.save_final_path, parameters);
    out << "wrote " << parameters.size() << " tensors to " << shown_path(o.save_final_path) << " (from " << shown_path(checkpoint) << ")\n";
  }
  if (!o.trace_path.empty())
    log_warn("--trace " + o.trace_path + " is not written: the checkpoint holds the last step, and this run trains none");
  out << "the training was done: " << checkpoint << " holds its last step\n";
}

// The lines before training: the processes (in a multi-process job), what runs, and the
// config's notes.
void print_job(std::ostream& out, const train_cli_options& o, const train_options& t, const job_config& c,
               const job_place& place, const std::vector<int>& layout) {
  // The reference is one rank: one thread, or --threads-per-stage of them (it said "one
  // thread" while two ran).
  const std::string what = o.no_pipeline ? "reference (--no-pipeline: " +
                                               (t.threads_per_stage > 1 ? std::to_string(t.threads_per_stage) + " threads"
                                                                        : std::string("one thread")) +
                                               ", unpartitioned)"
                                         : (o.schedule_file.empty() ? t.schedule : o.schedule_file) + ", " +
                                               std::to_string(t.stages) + (t.stages == 1 ? " stage x " : " stages x ") + std::to_string(t.chunks) +
                                               (t.chunks == 1 ? " chunk" : " chunks") +
                                               (t.dp > 1 ? " x " + std::to_string(t.dp) + " data-parallel replicas (ZeRO-" +
                                                               std::to_string(t.zero_stage) + ")"
                                                         : "");
  if (place.processes > 1) {
    out << "processes: " << place.processes << " (this one hosts the supervisor); ranks per process";
    for (int p = 0; p < place.processes; ++p) out << ' ' << std::count(layout.begin(), layout.end(), p);
    out << "; control port " << endpoint_text(place.master_addr, place.master_port) << '\n';
  }
  out << "actorpipe train: " << what << "; " << t.microbatches << (t.microbatches == 1 ? " microbatch" : " microbatches")
      << (t.dp > 1 ? " per replica x " : " x ") << t.microbatch_size
      << (t.model_name == "gpt" ? (t.microbatch_size == 1 ? " sequence of " : " sequences of ") +
                                      std::to_string(t.model.seq_len) + (t.model.seq_len == 1 ? " token; " : " tokens; ")
                                : (t.microbatch_size == 1 ? " sample; " : " samples; "))
      << t.steps << (t.steps == 1 ? " step\n" : " steps\n");
  for (auto& n : c.notes) out << "note: " << n << '\n';
  // Intra-op threads past the CPUs take turns: each step gets slower, not faster.
  const long long ranks_here = o.no_pipeline ? 1
                               : place.processes > 1 ? std::count(layout.begin(), layout.end(), place.process)
                                                     : static_cast<long long>(t.stages) * t.dp;
  // The CPUs this process may run on (taskset, a container's cpuset), as doctor counts them:
  // hardware_concurrency counts those online.
  const long long cpus = static_cast<long long>(usable_cpus());
  if (t.threads_per_stage > 1 && cpus > 0 && ranks_here * t.threads_per_stage > cpus)
    out << "note: --threads-per-stage " << t.threads_per_stage << " x " << ranks_here
        << (ranks_here == 1 ? " rank" : " ranks") << " in this process = " << ranks_here * t.threads_per_stage
        << " compute threads on " << cpus << (cpus == 1 ? " CPU" : " CPUs")
        << " this process may use: they take turns, so steps run slower, not faster\n";
  if (const std::string other = current_blas().other_sgemm; !other.empty())
    log_warn("LibTorch's matrix products come from " + other +
             ", not from the OpenBLAS this process loaded: a reference BLAS is ~20x slower (actorpipe doctor says more)");
  out.flush();
}

// The --metrics file held (flock) for the run, from its start: a second run given the same
// file is refused at its start (two runs overwrote each other's lines from their own offsets,
// NUL bytes between, both exit 0; one that started before the other's first line was not seen).
// A regular file, or none yet (it is made, empty, and removed again where the run wrote no
// line to it); a pipe or a device is anyone's.
class held_output {
 public:
  held_output() = default;
  held_output(const held_output&) = delete;
  held_output& operator=(const held_output&) = delete;
  ~held_output() {
    if (fd_ < 0) return;
    struct stat st {};
    if (made_ && ::fstat(fd_, &st) == 0 && st.st_size == 0) ::unlink(path_.c_str());
    ::close(fd_);
  }
  // Throws std::invalid_argument naming `flag` where another run holds the file.
  void take(const std::string& flag, const std::string& path) {
    std::error_code ec;
    if (std::filesystem::exists(path, ec) && !std::filesystem::is_regular_file(path, ec)) return;
    fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    made_ = fd_ >= 0;
    if (fd_ < 0 && errno == EEXIST) fd_ = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
    if (fd_ < 0) return;  // the first line's write says why, as before
    path_ = path;
    if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
      ::close(fd_);
      fd_ = -1;
      throw std::invalid_argument(flag + " '" + path + "' is being written by a run going on now: give this run a "
                                  "file of its own");
    }
  }

 private:
  int fd_ = -1;
  bool made_ = false;
  std::string path_;
};

// The --metrics file, opened at its first line: a run refused before its first step leaves a
// file that was there as it was, and makes none. (Whether the path takes writes is checked
// before the job starts.) A restart of a launched job, and a resumed run, append.
class metrics_file {
 public:
  metrics_file(std::string path, bool append) : path_(std::move(path)), append_(append) {}
  explicit operator bool() const { return !path_.empty() && !failed_; }
  bool written() const { return out_.is_open() && !failed_; }
  const std::string& failure() const { return failure_; }  // why it gave up ("" while it has not)
  void line(const std::string& text) {
    if (!*this) return;
    if (!out_.is_open()) {
      // A run resumed after one whose last line was cut (a full disk) starts on a line of its
      // own: the cut one goes (it was glued to this run's first).
      std::error_code ec;
      whole_bytes_ = append_ && std::filesystem::is_regular_file(path_, ec) ? whole_lines_size(path_) : 0;
      if (append_ && std::filesystem::is_regular_file(path_, ec) && std::filesystem::file_size(path_, ec) != whole_bytes_)
        std::filesystem::resize_file(path_, whole_bytes_, ec);
      // A restart redoes the steps after its checkpoint: their earlier lines go, so the file
      // holds each step once (this run's first line says where it starts).
      if (append_ && whole_bytes_ > 0 && std::filesystem::is_regular_file(path_, ec)) drop_lines_from(first_step_of(text, false));
      errno = 0;
      out_.open(path_, append_ ? std::ios::app : std::ios::out);
      if (!out_) return give_up("cannot write --metrics file '" + path_ + "'");
    }
    errno = 0;
    out_ << text << '\n' << std::flush;
    // A full disk: the lines before are whole, this one may be cut (and is cut away where the
    // file is a regular one); none follow.
    if (!out_) {
      give_up("cannot write line " + std::to_string(lines_ + 1) + " of --metrics file '" + path_ + "'");
      out_.close();
      std::error_code ec;
      if (std::filesystem::is_regular_file(path_, ec)) std::filesystem::resize_file(path_, whole_bytes_, ec);
    } else {
      ++lines_;
      whole_bytes_ += text.size() + 1;
    }
  }

 private:
  // The step a line is of: {"step": k} is the step after k done (k from 0), and with `evals`
  // {"eval_after_step": k} is of step k - 1, which it follows. -1 for another line.
  static long long first_step_of(const std::string& line, bool evals) {
    const nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
    if (!j.is_object()) return -1;
    // A step as the runs write it: a whole number from 0 (a line of another's, or edited, is
    // none: -2^63 - 1 overflowed).
    const auto step_at = [&j](const char* key) -> long long {
      const auto it = j.find(key);
      return it == j.end() ? -1 : json_count(*it);
    };
    if (const long long step = step_at("step"); step >= 0) return step;
    if (const long long after = step_at("eval_after_step"); evals && after >= 0) return after - 1;
    return -1;
  }
  // Rewrites the file without the lines of steps `from` and after (and the evaluations after
  // them), where it has any.
  void drop_lines_from(long long from) {
    if (from < 0) return;
    std::ifstream in(path_, std::ios::binary);
    std::string kept, line;
    bool dropped = false;
    while (std::getline(in, line)) {
      const long long step = first_step_of(line, true);
      if (step >= from) {
        dropped = true;
        continue;
      }
      kept += line + '\n';
    }
    in.close();
    if (!dropped) return;
    std::ofstream out(path_, std::ios::binary | std::ios::trunc);
    out << kept << std::flush;
    if (out) whole_bytes_ = kept.size();
  }

  // The bytes of `path` up to and with its last line end.
  static std::uintmax_t whole_lines_size(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    const std::size_t end = text.rfind('\n');
    return end == std::string::npos ? 0 : end + 1;
  }

  void give_up(const std::string& what) {
    failed_ = true;
    failure_ = what + (errno ? std::string(" (") + std::strerror(errno) + ")" : std::string());
    log_error(failure_ + ": training goes on without it");
  }

  std::string path_;
  bool append_;
  bool failed_ = false;
  long long lines_ = 0;
  std::uintmax_t whole_bytes_ = 0;  // the file's bytes up to its last whole line
  std::ofstream out_;
  std::string failure_;
};

// What each finished step shows: a progress line (redrawn on a terminal), a debug log line,
// and a JSON line in the --metrics file when there is one.
struct step_reporter {
  const train_cli_options& o;
  int steps, dp;
  std::ostream& progress;
  metrics_file& metrics;
  mutable std::size_t drawn = 0;  // the progress line's length on the terminal

  void operator()(const step_metrics& m) const {
    const int width = 24;
    const int done = m.step + 1;
    const int filled = width * done / steps;
    std::string line = "step " + std::to_string(done) + "/" + std::to_string(steps) + " [" + std::string(filled, '#') +
                       std::string(width - filled, '.') + "] loss " + printf_text("%.4f", m.loss) + "  lr " + printf_text("%.2e", m.lr) +
                       "  tokens/s " + si(m.tokens_per_s) + (o.no_pipeline ? "" : "  bubble " + printf_text("%.1f%%", 100 * m.bubble_ratio)) +
                       (dp > 1 ? "  sync exposed " + printf_text("%.0f%%", m.sync_seconds > 0 ? 100 * m.exposed_sync_seconds / m.sync_seconds : 0.0) : "");
    ACTORPIPE_LOG(debug, "step " + std::to_string(done) + "/" + std::to_string(steps) + " done in " + printf_text("%.3f", m.seconds) +
                             " s: loss " + printf_text("%.4f", m.loss) + ", grad norm " + printf_text("%.4g", m.grad_norm) + ", " +
                             si(m.tokens_per_s) + " tokens/s");
    if (o.interactive_progress) {
      // The row cleared first (a shorter line left the old one's end behind: "72%%"), within
      // the terminal's width (80 columns hold no --dp line).
      progress << progress_redraw(STDERR_FILENO, line, drawn) << (done == steps ? "\n" : "") << std::flush;
      set_terminal_line_open(done != steps);  // a log line meanwhile ends it (it was glued on)
    } else
      progress << line << '\n' << std::flush;
    if (metrics) {
      nlohmann::json j = {{"step", m.step},          {"loss", m.loss},         {"lr", m.lr},
                          {"grad_norm", m.grad_norm}, {"seconds", m.seconds},   {"tokens_per_s", m.tokens_per_s},
                          {"bubble_ratio", m.bubble_ratio}};
      if (!o.no_pipeline) j["peak_activations"] = m.peak_activations;  // per rank: the reference has none
      if (!m.optimizer_state_bytes.empty()) j["optimizer_state_bytes"] = m.optimizer_state_bytes;
      if (!m.busy_seconds.empty()) j["busy_seconds"] = m.busy_seconds;
      if (dp > 1) {
        j["sync_seconds"] = m.sync_seconds;
        j["exposed_sync_seconds"] = m.exposed_sync_seconds;
      }
      metrics.line(j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
    }
  }
};

// "eval after step 20: loss 0.4305  accuracy 96.7%  f1 0.969 (0.12 s)"
std::string eval_line(const eval_record& e) {
  std::string line = "eval after step " + std::to_string(e.step) + ": loss " + printf_text("%.4f", e.loss);
  for (const auto& [name, value] : e.metrics)
    line += "  " + name + " " + (name == "accuracy" ? printf_text("%.1f%%", 100 * value) : printf_text("%.3f", value));
  return line + " (" + printf_text("%.2f", e.seconds) + " s)";
}

// An evaluation pass: a progress line, and a --metrics line {"eval_after_step", "eval_loss", metrics...}.
struct eval_reporter {
  bool interactive;  // the step line is redrawn in place: end it first (the last step ends its own)
  int steps;
  std::ostream& progress;
  metrics_file& metrics;
  void operator()(const eval_record& e) const {
    progress << (interactive && e.step != steps ? "\n" : "") << eval_line(e) << '\n' << std::flush;
    set_terminal_line_open(false);
    if (metrics) {
      nlohmann::json j = {{"eval_after_step", e.step}, {"eval_loss", e.loss}, {"eval_seconds", e.seconds}};
      for (const auto& [name, value] : e.metrics) j[name] = value;
      metrics.line(j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
    }
  }
};

// The own loops this run computes on (describe_own_kernels: what the CPU would run): AdamW's in
// every model; the GELU and causal attention loops in the built-in GPT's layers (BERT's are
// LibTorch's ops), the attention's where a head's size suits them.
std::string own_loops_in_run(const train_options& t) {
  if (t.model_name != "gpt") return "AdamW " + own_loops_isa();
  const int head = t.model.heads > 0 ? t.model.hidden / t.model.heads : 0;
  const char* attention = causal_attention_kernel_isa();
  std::string a = attention ? attention : "LibTorch's ops";
  if (attention && !causal_attention_kernel_serves({1, t.model.seq_len, t.model.heads, head}))
    a = "LibTorch's ops (its loops take heads of a multiple of 16, this model's are " + std::to_string(head) + ")";
  return "GELU and AdamW " + own_loops_isa() + ", attention " + a;
}

// AdamW's settings and the learning rate's schedule as this run trains with them (flags,
// config and defaults resolved): "AdamW, betas 0.9 / 0.95, eps 1e-08, weight decay 0.1 (tensors
// of 2+ dimensions); lr 0.003, warm-up 5 steps, linear decay to 0.1 x lr at step 60; gradient norm
// clipped at 1" (a decay that ends before the last step: "... at step 40 (held there to step
// 60)"; after it: "... at step 100 (this run ends before it, at lr 0.00162)").
std::string describe_optimizer(const train_options& t) {
  const lr_decay style = parse_lr_decay(t.lr_decay_style);
  std::string s = "AdamW, betas " + number_text(t.adam_beta1) + " / " + number_text(t.adam_beta2) + ", eps " +
                  number_text(t.adam_eps) + ", weight decay " + number_text(t.weight_decay) +
                  (t.weight_decay > 0 ? " (tensors of 2+ dimensions)" : "") + "; lr " + number_text(t.lr);
  if (t.warmup_steps > 0)
    s += ", warm-up " + std::to_string(t.warmup_steps) + (t.warmup_steps == 1 ? " step" : " steps");
  const int end = lr_decay_end(t.lr_decay_steps, t.steps);
  if (t.warmup_steps + 1 >= end || style == lr_decay::constant) {
    s += t.warmup_steps >= t.steps ? "" : t.warmup_steps > 0 ? ", then constant" : ", constant";
  } else {
    s += std::string(", ") + lr_decay_name(style) + " decay to " + number_text(t.min_lr_ratio) + " x lr at step " +
         std::to_string(end);
    if (end < t.steps)
      s += " (held there to step " + std::to_string(t.steps) + ")";
    else if (end > t.steps)
      s += " (this run ends before it, at lr " +
           number_text(lr_at(t.steps - 1, t.lr, t.warmup_steps, t.steps, t.min_lr_ratio, style, t.lr_decay_steps)) + ")";
  }
  s += t.grad_clip > 0 ? "; gradient norm clipped at " + number_text(t.grad_clip) : "; no gradient clipping";
  return s;
}

// The summary's first lines: the model and its size, the data, the partition and the compute.
void print_setup(std::ostream& out, const train_cli_options& o, const train_options& t, const train_result& r) {
  if (t.model_name == "gpt")
    out << "model: GPT, " << t.model.layers << " layers, hidden " << t.model.hidden << ", " << t.model.heads
        << " heads, vocab " << t.model.vocab;
  else if (t.model_name == "bert")
    out << "model: BERT, " << t.model.layers << " layers, hidden " << t.model.hidden << ", " << t.model.heads
        << " heads";
  else
    out << "model: " << t.model_name;
  out << (r.parameters.empty() ? std::string() : ": " + si(static_cast<double>(count_elements(r.parameters))) + " parameters")
      << "; data: " << r.data_description << '\n';
  if (!o.no_pipeline) out << "partition: " << r.partition << ": " << r.split << '\n';
  if (t.dp > 1) out << "grid: " << t.stages << " x " << t.dp << " ranks; " << r.grid << '\n';
  if (!o.no_pipeline && !r.optimizer_state_bytes.empty()) {
    out << "optimizer state per rank (AdamW moments" << (t.dp > 1 ? ", ZeRO-" + std::to_string(t.zero_stage) : "") << "):";
    for (long long b : r.optimizer_state_bytes) out << ' ' << si(static_cast<double>(b)) << 'B';
    out << '\n';
  }
  out << "optimizer: " << describe_optimizer(t) << '\n';
  out << "compute: " << libtorch_version() << ", " << t.threads_per_stage
      << (t.threads_per_stage == 1 ? " thread" : " threads") << (o.no_pipeline ? "" : " per stage") << "; "
      << describe_blas(current_blas()) << "; allocator: " << describe_allocator()
      << "; own loops: " << own_loops_in_run(t) << '\n';
}

// The last step per rank, measured beside simulated, the pipeline time and bubble of both, and
// the step's time beyond its pipelined span.
void print_measured_vs_simulated(std::ostream& out, const train_result& r) {
  const sim_result& m = r.last_step;
  const sim_result& p = r.predicted;
  out << "\nlast step, measured vs simulated (the same schedule on the measured per-stage costs)"
      << (r.last_step_all_ranks.events.empty()
              ? ":\n"
              : ", replica 0's ranks (the progress line, --metrics and --trace count every replica's):\n");
  out << "rank  busy %  idle %  peak activations  |  simulated busy %  idle %  peak activations\n";
  for (int rank = 0; rank < m.stages; ++rank) {
    char line[160];
    std::snprintf(line, sizeof line, "%-5d %6.1f  %6.1f  %-16d  |  %16.1f  %6.1f  %d\n", rank,
                  100 * m.busy[rank] / m.makespan, 100 * m.idle[rank] / m.makespan, m.peak_activations[rank],
                  100 * p.busy[rank] / p.makespan, 100 * p.idle[rank] / p.makespan, p.peak_activations[rank]);
    out << line;
  }
  out << "pipeline time " << printf_text("%.4f", m.makespan) << " s measured, " << printf_text("%.4f", p.makespan)
      << " s simulated (ratio " << printf_text("%.3f", m.makespan / p.makespan) << "); bubble " << printf_text("%.1f%%", 100 * m.bubble_ratio)
      << " measured, " << printf_text("%.1f%%", 100 * p.bubble_ratio) << " simulated\n";
  if (!r.steps.empty()) {  // what the step spends beyond its actions' span: start, norm, optimizer
    const double step = r.steps.back().seconds;
    out << "step time " << printf_text("%.4f", step) << " s: " << printf_text("%.1f", 1e3 * (step - m.makespan))
        << " ms of it outside the pipeline (starting the step; after its last action: any gradient sync left, the "
           "norm, the optimizer step)\n";
  }
  if (!r.replan_report.empty()) out << r.replan_report << '\n';
}

// Each rank's busy time per step (the first step aside when there are others): a pipeline keeps
// the pace of its slowest rank, and ranks with the same work that differ here ran on cores of
// different speed. Up to 8 ranks by name, else the slowest and the fastest.
// The steps the summary's lines cover, those after the run's first (its only one where it ran
// one), numbered as the run's steps are: after a resume they start past 1.
std::string steps_after_first(const train_result& r) {
  if (r.steps.size() <= 1) return r.steps.empty() ? std::string() : "step " + std::to_string(r.steps.front().step + 1);
  if (r.steps.size() == 2) return "step " + std::to_string(r.steps[1].step + 1);  // not "steps 2..2"
  return "steps " + std::to_string(r.steps[1].step + 1) + ".." + std::to_string(r.steps.back().step + 1);
}

void print_busy(std::ostream& out, const train_result& r) {
  const size_t first = r.steps.size() > 1 ? 1 : 0;
  if (r.steps.empty() || r.steps.back().busy_seconds.empty()) return;
  const size_t P = r.steps.back().busy_seconds.size();
  std::vector<double> mid(P);
  std::vector<std::pair<double, double>> range(P);
  for (size_t rank = 0; rank < P; ++rank) {
    std::vector<double> v;
    for (size_t k = first; k < r.steps.size(); ++k)
      if (rank < r.steps[k].busy_seconds.size()) v.push_back(r.steps[k].busy_seconds[rank]);
    if (v.empty()) return;
    mid[rank] = median(v);
    range[rank] = {*std::min_element(v.begin(), v.end()), *std::max_element(v.begin(), v.end())};
  }
  auto one = [&](size_t rank) {
    return "rank " + std::to_string(rank) + " " + printf_text("%.3f", mid[rank]) + " s (" + printf_text("%.3f", range[rank].first) + "-" +
           printf_text("%.3f", range[rank].second) + ")";
  };
  std::string ranks;
  if (P <= 8) {
    for (size_t rank = 0; rank < P; ++rank) ranks += (rank ? ", " : "") + one(rank);
  } else {
    const size_t slow = std::max_element(mid.begin(), mid.end()) - mid.begin();
    const size_t fast = std::min_element(mid.begin(), mid.end()) - mid.begin();
    ranks = "slowest " + one(slow) + ", fastest " + one(fast);
  }
  out << "busy per step, " << steps_after_first(r) << " (median, range): " << ranks << '\n';
}

// Data parallel: how much of the gradient sync the pipeline hid, over the steps after the first.
void print_sync(std::ostream& out, const train_result& r) {
  double total = 0, exposed = 0;
  for (size_t k = r.steps.size() > 1 ? 1 : 0; k < r.steps.size(); ++k) total += r.steps[k].sync_seconds, exposed += r.steps[k].exposed_sync_seconds;
  out << "gradient sync: " << printf_text("%.4f", total) << " s in all, " << printf_text("%.4f", exposed) << " s exposed ("
      << printf_text("%.1f%%", total > 0 ? 100 * exposed / total : 0.0) << ") after the pipeline's last action"
      << (r.steps.size() > 1 ? ", " + steps_after_first(r) : "") << '\n';
}

// Writes the --trace and --save-final files and says where they and the metrics went.
void write_outputs(std::ostream& out, const train_cli_options& o, const train_result& r, bool wrote_metrics) {
  // The trained parameters first; each output that cannot be written costs no other (their
  // errors are reported together at the end).
  std::string failed;
  if (!o.save_final_path.empty()) {
    // After training: a failure here is exit 1, naming the flag (a full disk: two layers of
    // different processes that give their tensors one name are refused as the job forms).
    try {
      save_safetensors(o.save_final_path, r.parameters);
      out << "wrote " << r.parameters.size() << " tensors to " << shown_path(o.save_final_path) << '\n';
    } catch (const std::exception& e) {
      failed = "--save-final '" + o.save_final_path + "' was not written: " + e.what();
      // Where the trained parameters still are, and how to have the file from them.
      if (!r.checkpoints.empty() && !r.steps.empty() && r.checkpoints.back().step == r.steps.back().step + 1)
        failed += " (the checkpoint " + r.checkpoints.back().path + " holds the last step: the same command with --resume " +
                  r.checkpoints.back().path + " writes --save-final from it)";
    }
  }
  if (!o.trace_path.empty()) {
    // With replicas, every rank of every one: rank = replica x stages + pipeline rank.
    const bool all = !r.last_step_all_ranks.events.empty();
    const sim_result& step = all ? r.last_step_all_ranks : r.last_step;
    // Which step of which run: a trace left by an earlier run (this one killed before it
    // wrote its own) looked like this run's.
    char written[32] = "";
    const std::time_t now = std::time(nullptr);
    std::tm utc{};
    if (gmtime_r(&now, &utc)) std::strftime(written, sizeof written, "%Y-%m-%dT%H:%M:%SZ", &utc);
    const std::vector<std::pair<std::string, std::string>> about = {
        {"step", r.steps.empty() ? "" : std::to_string(r.steps.back().step + 1)}, {"written", written}};
    errno = 0;
    std::ofstream f(o.trace_path);
    if (!(f << render_chrome_trace(in_milliseconds(step), "actorpipe train " + step.schedule + ", the last step measured",
                                   about)
            << std::flush)) {
      const std::string why = errno ? std::string(": ") + std::strerror(errno) : std::string();
      f.close();
      std::error_code ec;
      if (std::filesystem::is_regular_file(o.trace_path, ec)) std::filesystem::remove(o.trace_path, ec);  // not a cut one
      failed += (failed.empty() ? "" : "; and ") + ("cannot write --trace file '" + o.trace_path + "'" + why);
    } else {
      out << "wrote the last step's measured timeline" << (all ? " on every rank of every replica" : "") << " to "
          << shown_path(o.trace_path) << " (open in ui.perfetto.dev)\n";
    }
  }
  if (wrote_metrics) out << "wrote per-step metrics to " << shown_path(o.metrics_path) << '\n';
  if (!r.checkpoints.empty()) {
    double pause = 0, write = 0;
    for (const auto& c : r.checkpoints) pause += c.pause_seconds, write += c.write_seconds;
    const auto n = static_cast<double>(r.checkpoints.size());
    const auto& newest = r.checkpoints.back();
    out << "wrote " << r.checkpoints.size() << (r.checkpoints.size() == 1 ? " checkpoint" : " checkpoints")
        << ", the newest " << shown_path(newest.path) << " (" << printf_text("%.1f", newest.bytes / 1048576.0) << " MiB); on average "
        << printf_text("%.3f", write / n) << " s to write in the background, training held " << printf_text("%.3f", pause / n)
        << " s for the snapshot\n";
  }
  if (!failed.empty()) throw std::runtime_error(failed);
}

// --save-dir: checked before training starts, where the first checkpoint would otherwise find
// it cannot be made, after --save-every steps of work: an existing folder that takes files, or
// one that can be made in the nearest folder above it that exists. Nothing is left behind here.
// What process 0's lock file of a multi-process job says of the job: a digest of its token
// (never the token).
std::string save_dir_job_mark(const std::string& token) {
  sha256_stream h;
  const std::string text = "actorpipe save-dir " + token;
  h.update(text.data(), text.size());
  return h.hex().substr(0, 16);
}


void check_save_dir(const std::string& dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const std::string named = "--save-dir '" + dir + "'";
  const fs::path full = fs::absolute(dir, ec);
  if (ec) throw std::invalid_argument(named + ": " + ec.message());
  // Names past the system's limits failed when the folder was made (exit 1: launch restarted
  // it) or at the first checkpoint, after --save-every steps of work.
  if (const std::string too_long = long_name_part(full); !too_long.empty())
    throw std::invalid_argument(named + ": " + too_long);
  if (const std::string too_long = checkpoint_path_too_long(full); !too_long.empty())
    throw std::invalid_argument(named + " " + too_long);
  const fs::path p = nearest_existing(full);
  if (const std::string dangling = dangling_link_text(p); !dangling.empty())
    throw std::invalid_argument(p == full ? named + " " + dangling
                                          : named + ": cannot be made: '" + p.string() + "' " + dangling);
  if (!fs::is_directory(p, ec))
    throw std::invalid_argument(p == full ? named + " is not a folder"
                                          : named + ": cannot be made: '" + p.string() + "' is not a folder");
  if (const folder_probe probe = probe_folder(p, false); !probe.error.empty())
    throw std::invalid_argument(named + ": cannot write in '" + p.string() + "' (" + probe.error + ")");
}

// A folder of checkpoints: --save-dir (`dir`, canonical; empty where none), or one that holds a
// `latest` or `.lock` (another run's).
bool is_save_folder(const std::filesystem::path& folder, const std::filesystem::path& dir) {
  std::error_code ec;
  return (!dir.empty() && folder == dir) || std::filesystem::exists(folder / "latest", ec) ||
         std::filesystem::exists(folder / ".lock", ec);
}

// The checkpoint folder that `path` is (from_self) or lies in, "" where none: a folder named as
// the checkpoints are (step-N, or a write in flight) that holds a manifest, or whose folder is
// a folder of checkpoints (a save folder's step yet to come).
std::string checkpoint_folder_around(const std::string& path, const std::string& save_dir, bool from_self) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path full = write_target(path);  // through links, a dangling one's too
  const fs::path dir = save_dir.empty() ? fs::path() : fs::weakly_canonical(fs::absolute(save_dir, ec), ec);
  for (fs::path a = from_self ? full : full.parent_path(); a.has_filename() && a != a.root_path(); a = a.parent_path()) {
    const std::string name = a.filename().string();
    if (name == "latest" || name == ".lock" || !is_checkpoint_store_name(name)) continue;
    if (fs::exists(a / "manifest.json", ec) || is_save_folder(a.parent_path(), dir)) return a.string();
  }
  return "";
}

// A --save-dir in a checkpoint's folder: that folder holds the checkpoint's files only, and
// pruning it (--keep-last of the run that wrote it) would delete this run's with it.
void check_save_dir_not_in_checkpoint(const std::string& save_dir) {
  std::string around = checkpoint_folder_around(save_dir, "", false), what = "inside checkpoint '" + around + "'";
  if (around.empty()) {
    around = checkpoint_folder_around(save_dir, "", true);
    what = "checkpoint '" + around + "' itself";
  }
  if (!around.empty())
    throw std::invalid_argument("--save-dir '" + save_dir + "' is " + what +
                                ": that folder holds the checkpoint's own files, and pruning it would delete this "
                                "run's: save into a folder of its own");
}

// An output file in --save-dir under a name the checkpoints use (latest, step-N, ...) would be
// replaced by a checkpoint, or replace one; one inside a checkpoint's folder would overwrite or
// add to its files (a --save-final over its stage-0.safetensors damaged the checkpoint).
void check_output_beside_checkpoints(const char* flag, const std::string& path, const std::string& save_dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path dir = fs::weakly_canonical(save_dir, ec);
  if (path.empty()) return;
  // Where the write lands: through a link to `latest` (not yet written, or one to replace)
  // metrics lines replaced the checkpoint's pointer.
  const fs::path full = write_target(path), up = full.parent_path();
  // In --save-dir, or another run's folder of checkpoints (its `latest` was overwritten with
  // metrics lines, say).
  if (is_checkpoint_store_name(full.filename().string()) && is_save_folder(up, save_dir.empty() ? fs::path() : dir))
    throw std::invalid_argument(std::string(flag) + " '" + path + "' is a name the checkpoints in " +
                                (!save_dir.empty() && up == dir
                                     ? "--save-dir '" + save_dir + "' use: a checkpoint would replace it, or it one; "
                                     : "'" + up.string() + "' use (a folder of checkpoints): ") +
                                "give another name");
  if (const std::string around = checkpoint_folder_around(path, save_dir, false); !around.empty())
    throw std::invalid_argument(std::string(flag) + " '" + path + "' is inside checkpoint '" + around +
                                "': it would overwrite or add to that checkpoint's files; give another place");
}

void check_outputs_beside_checkpoints(const train_cli_options& o, const std::string& save_dir) {
  check_output_beside_checkpoints("--metrics", o.metrics_path, save_dir);
  check_output_beside_checkpoints("--trace", o.trace_path, save_dir);
  check_output_beside_checkpoints("--save-final", o.save_final_path, save_dir);
}

// SIGINT, SIGTERM and SIGHUP (a closed terminal; not under nohup) while train runs. The first
// asks the run to stop after the step in flight
// (train_options::stop_signal); a second one ends the process at once, as the signal's default
// action. One exception: the same signal again within a second is one request delivered twice
// (a terminal's Ctrl-C, or a kill of the process group, reaches every process of `launch` and
// launch passes it on too; GNU timeout signals its child and then its group): the copy ended
// the process before its checkpoint. A signal the process was started ignoring
// (nohup, a background job of a script) stays ignored. Restored when the run is over (cli_main
// may run again in a process).
std::atomic<int> stop_signal_received{0};
// What the handler writes to stderr at once (write(2) is async-signal-safe), per signal.
std::string stop_notice[3];

// SIGHUP's disposition when the process began (apps/hangup_at_start.cpp, before any library's
// initialiser): 1 ignored at start (nohup: stays so), 0 not (a hangup is a stop request like
// SIGTERM), -1 not recorded (a shared library, a program linked without its object).
int hangup_at_start() { return &actorpipe_hangup_at_start != nullptr ? actorpipe_hangup_at_start : -1; }
// When the first signal came. One request often arrives more than once: a terminal's Ctrl-C
// reaches every process of the group and launch passes it on again; GNU timeout signals its
// child and then its whole group. The same signal within a second of the first is such a copy.
std::atomic<long long> stop_at_ns{0};
constexpr long long stop_copy_window_ns = 1000000000LL;

long long monotonic_ns() {  // clock_gettime is async-signal-safe
  timespec t{};
  clock_gettime(CLOCK_MONOTONIC, &t);
  return static_cast<long long>(t.tv_sec) * 1000000000LL + t.tv_nsec;
}

void note_stop_signal(int sig) {
  const int first = stop_signal_received.load();
  if (first == 0) {
    stop_at_ns.store(monotonic_ns());
    stop_signal_received.store(sig);
    // SIGPIPE is ignored since run_train began: the notice below, written into a pipe whose
    // reader is gone (launch dying sends this SIGTERM), does not end the process.
    const std::string& notice = stop_notice[sig == SIGINT ? 0 : sig == SIGTERM ? 1 : 2];
    [[maybe_unused]] const ssize_t written = ::write(STDERR_FILENO, notice.data(), notice.size());
    set_terminal_line_open(false);  // the notice ended the progress line (an atomic store: signal-safe)
    return;
  }
  if (first == sig && monotonic_ns() - stop_at_ns.load() < stop_copy_window_ns) return;  // still stopping after the step
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  sigemptyset(&dfl.sa_mask);
  sigaction(sig, &dfl, nullptr);
  raise(sig);
}

class stop_signal_scope {
 public:
  // follower: a process other than the job's first, which stops with the job. mid_line: the
  // progress line is being redrawn on a terminal, so the notice starts a line of its own.
  // several: process 0 of a job of several processes, which stops at once while the job forms.
  stop_signal_scope(bool follower, bool checkpoint, bool mid_line, bool several = false) {
    stop_signal_received.store(0);
    for (int i = 0; i < 3; ++i)
      stop_notice[i] = std::string(mid_line ? "\n" : "") + log_prefix_text() + "actorpipe: " + signal_name(signals_[i]) +
                       (follower ? ": this process stops when the job does (its first process ends it after the "
                                   "step in flight; before the job has formed, at once)\n"
                                 : std::string(": stopping after the step in flight") +
                                       (checkpoint ? ", with a checkpoint of it" : "") +
                                       (several ? " (before the job has formed, at once)" : "") +
                                       "; again (a second or more later) to stop at once\n");
    for (int i = 0; i < 3; ++i) {
      if (signals_[i] == SIGHUP && hangup_at_start() != 0) continue;  // nohup'd, or not known
      struct sigaction now {};
      sigaction(signals_[i], nullptr, &now);
      if (now.sa_handler == SIG_IGN) continue;
      struct sigaction on_stop {};
      on_stop.sa_handler = note_stop_signal;
      sigemptyset(&on_stop.sa_mask);
      installed_[i] = sigaction(signals_[i], &on_stop, &before_[i]) == 0;
    }
    release_stop_signals();  // one that came while the run was set up reaches the handler now
  }
  ~stop_signal_scope() {
    for (int i = 0; i < 3; ++i)
      if (installed_[i]) sigaction(signals_[i], &before_[i], nullptr);
  }
  stop_signal_scope(const stop_signal_scope&) = delete;
  stop_signal_scope& operator=(const stop_signal_scope&) = delete;

 private:
  const int signals_[3] = {SIGINT, SIGTERM, SIGHUP};
  bool installed_[3] = {false, false, false};
  struct sigaction before_[3] {};
};

// A process other than a job's first has no say in when the job stops: its first process stops
// the job after the step in flight, and this one ends with it. Should that not come (the signal
// reached this process alone), it ends as the signal would have, --step-timeout seconds after it
// (no step of the job may take longer).
class follower_stop_watch {
 public:
  explicit follower_stop_watch(double wait_s) : wait_s_(wait_s), thread_([this] { watch(); }) {}
  ~follower_stop_watch() {
    done_.store(true);
    thread_.join();
  }
  follower_stop_watch(const follower_stop_watch&) = delete;
  follower_stop_watch& operator=(const follower_stop_watch&) = delete;

 private:
  void watch() {
    using clock = std::chrono::steady_clock;
    std::optional<clock::time_point> since;
    while (!done_.load()) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      const int sig = stop_signal_received.load();
      if (sig == 0) continue;
      if (!since) since = clock::now();
      if (std::chrono::duration<double>(clock::now() - *since).count() >= wait_s_) {
        log_warn(signal_name(sig) + " " + number_text(wait_s_) +
                 " s ago, and the job has not stopped: ending this process");
        std::signal(sig, SIG_DFL);
        std::raise(sig);
      }
    }
  }
  const double wait_s_;
  std::atomic<bool> done_{false};
  std::thread thread_;
};

}  // namespace

void check_train_files(const train_cli_options& o, const std::string& log_file) {
  file_roles data_inputs = {{"--schedule-file", o.schedule_file}, {"--eval-file", o.eval_file},
                            {"--vocab-file", o.vocab_file},       {"--init-from", o.init_from},
                            {"--config", o.config_path}};
  for (const auto& part : o.data_file.empty() ? std::vector<data_file_part>{} : parse_data_files(o.data_file))
    data_inputs.push_back({"--data-file", part.path});
  check_distinct_files({{"--metrics", o.metrics_path}, {"--trace", o.trace_path}, {"--save-final", o.save_final_path},
                        {"--log-file", log_file}, {"--save-dir", o.save_dir}},
                       data_inputs);
  // The log is opened first, before the other outputs are checked: beside the checkpoints (at
  // `latest` or `step-N` a checkpoint replaced it, the run's log lost, exit 0) here.
  check_output_beside_checkpoints("--log-file", log_file, o.save_dir);
  check_pipe_has_reader("--log-file", log_file);  // its open waited for a reader for ever
}

int run_train(const train_cli_options& o, std::ostream& out_stream, std::ostream& progress_stream) {
  // A reader of this process's output that goes away (`train | head`; launch killed outright,
  // whose SIGTERM, PR_SET_PDEATHSIG, asks for a checkpointed stop, often after the next line
  // written) ended the run by SIGPIPE, without its checkpoint or --save-final. A closed pipe is
  // an output lost instead: the run goes on, writes its files, and exits 1 naming the report.
  const write_signals_ignored no_sigpipe;
  if (!o.schedule_file.empty() && o.schedule) throw std::invalid_argument("give --schedule or --schedule-file, not both");
  if (!o.trace_path.empty() && o.no_pipeline) throw std::invalid_argument("--trace needs the pipeline (not --no-pipeline)");
  // The plan file is read once: it may be a pipe (`--schedule-file <(actorpipe simulate ...)`),
  // but not for a job of several processes (one of them would get it) or a restart (read).
  if (!o.schedule_file.empty()) {
    const launch_env launched = read_launch_env(true);
    std::error_code ec;
    if ((launched.processes > 1 || launched.restart_count > 0) && std::filesystem::exists(o.schedule_file, ec) &&
        !std::filesystem::is_regular_file(o.schedule_file, ec))
      throw std::invalid_argument("--schedule-file '" + o.schedule_file + "' is not a regular file (a pipe?): " +
                                  (launched.processes > 1 ? "each process of a job reads the plan, and a pipe gives it to one"
                                                          : "a restart reads the plan again, and a pipe gives it once") +
                                  "; write the plan to a file");
  }
  const std::optional<std::string> plan_text =
      o.schedule_file.empty() ? std::nullopt : std::optional<std::string>(read_plan_file(o.schedule_file));
  job_config c = resolve_job(o, plan_text);
  train_options t = to_train_options(c, o);
  t.schedule_text = plan_text;
  // Before anything is made or said: a refused run leaves no --save-dir folder (nor its lock)
  // and prints no note its error contradicts.
  check_train_options(t);

  // A multi-process job when the launcher says so. Process 0 reports; the others stay quiet.
  std::vector<int> layout;  // process of each rank (multi-process jobs)
  const launch_env env = read_launch_env(true);
  job_place place = place_in_job(o, t, env, layout);
  if (place.processes > 1) t.gather_parameters = !o.save_final_path.empty();  // for --save-final
  const int restart = env.restart_count;
  const std::optional<resume_choice> done = resume_after_restart(t, restart);
  std::ostringstream quiet;
  std::ostream& out = place.process == 0 ? out_stream : quiet;
  if (done) {
    if (place.process == 0) {
      // The folder as a run leaves it: killed between the last checkpoint's rename and its
      // `latest`, the job left `latest` naming the one before and a `.latest-*` beside it
      // (the lock takes writes in flight away).
      try {
        save_dir_lock held(t.save_dir);
        const std::string name = std::filesystem::path(done->path).filename().string();
        if (const std::string before = read_latest(t.save_dir); before != name) {
          point_latest(t.save_dir, name);
          log_info("--save-dir " + t.save_dir + ": latest named " + (before.empty() ? "nothing" : before) +
                   "; it names " + name + " now, the newest complete checkpoint");
        }
        prune_checkpoints(t.save_dir, t.keep_last);  // the commit's pruning the kill cut short
      } catch (const std::exception& e) {
        log_warn("--save-dir " + t.save_dir + ": latest not checked (" + std::string(e.what()) + ")");
      }
      finish_from_checkpoint(out, o, *done);
    }
    return 0;
  }
  // --resume from a checkpoint of the last step with --save-final: the file from its parameters
  // (a --save-final that failed after the training, a full disk, could not be written again:
  // "leaves nothing to train"). A checkpoint of another model is refused as a resume would be.
  if (restart == 0 && !t.resume.empty() && !o.save_final_path.empty()) {
    // (Another search's failure is said as a resume says it, below.)
    const std::optional<resume_choice> last = finished_checkpoint(t.resume, t.steps);
    if (last && last->manifest.step == t.steps) {
      if (const std::string why = resume_model_mismatch(last->manifest.meta, t); !why.empty())
        throw std::invalid_argument("--resume " + last->path + ": " + why);
      if (place.process == 0) {
        for (const auto& why : last->refused) log_warn("not resuming from a damaged checkpoint: " + why);
        check_output_file("--save-final", o.save_final_path, true);
        finish_from_checkpoint(out, o, *last);
      }
      return 0;
    }
  }
  std::ostream& progress = place.process == 0 ? progress_stream : quiet;
  held_output metrics_held;  // for the whole run
  // Output paths first: a typo in one should not cost a training run.
  if (place.process == 0) {  // process 0 writes these
    check_outputs_beside_checkpoints(o, t.save_dir);
    check_train_files(o, "");
    if (!o.metrics_path.empty()) {
      check_output_file("--metrics", o.metrics_path, false);
      metrics_held.take("--metrics", o.metrics_path);
    }
    if (!o.trace_path.empty()) check_output_file("--trace", o.trace_path, false);
    if (!o.save_final_path.empty()) check_output_file("--save-final", o.save_final_path, true);
  }
  // A --save-dir this run made, and leaves with nothing but its lock in it because the run was
  // refused or failed before its first checkpoint: it goes again (a refused run left the folder).
  struct made_folder {
    std::string path;
    ~made_folder() {
      if (path.empty() || std::uncaught_exceptions() == 0) return;
      std::error_code ec;
      for (const auto& e : std::filesystem::directory_iterator(path, ec))
        if (e.path().filename() != ".lock") return;
      if (!ec) std::filesystem::remove_all(path, ec);
    }
  } made_save_dir;
  std::optional<save_dir_lock> save_dir_held;  // for the whole run: one writer per folder
  if (!t.save_dir.empty()) {
    check_save_dir(t.save_dir);
    // Every process writes its parts into the folder process 0 holds: on several machines it
    // must be one they share. Process 0's lock names the job and this run of it (a lock left by
    // an earlier run with the same token, copied with a checkpoint folder, passed); the others
    // look for that mark there once the job has formed (a folder of each machine's own failed
    // at the first save, after training, a restart failing alike).
    const std::string mark = place.processes > 1 ? save_dir_job_mark(place.token) + " run " + random_hex(8) : std::string();
    if (place.process == 0) place.run_mark = mark;
    check_save_dir_not_in_checkpoint(t.save_dir);
    // A --resume that is not there is refused before the folder and its lock are made.
    std::error_code missing;
    if (!t.resume.empty() && restart == 0 && !std::filesystem::exists(t.resume, missing))
      throw std::invalid_argument("--resume '" + t.resume + "': does not exist");
    if (place.process == 0) {
      std::error_code ec;
      if (!std::filesystem::exists(t.save_dir, ec)) made_save_dir.path = t.save_dir;
      save_dir_held.emplace(t.save_dir, mark);
    } else {
      t.after_join = [dir = t.save_dir, process = place.process](const std::string& process0_mark) {
        if (!save_dir_marked_by(dir, process0_mark))
          throw std::invalid_argument("--save-dir '" + dir + "': process " + std::to_string(process) +
                                      " does not see the folder process 0 saves into (its .lock does not name this run "
                                      "of the job): every process writes its parts there, so on several machines it must "
                                      "be a folder they share (a network filesystem), at the same path");
      };
    }
    if (restart == 0) check_save_dir_is_ours(t.save_dir, t.resume, t.keep_last);
  }
  // A restart, or a run resumed by hand, adds to the lines of the run before it (steps after the
  // checkpoint it resumes from appear again: they ran again); a new run starts the file afresh.
  metrics_file metrics(place.process == 0 ? o.metrics_path : std::string(), restart > 0 || !t.resume.empty());

  print_job(out, o, t, c, place, layout);
  const step_reporter show{o, t.steps, t.dp, progress, metrics};
  const eval_reporter show_eval{o.interactive_progress, t.steps, progress, metrics};
  const stop_signal_scope signals(place.process != 0, !t.save_dir.empty(), o.interactive_progress, place.processes > 1);
  t.stop_signal = &stop_signal_received;
  // A stop that came while the run was set up (held until now): nothing was trained, nothing
  // to save. (A job of several processes ends its forming on it as it does on a later one.)
  if (const int early = stop_signal_received.load(); early != 0 && place.processes == 1) {
    out << "stopped by " << signal_name(early) << " before the run began: nothing was trained\n";
    return 128 + early;
  }
  std::optional<follower_stop_watch> follower;
  if (place.process != 0) follower.emplace(t.step_timeout_s);
  std::optional<train_result> ran;
  if (o.no_pipeline) {
    // A step that outlasts --step-timeout ends the run (its thread, stuck in a layer or the
    // data, is left to the process's exit).
    ran = run_reference(t, show, show_eval);
  } else {
    try {
      ran = run_pipeline(t, show, {}, place, show_eval);
    } catch (const stopped_on_request& e) {  // a stop asked for: 128 + N, not a failure to restart
      log_error(e.what());
      return 128 + e.signal;
    }
  }
  train_result& r = *ran;
  if (place.process != 0) {  // process 0 reports and writes the files; how the job ended is its word
    // A stop another process got ends this one with its status too: said (it exited 143 without a word).
    if (r.stopped_by_signal != 0 && stop_signal_received.load() == 0)
      log_info("the job stopped after the step in flight: another of its processes got " +
               signal_name(r.stopped_by_signal) + " (this one exits as if it had; process 0 says after which step)");
    return r.stopped_by_signal != 0 ? 128 + r.stopped_by_signal : 0;
  }

  // Stopped early, the run left its redrawn progress line open (the last step ends it): the
  // summary starts on a line of its own.
  if (o.interactive_progress && !r.steps.empty() && r.steps.back().step + 1 < t.steps) progress << '\n' << std::flush;
  set_terminal_line_open(false);
  print_setup(out, o, t, r);
  for (const auto& why : r.refused) out << "not resumed from a damaged checkpoint: " << why << '\n';
  if (!r.resumed_from.empty())
    out << "resumed from " << shown_path(r.resumed_from) << " (steps " << r.steps.front().step + 1 << ".." << t.steps << " ran here)\n";
  if (!o.no_pipeline) {
    print_measured_vs_simulated(out, r);
    print_busy(out, r);
  }
  const auto& last = r.steps.back();
  // The first step this run ran, by its number: after a resume it is not step 1.
  out << "final loss " << printf_text("%.4f", last.loss) << " ("
      << (r.steps.front().step == 0 ? std::string("first step") : "step " + std::to_string(r.steps.front().step + 1))
      << " " << printf_text("%.4f", r.steps.front().loss) << ")\n";
  if (t.dp > 1) print_sync(out, r);
  if (!r.evals.empty()) out << "final " << eval_line(r.evals.back()) << '\n';
  // A stop that came during the last step (its notice said "after the step in flight"): that
  // step was the run's end anyway, so the run is complete, exit 0. Said, not left to guess.
  if (r.stopped_by_signal == 0 && stop_signal_received.load() != 0)
    out << signal_name(stop_signal_received.load()) << " came during the last step: the run finished it and is complete\n";
  if (r.stopped_by_signal != 0) {
    const int done = r.steps.back().step + 1;
    out << "stopped by " << signal_name(r.stopped_by_signal) << " after step " << done << " of "
        << t.steps << (t.save_dir.empty() ? "" : ": the same command with --resume " + t.save_dir + " goes on from there") << '\n';
  }
  write_outputs(out, o, r, metrics.written());
  for (const std::string* error : {&r.checkpoint_error, &r.eval_error})  // after what the run trained is written
    if (!error->empty())
      throw std::runtime_error(*error + " (the run stopped after step " + std::to_string(r.steps.back().step + 1) + " of " +
                               std::to_string(t.steps) + "; the outputs above hold it)");
  // An output lost is a failure (exit 1), whatever the log level let through when it happened
  // (at --log-level off nothing said so, and the run exited 0).
  if (!metrics.failure().empty()) throw std::runtime_error(metrics.failure() + "; the run's other outputs are written");
  flush_log();
  if (const std::string lost = log_file_failure(); !lost.empty())
    throw std::runtime_error(lost + "; the run's other outputs are written");
  return r.stopped_by_signal != 0 ? 128 + r.stopped_by_signal : 0;
}

namespace {
std::atomic<bool> setup_watched{false};
}  // namespace

void watch_held_stop_signals() {
  if (setup_watched.exchange(true)) return;
  std::thread([] {
    int held_for = 0;  // tenths of a second a stop signal has been held
    while (setup_watched.load()) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      sigset_t pending;
      sigemptyset(&pending);
      // A hangup under nohup is held too (ignored once let through): not a stop.
      const bool held = sigpending(&pending) == 0 && (sigismember(&pending, SIGINT) || sigismember(&pending, SIGTERM) ||
                                                      (hangup_at_start() == 0 && sigismember(&pending, SIGHUP)));
      held_for = held ? held_for + 1 : 0;
      if (held_for < 10 || !setup_watched.load()) continue;
      const int sig = sigismember(&pending, SIGINT) ? SIGINT : sigismember(&pending, SIGTERM) ? SIGTERM : SIGHUP;
      const std::string line = "actorpipe train: stopped by " + signal_name(sig) +
                               " before the run began: nothing was trained (its setup was still waiting a second "
                               "after the signal)\n";
      [[maybe_unused]] const ssize_t written = ::write(STDERR_FILENO, line.data(), line.size());
      ::_exit(128 + sig);
    }
  }).detach();
}

void release_stop_signals() {
  setup_watched.store(false);  // the run's handler takes them from here
  sigset_t stops;
  sigemptyset(&stops);
  sigaddset(&stops, SIGINT);
  sigaddset(&stops, SIGTERM);
  sigaddset(&stops, SIGHUP);  // held by main for train, as the two above
  sigprocmask(SIG_UNBLOCK, &stops, nullptr);
}

bool hangup_is_a_stop() { return hangup_at_start() == 0; }

}  // namespace actorpipe
