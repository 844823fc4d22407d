// Command-line front: CLI11 subcommands. Every bad request ends in one error line, exit 2.
#include "apps/cli.hpp"

#include <CLI/CLI.hpp>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <csignal>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <optional>
#include <ostream>
#include <stdexcept>

#include "apps/doctor_command.hpp"
#include "apps/exit_codes.hpp"
#include "apps/file_roles.hpp"
#include "apps/launch_command.hpp"
#include "apps/simulate_command.hpp"
#include "apps/write_signals.hpp"
#include "core/config.hpp"
#include "core/job_place.hpp"
#include "core/number_text.hpp"
#include "core/version.hpp"
#include "core/text_file.hpp"
#include "core/log.hpp"
#include "core/proc_files.hpp"
#include "core/model/model_names.hpp"
#include "core/schedule/schedule_registry.hpp"
#ifdef ACTORPIPE_WITH_TORCH
#include "apps/train_command.hpp"
#include "core/model/error_text.hpp"
#endif

namespace actorpipe {
namespace {

// "0", "-0", "+00": a zero however written (a check of the text "0" let "-0" through as "not
// given").
bool zero_text(const std::string& t) {
  const std::size_t sign = !t.empty() && (t[0] == '-' || t[0] == '+') ? 1 : 0;
  return t.size() > sign && t.find_first_not_of('0', sign) == std::string::npos;
}

// --log-level and --log-file of a command that runs a job.
struct log_flags {
  std::string level, file;
  CLI::Option* level_option = nullptr;
};

void add_log_options(CLI::App* command, log_flags& f, const std::string& file_help) {
  f.level_option = command->add_option("--log-level", f.level,
                                       "Log lines to show: trace, debug, info, warn, error or off "
                                       "[default: $ACTORPIPE_LOG_LEVEL, else info]");
  command->add_option("--log-file", f.file, file_help);
}

// The flags, else ACTORPIPE_LOG_LEVEL, else info. Throws std::invalid_argument naming the
// flag (or the variable) and the value.
log_options resolve_log_flags(const log_flags& f) {
  log_options o;
  const char* env = std::getenv("ACTORPIPE_LOG_LEVEL");
  if (*f.level_option)
    o.level = parse_log_level(f.level, "--log-level");
  else if (env && *env)
    o.level = parse_log_level(env, "ACTORPIPE_LOG_LEVEL");
  o.file = f.file;
  return o;
}

// A command that set up the log puts it back as it found it (the defaults) when it returns:
// cli_main may run again in the same process.
class logging_scope {
 public:
  void setup(const log_options& o) {
    active_ = true;
    setup_logging(o);
  }
  ~logging_scope() {
    if (active_) reset_logging();
  }

 private:
  bool active_ = false;
};


// simulate: its options, and what it runs.
struct simulate_cli {
  simulate_options sim;
  bool list = false;
  std::string schedule;
  int stages = 0, microbatches = 0, chunks = 0;
  CLI::App* command = nullptr;
  CLI::Option *schedule_option = nullptr, *stages_option = nullptr, *microbatches_option = nullptr,
              *chunks_option = nullptr;
};

void add_simulate(CLI::App& app, simulate_cli& c) {
  auto& sim = c.sim;
  auto& list = c.list;
  auto& schedule = c.schedule;
  auto& stages = c.stages;
  auto& microbatches = c.microbatches;
  auto& chunks = c.chunks;
  auto* s = c.command = app.add_subcommand("simulate",
                               "Validate a pipeline schedule and simulate it on a cost model: ASCII timeline, makespan, "
                               "bubble ratio, peak activations per rank; optional Chrome trace and SVG picture.");
  s->footer(
      "\nExamples:\n"
      "  actorpipe simulate                                   # 1f1b, 4 stages, 8 microbatches\n"
      "  actorpipe simulate --schedule interleaved --stages 4 --microbatches 8 --chunks 2 --svg interleaved.svg\n"
      "  actorpipe simulate --schedule zbv --stages 4 --microbatches 8 --cost 1,2,1,1 --format json\n"
      "  actorpipe simulate --schedule-file my_plan.txt --trace my_plan.json\n"
      "  actorpipe simulate --schedule zbv --stages 2 --microbatches 16 --costs-from run.json   # run.json: train --trace\n"
      "  actorpipe simulate --config examples/job.json --set num_microbatches=16\n"
      "\nSchedule file format: one line per rank, 'RANK: ACTION ...', ACTION = <op><virtual_stage>.<microbatch>\n"
      "with op F (forward), B (backward), I (input-grad), W (weight-grad); '#' starts a comment.");
  c.schedule_option =
      s->add_option("--schedule", schedule, "Registered schedule or dynamic policy (see --list) [default: 1f1b]");
  auto* opt_file = s->add_option("--schedule-file", sim.schedule_file, "Read the plan from a text file instead");
  c.schedule_option->excludes(opt_file);
  c.stages_option = s->add_option("--stages,-P", stages, "Pipeline stages (ranks) P [default: 4]");
  c.microbatches_option = s->add_option("--microbatches,-M", microbatches, "Microbatches per step M [default: 8]");
  c.chunks_option = s->add_option("--chunks,-V", chunks,
                                   "Virtual stages per rank V [default: 2 for interleaved, zbv, dualpipev; else 1]");
  auto* opt_config = s->add_option("--config", sim.config_path,
                                   "Job config (JSON): schedule, pp, num_microbatches, chunks and the batch rules");
  auto* opt_set = s->add_option("--set", sim.overrides, "Override a config key, KEY=VALUE (repeatable)");
  opt_file->excludes(opt_config);
  opt_file->excludes(opt_set);
  auto* opt_cost = s->add_option("--cost", sim.cost, "Costs per virtual stage 'F,B,I,W' (or 'F,,I,W': B = I+W; or 'F,B')")
                       ->default_val("1,2,1,1");
  auto* opt_from = s->add_option(
      "--costs-from", sim.costs_from,
      "Costs per op and virtual stage from a Chrome trace of `actorpipe train --trace` (each one's median, ms); "
      "zb-h1/zbv get the plan train would choose after that step");
  s->add_option("--latency", sim.send_latency, "Send latency added to every message between ranks")->default_val(0);
  auto* opt_early = s->add_flag("--early-input-grad", sim.early_input_grad,
                                "Model B as `train` runs it: its input gradient leaves after its I part (cost I), then W "
                                "runs (default: B as one block, the textbook schedules)");
  opt_from->excludes(opt_cost);
  opt_from->excludes(opt_early);  // the trace says how its B ran
  s->add_option("--format", sim.format, "Output format: text, json, or plan (the plan alone, as a --schedule-file)")
      ->default_val("text");
  s->add_option("--trace", sim.trace_path, "Write the timeline as Chrome trace JSON (Perfetto, chrome://tracing)");
  s->add_option("--svg", sim.svg_path, "Write the timeline as an SVG picture");
  s->add_flag("--print-plan", sim.print_plan, "Also print the plan in its text form");
  s->add_option("--budget", sim.budget, "Dynamic policies: as train --budget (0 = the policy's default)")->default_val(0);
  s->add_option("--width", sim.width, "Maximum width of the ASCII timeline in columns")->default_val(200);
  s->add_flag("--list", list, "List the registered schedules and dynamic policies and exit");
}

int run_simulate_cli(simulate_cli& c, std::ostream& out) {
  if (c.list) {
    list_schedules_command(out);
    return 0;
  }
  if (*c.schedule_option) c.sim.schedule = c.schedule;
  if (*c.stages_option) c.sim.stages = c.stages;
  if (*c.microbatches_option) c.sim.microbatches = c.microbatches;
  if (*c.chunks_option) c.sim.chunks = c.chunks;
  run_simulate(c.sim, out);
  return 0;
}

#ifdef ACTORPIPE_WITH_TORCH
// train: its options, and what it runs.
struct train_cli {
  train_cli_options tr;
  log_flags t_log;
  CLI::App* command = nullptr;
};

// The end of train's help: examples, how config and flags combine, multi-process jobs, and the
// models, schedules and dynamic policies registered. Built from the registries, so a binary
// that registered its own before calling cli_main lists them too.
std::string train_footer() {
  std::string plans, policies;
  for (const auto& info : list_schedules()) {
    std::string& names = info.dynamic ? policies : plans;
    names += (names.empty() ? "" : ", ") + info.name;
  }
  std::string models;
  for (const auto& [name, description] : list_models()) models += "\n  " + name + ": " + description;
  return "\nExamples:\n"
         "  actorpipe train                                      # the default job: 2 stages, 1f1b, synthetic data\n"
         "  actorpipe train --schedule zbv --stages 2 --microbatches 8 --trace trace.json\n"
         "  actorpipe train --schedule interleaved --chunks 2 --layers 8 --save-final model.safetensors\n"
         "  actorpipe train --no-pipeline                        # the single-thread reference\n"
         "  actorpipe train --config examples/job.json --set lr=1e-3 --metrics metrics.jsonl\n"
         "  actorpipe launch --nproc-per-node 2 -- train --stages 2   # the same job, one process per rank\n"
         "  actorpipe train --stages 2 --dp 2 --zero 1                 # 2 replicas of a 2-stage pipeline, ZeRO-1\n"
         "  actorpipe train --save-dir ckpt --save-every 10 ; actorpipe train --resume ckpt --save-dir ckpt --save-every 10 --steps 120   # checkpoints, resume (and go on saving)\n"
         "  actorpipe train --data-file train.bin --eval-file val.bin --eval-every 100   # a GPT on nanoGPT's token files\n"
         "  actorpipe train --data-file corpus_text_document.bin --vocab 50304 --eval-split 0.01   # a Megatron dataset (its .idx beside it)\n"
         "  actorpipe train --data-file 0.7 web.bin 0.3 code.bin --vocab 50304   # a blend, as Megatron's --data-path 0.7 web 0.3 code\n"
         "  actorpipe train --model bert --data-file train.tsv --eval-file dev.tsv --eval-every 50   # BERT on GLUE TSV\n"
         "\nWithout --config the defaults below are the embedded job; with --config, the file's values (and the\n"
         "config defaults: see README) apply, and flags and --set override them.\n"
         "\nSeveral processes: when WORLD_SIZE > 1 (set by actorpipe launch, torchrun, srun or mpirun) this process\n"
         "is one of the job's; process 0 hosts the supervisor at MASTER_ADDR:MASTER_PORT and prints the progress.\n"
         "Every process needs the same ACTORPIPE_JOB_TOKEN (actorpipe launch makes one). See README.\n"
         "\nStopping: Ctrl-C, SIGTERM or SIGHUP stops the run after the step in flight, with a checkpoint of it when\n"
         "--save-dir is given (--resume goes on from there); exit code 128 + the signal. A second one stops at once.\n"
         "Exit status otherwise: 0 done, 1 failed while running, 2 refused before anything ran (bad flags, config,\n"
         "input files or checkpoint, a job that cannot form: the master port taken, a wrong job token or\n"
         "world size; or a model that fails its first step the same way in every run; launch --max-restarts does\n"
         "not restart it).\n"
         "\nModels (--model):" + models + "\n" +
         "\nSchedules: " + plans + " (plans; see simulate --list).\nDynamic policies: " + policies +
         " (they pick each rank's next action as inputs arrive;\ngreedy: backward first, forwards of new microbatches "
         "while the rank holds fewer than --budget).";
}

// train's flags for what to train: the schedule, the model and its partition, the job config.
void add_train_job_flags(CLI::App* t, train_cli_options& tr) {
  auto* t_sched = t->add_option("--schedule", tr.schedule, "Schedule or dynamic policy (see simulate --list) [default: 1f1b]");
  auto* t_file = t->add_option("--schedule-file", tr.schedule_file, "Train with a plan read from a text file");
  t->add_option("--model", tr.model,
                "Which model: gpt or bert (built in), or one a program registered with actorpipe::register_model "
                "[default: gpt]");
  t->add_option("--partition", tr.partition,
                "How layers are cut over stages x chunks: uniform, parameters, type:REGEX, profile or counts:A,B,... "
                "[default: the model's; gpt: type:^blocks\\.]");
  t_sched->excludes(t_file);
  t->add_option("--config", tr.config_path, "Job config (JSON); flags override it");
  t->add_option("--set", tr.overrides, "Override a config key, KEY=VALUE (repeatable)");
}

// train's optional numbers of a job: the pipeline's shape, the batch, the model's size and the
// optimizer's settings (unset: the config's value).
void add_train_number_flags(CLI::App* t, train_cli_options& tr) {
  // One int flag, bound to its field.
  struct int_flag {
    const char* name;
    std::optional<int> train_cli_options::*field;
    const char* help;
  };
  static const int_flag int_flags[] = {
      {"--stages,-P", &train_cli_options::stages, "Pipeline stages P [default: 2]"},
      {"--chunks,-V", &train_cli_options::chunks,
       "Virtual stages per rank V [default: 2 for interleaved, zbv, dualpipev; else 1; a --schedule-file's own]"},
      {"--dp", &train_cli_options::dp, "Data-parallel replicas D of the pipeline: stages x dp ranks [default: 1]"},
      {"--zero", &train_cli_options::zero,
       "ZeRO stage with --dp: 1 splits each stage's AdamW state over the replicas, 0 keeps it whole [default: 0]"},
      {"--microbatches,-M", &train_cli_options::microbatches, "Microbatches per step M (per replica) [default: 8]"},
      {"--microbatch-size,-B", &train_cli_options::microbatch_size, "Sequences per microbatch [default: 4]"},
      {"--batch-size", &train_cli_options::batch_size,
       "Sequences per step per replica (= microbatches x microbatch size); alone: 8 microbatches, or the largest of 4, "
       "2, 1 that divides it (a --schedule-file's own)"},
      {"--steps", &train_cli_options::steps, "Optimizer steps [default: 60]"},
      {"--layers", &train_cli_options::layers, "Transformer blocks [default: 4]"},
      {"--hidden", &train_cli_options::hidden, "Hidden size [default: 128]"},
      {"--heads", &train_cli_options::heads, "Attention heads [default: 4]"},
      {"--seq-len", &train_cli_options::seq_len, "Sequence length in tokens [default: 64]"},
      {"--vocab", &train_cli_options::vocab, "Vocabulary size [default: 256]"},
      {"--warmup-steps", &train_cli_options::warmup_steps, "Linear learning-rate warm-up steps [default: 5]"},
      {"--lr-decay-steps", &train_cli_options::lr_decay_steps,
       "The step the learning rate's decay reaches --min-lr-ratio x --lr at, then stays there (as Megatron's "
       "--lr-decay-iters, which reaches it a step later); past --steps the run ends mid-decay, and a --resume given the same N and more --steps goes "
       "on along it "
       "[default: --steps]"},
  };
  for (const auto& f : int_flags) t->add_option(f.name, tr.*f.field, f.help);
  t->add_option("--bucket-mb", tr.bucket_mb, "With --dp: MiB of gradients per sync bucket [default: 4]");
  t->add_option("--seed", tr.seed, "Seed of parameters and data [default: 1234]")
      ->check(CLI::Validator(
          [](std::string& text) {  // a minus would wrap around to a huge seed; -0 is 0
            if (text.size() > 1 && text.front() == '-' && text.find_first_not_of('0', 1) == std::string::npos) text = "0";
            return text.find('-') == std::string::npos ? std::string() : "must be 0 or more, got '" + text + "'";
          },
          ""));
  t->add_option("--lr", tr.lr, "Peak learning rate [default: 3e-3; 2e-4 with --model bert]");
  t->add_option("--grad-clip", tr.grad_clip, "Clip the global gradient norm to this (0 = off) [default: 1]");
  t->add_option("--weight-decay", tr.weight_decay, "AdamW weight decay on matrices (lr x weight decay below 1) [default: 0.1]");
  t->add_option("--min-lr-ratio", tr.min_lr_ratio,
                "Where the learning rate's decay ends (at --lr-decay-steps), as a fraction of --lr (0 to 1) "
                "[default: 0.1]");
  t->add_option("--lr-decay-style", tr.lr_decay_style,
                "How the learning rate falls after the warm-up to --min-lr-ratio x --lr at --lr-decay-steps: linear, "
                "cosine or constant [default: linear]");
  t->add_option("--adam-beta1", tr.adam_beta1, "AdamW's decay of the gradient's running mean [default: 0.9]");
  t->add_option("--adam-beta2", tr.adam_beta2, "AdamW's decay of the squared gradient's running mean [default: 0.95]");
  t->add_option("--adam-eps", tr.adam_eps, "AdamW's epsilon, added to the root of that mean [default: 1e-8]");
}

// train's flags for how it runs: the data, the compute, the files it writes, multi-process
// jobs and the reference.
void add_train_run_flags(CLI::App* t, train_cli_options& tr) {
  auto* t_syn = t->add_option("--data", tr.data, "synthetic: the embedded Markov corpus (the default)")
                    ->check(CLI::IsMember({"synthetic"}));
  auto* t_data = t->add_option("--data-file", tr.data_file,
                               "Train on a file. gpt: .bin = tokens: flat uint16 (nanoGPT), or a Megatron dataset "
                               "in its index's type (the .idx beside it); else UTF-8 text as bytes; bert: a "
                               "GLUE-format TSV (e.g. SST-2's train.tsv). gpt: a blend of files as Megatron's "
                               "--data-path mixes them, each sample drawn from one by weight: W1 FILE1 W2 FILE2 ..., or "
                               "FILE1 FILE2 ... weighed by their tokens")
                    ->expected(1, -1);
  t_syn->excludes(t_data);
  t->add_option("--eval-file", tr.eval_file,
                "Held-out data to evaluate on. gpt: a token file as --data-file, read in consecutive windows of --seq-len "
                "(eval loss, perplexity); bert: the GLUE-format dev TSV (eval loss, accuracy; 2 labels: F1, Matthews "
                "correlation)");
  t->add_option("--eval-split", tr.eval_split,
                "gpt: hold out the last F (0 < F < 1) of --data-file's tokens as the eval set (Megatron's --split): "
                "training reads only the tokens before them, and evaluation their consecutive windows, as --eval-file's")
      ->default_val(0);
  t->add_option("--eval-every", tr.eval_every,
                "With eval data: a forward-only evaluation pass every N steps, and after the last (0 = after the last only)")
      ->default_val(0);
  t->add_option("--eval-microbatches", tr.eval_microbatches,
                "Microbatches of --microbatch-size an evaluation pass reads: the eval set's first N [default: all of "
                "--eval-file or --eval-split; gpt on synthetic data, which holds out its own sequences: --microbatches, and given "
                "alone it turns evaluation on]")
      ->default_val(0);
  t->add_option("--vocab-file", tr.vocab_file,
                "bert: a WordPiece vocab.txt (e.g. bert-base-uncased's); default: a word vocabulary from the training file");
  t->add_flag("--no-lower-case", tr.no_lower_case, "bert: keep case and accents (cased vocabularies)");
  t->add_option("--text-columns", tr.text_columns,
                "bert: 0-based TSV columns A,LABEL or A,B,LABEL (default: by the header: SST-2, MRPC, QQP, MNLI, QNLI, "
                "RTE/WNLI, CoLA's headerless rows; else the label is the column named label, or the last, and the text "
                "a column named text or sentence, or the first other one not named id)");
  t->add_option("--max-positions", tr.max_positions, "bert: position embeddings (default: --seq-len; 512 for bert-base)")
      ->default_val(0);
  t->add_option("--intermediate", tr.intermediate, "bert: the MLP's inner width (default: 4 x --hidden)")->default_val(0);
  t->add_option("--threads-per-stage", tr.threads_per_stage, "Torch threads on each rank's compute thread")->default_val(1);
  t->add_option("--budget", tr.budget,
                "Dynamic policies: the rank's limit on microbatches in flight (0 = the policy's default). greedy: "
                "activations its first chunk may hold (a microbatch admitted there holds one on each later chunk it "
                "reaches too), default stages - rank, + stages per chunk after the first")
      ->default_val(0);
  t->add_flag("--activation-checkpointing", tr.activation_checkpointing, "Recompute each chunk's forward in backward");
  t->add_option("--step-timeout", tr.step_timeout_s, "Seconds a step may take before the job stops")->default_val(600);
  t->add_option("--metrics", tr.metrics_path, "Write one JSON line per step");
  t->add_option("--trace", tr.trace_path, "Write the last step's measured timeline as Chrome trace JSON");
  t->add_option("--save-final", tr.save_final_path, "Write the final parameters (safetensors, global names)");
  t->add_option("--save-dir", tr.save_dir,
                "Write checkpoints here (step-N directories: parameters and AdamW state by global name, a manifest "
                "with SHA-256; atomic), after the last step and every --save-every steps");
  t->add_option("--save-every", tr.save_every, "With --save-dir: a checkpoint every N steps (0 = after the last only)")
      ->default_val(0);
  t->add_option("--keep-last", tr.keep_last, "With --save-dir: keep the newest K checkpoints (0 = all)")->default_val(0);
  t->add_option("--resume", tr.resume,
                "Resume from a checkpoint directory's newest valid checkpoint, or from one checkpoint (any layout's)");
  t->add_option("--init-from", tr.init_from,
                "Start from these weights (safetensors by global name, e.g. a --save-final file, or a checkpoint's "
                "parameters); fresh optimizer");
  t->add_option("--ranks-per-process", tr.ranks_per_process,
                 "Multi-process jobs: ranks (of stages x dp) of each process, e.g. 1,3 (default: spread evenly)");
  t->add_option("--join-timeout", tr.join_timeout_s, "Multi-process jobs: seconds for every process to join")->default_val(60);
  t->add_option("--heartbeat-timeout", tr.heartbeat_timeout_s,
                "Multi-process jobs: seconds another process may stay silent (stopped, frozen, cut off) before the job "
                "stops; each says something every second (0 = never, e.g. while a debugger holds one; else at least 1)")
      ->default_val(60);
  t->add_flag("--no-pipeline", tr.no_pipeline, "Train the same model unpartitioned in one thread: the reference (no checkpoints; --stages 1 computes the same and takes them)");
  t->add_flag("--unit-cost-plan", tr.unit_cost_plan,
              "Keep the plan generated on unit costs (by default zb-h1/zbv are rebuilt on the median costs measured in step 1, then in steps 1-2)");
  t->add_flag("--late-input-grad", tr.late_input_grad,
              "Run each full backward B as one block, its input gradient sent after its weight gradients (the "
              "textbook 1F1B); by default B sends it first, so the stage before starts earlier. Same numbers");
  t->add_flag("--no-w-fill", tr.no_w_fill,
              "Run each rank's plan strictly in order; by default a rank whose next action waits for an input runs "
              "its next weight gradient (W, zb-h1/zbv) early when that W is ready, pausing it once for an F or I "
              "that arrives meanwhile. Same numbers");
}

void add_train(CLI::App& app, train_cli& c) {
  auto* t = c.command = app.add_subcommand("train",
                               "Train a model (the built-in GPT, or one a program registered) with pipeline parallelism: "
                               "every stage, chunk and optimizer is an actor; the schedule decides the order of their "
                               "messages.");
  t->footer(train_footer());
  add_train_job_flags(t, c.tr);
  add_train_number_flags(t, c.tr);
  add_train_run_flags(t, c.tr);
  add_log_options(t, c.t_log,
                  "Also append the log to this file, timestamped (stderr then keeps warnings and errors; the progress "
                  "and the summary stay where they are)");
}

int run_train_cli(train_cli& c, std::ostream& out, std::ostream& err, logging_scope& logging) {
  check_train_files(c.tr, c.t_log.file);  // the log appended to a data or plan file spoilt it
  logging.setup(resolve_log_flags(c.t_log));
  // Under actorpipe launch stderr is a pipe, and launch says whether its own is a terminal.
  const char* launched_on_terminal = std::getenv(kProgressTerminalVariable);
  c.tr.interactive_progress = &err == &std::cerr && (isatty(STDERR_FILENO) || (launched_on_terminal &&
                                                                               std::strcmp(launched_on_terminal, "1") == 0));
  return run_train(c.tr, out, err);
}
#endif

// launch: its options, and what it runs.
struct launch_cli {
  launch_options la;
  log_flags l_log;
  CLI::App* command = nullptr;
};

void add_launch(CLI::App& app, launch_cli& c) {
  auto& la = c.la;
  auto& l_log = c.l_log;
  auto* l = c.command = app.add_subcommand("launch",
                               "Start this node's processes of a multi-process job and watch them (like torchrun): each "
                               "runs the actorpipe command given after --, told its place in the job by environment "
                               "variables.");
  l->footer(
      "\nThe command each process runs, and its flags, come last, after --:\n"
      "  actorpipe launch --nproc-per-node N [OPTIONS] -- COMMAND [FLAGS...]\n"
      "\nExamples:\n"
      "  # one node, 4 processes (ranks 0-3):\n"
      "  actorpipe launch --nproc-per-node 4 -- train --stages 4 --microbatches 8\n"
      "\n"
      "  # two nodes with 4 processes each (ranks 0-3 on node 0, 4-7 on node 1). Every node needs the same\n"
      "  # job token: make one once (openssl rand -hex 32) and export it on both nodes first.\n"
      "  export ACTORPIPE_JOB_TOKEN=<the token>                                  # on both nodes\n"
      "  actorpipe launch --nproc-per-node 4 --nnodes 2 --node-rank 0 --master-addr 10.0.0.1 -- train --stages 8\n"
      "  actorpipe launch --nproc-per-node 4 --nnodes 2 --node-rank 1 --master-addr 10.0.0.1 -- train --stages 8\n"
      "  # (the first on 10.0.0.1, the node that hosts rank 0; the second on the other node)\n"
      "\nEach process gets RANK = node-rank x nproc-per-node + LOCAL_RANK, WORLD_SIZE = nnodes x nproc-per-node,\n"
      "LOCAL_RANK (0 .. nproc-per-node-1), LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT and ACTORPIPE_JOB_TOKEN\n"
      "(from the environment, or a new one when there is a single node; it is never printed).\n"
      "The processes write to this terminal. launch exits 0 when all exit 0. When one fails, the others get\n"
      "--grace seconds to exit (at most 2 s when it was refused, exit 2: a job that cannot form, a model that fails\n"
      "the same way in every run), then SIGTERM, then\n"
      "SIGKILL 5 s later, and launch exits with the first failure's code (128 + N for a process killed by\n"
      "signal N). Ctrl-C (SIGINT), SIGTERM and SIGHUP are passed on to the processes (train stops after its step in\n"
      "flight, with a checkpoint when it has --save-dir), SIGKILL following --stop-timeout seconds later; a\n"
      "second Ctrl-C sends SIGKILL at once.\n"
      "\nRecovery: with --max-restarts N, a failure stops the other processes and starts all of them again\n"
      "(ACTORPIPE_RESTART_COUNT=1, 2, ...); train then resumes from the newest valid checkpoint in its --save-dir,\n"
      "so the work lost is at most --save-every steps (twice that where a failure came while a checkpoint was\n"
      "still being written, as training goes on meanwhile). Each restart is logged with its cause; after N restarts\n"
      "launch exits with the last failure's code and the history of every attempt. A process that exits 2 was\n"
      "refused (bad flags, config, input files or checkpoint, or a job that cannot form: the master port taken,\n"
      "a wrong job token or world size; failures while running exit 1): that is not restarted, as it would be\n"
      "refused again. With several nodes, each node's launch restarts its own processes (a failure anywhere\n"
      "fails every process of the job).\n"
      "  actorpipe launch --nproc-per-node 4 --max-restarts 3 -- train --stages 4 --save-dir ckpt --save-every 50\n"
      "\nOutput: the processes' lines pass through launch, each prefixed with its process index, '[p1] ...' (their\n"
      "own log lines already say '[p1 r2-3] actorpipe: ...': process 1, pipeline ranks 2-3, and keep just that). On a\n"
      "terminal a process's progress line is redrawn on the last row, below the other lines. --log-level applies to\n"
      "launch's own lines and is passed on to the processes (ACTORPIPE_LOG_LEVEL) unless their command sets its own;\n"
      "--log-file appends launch's lines and every process's prefixed lines to a file, timestamped, and they stay on\n"
      "the terminal.");
  l->add_option("--nproc-per-node", la.nproc_per_node, "Processes to start on this node (usually one per GPU)")
      ->required();
  l->add_option("--nnodes", la.nnodes, "Nodes in the job, each running its own actorpipe launch [default: 1]");
  l->add_option("--node-rank", la.node_rank, "This node's index, 0 .. nnodes-1 [default: 0]");
  l->add_option("--master-addr", la.master_addr,
                "Address of the node that runs rank 0 (its supervisor listens there) [default: " +
                    std::string(default_master_addr) + "]");
  l->add_option("--master-port", la.master_port,
                "Port of rank 0's supervisor [default: " + std::to_string(default_master_port) + "]");
  l->add_option("--grace", la.grace_s, "Seconds the other processes get to exit after one fails [default: 15]");
  l->add_option("--stop-timeout", la.stop_timeout_s,
                "Seconds the processes get after a Ctrl-C or SIGTERM passed on, before SIGKILL: train finishes its "
                "step in flight and saves a checkpoint meanwhile [default: 30]");
  l->add_option("--max-restarts", la.max_restarts,
                "When a process fails, stop the rest and start the job again, up to N times; train resumes from the "
                "newest valid checkpoint in its --save-dir; a refused command (exit 2) is not restarted [default: 0]");
  add_log_options(l, l_log, "Also append launch's lines and every process's lines to this file, timestamped");
  l->add_option("command", la.command, "The actorpipe command each process runs, with its flags, after --");
}

int run_launch_cli(CLI::App& app, launch_cli& c, int argc, const char* const* argv, std::ostream& err,
                   logging_scope& logging) {
  auto& la = c.la;
  const log_options launch_log = resolve_log_flags(c.l_log);
  check_pipe_has_reader("--log-file", launch_log.file);  // its open waited for a reader for ever
  logging.setup(launch_log);
  if (*c.l_log.level_option) la.env.push_back(std::string("ACTORPIPE_LOG_LEVEL=") + log_level_name(launch_log.level));
  la.terminal = &err == &std::cerr && isatty(STDERR_FILENO);
  std::string names;
  bool known = la.command.empty() || la.command.front() == "launch";  // run_launch explains those
  for (const auto* sub : app.get_subcommands({}))
    if (sub != c.command) {
      known = known || sub->get_name() == la.command.front();
      names += (names.empty() ? "" : ", ") + sub->get_name();
    }
  if (!known) throw std::invalid_argument("unknown command '" + la.command.front() + "' after -- (commands: " + names + ")");
  la.program = running_executable(argv[0]);
  la.program_arguments = loader_arguments(argc, argv);
  const int code = run_launch(la, err);
  // The job's lines that --log-file lost (a full disk) are a failure of launch's (said when it
  // happened), where the job itself succeeded.
  flush_log();
  return code == 0 && !log_file_failure().empty() ? exit_failed : code;
}

// doctor: what it checks beyond the machine itself.
struct doctor_cli {
  doctor_options o;
  CLI::App* command = nullptr;
};

void add_doctor(CLI::App& app, doctor_cli& c) {
  auto* d = c.command = app.add_subcommand(
      "doctor",
      "Check this machine before a run: CPUs and memory, the kernels and how fast one thread multiplies, UCX between "
      "two workers, GPUs and NCCL, what a multi-process job needs (open files, the master port, the job token) and "
      "the output directory; one line each: ok, note, warn (slower than it could be) or FAIL (a run would stop).");
  d->footer(
      "\nExit status: 0, or 1 when a check FAILs (2 for a bad flag).\n"
      "\nExamples:\n"
      "  actorpipe doctor\n"
      "  actorpipe doctor --dir /data/ckpt --nproc-per-node 8 --master-port 29600   # what a job will use");
  d->add_option("--dir", c.o.dir, "Where the run's checkpoints and outputs go: exists, takes writes, free space [default: .]");
  d->add_option("--master-addr", c.o.master_addr,
                "The address rank 0's supervisor listens on [default: $MASTER_ADDR, else " +
                    std::string(default_master_addr) + "]");
  // 0 in doctor_options means "not given": a 0 given is refused as launch refuses it.
  d->add_option("--master-port", c.o.master_port,
                "Its port, checked free when the address is this host's [default: $MASTER_PORT, else " +
                    std::to_string(default_master_port) + "]")
      ->check(CLI::Validator([](std::string& t) { return zero_text(t) ? "--master-port=" + t + " must be in 1..65535" : ""; }, ""));
  d->add_option("--nproc-per-node", c.o.nproc_per_node,
                "Check that launch can start this many processes here (open files)")
      ->check(CLI::Validator([](std::string& t) { return zero_text(t) ? "--nproc-per-node=" + t + " must be >= 1" : ""; }, ""));
}

// The first flag of `argv` (from 2, before "--") that command `sub` does not know, with the
// nearest flag it does ("--stage": "--stages"), or "" when every flag is known. CLI11's own
// message listed what was left over, last first ("not expected: 3 --stage").
std::string unknown_flag_text(CLI::App& app, int argc, const char* const* argv) {
  if (argc < 3) return "";
  CLI::App* sub = nullptr;
  for (CLI::App* s : app.get_subcommands({}))
    if (s->get_name() == argv[1]) sub = s;
  if (sub == nullptr) return "";
  for (int k = 2; k < argc; ++k) {
    std::string arg = argv[k];
    if (arg == "--") break;
    if (arg.size() < 2 || arg[0] != '-' || (arg[1] >= '0' && arg[1] <= '9') || arg[1] == '.') continue;  // values
    const std::string name = arg.substr(0, arg.find('='));
    if (sub->get_option_no_throw(name) != nullptr) continue;
    std::string nearest;
    std::size_t best = 3;  // at most two edits away
    for (const CLI::Option* opt : sub->get_options())
      for (const std::string& known : opt->get_lnames()) {
        const std::size_t d = edit_distance(name, "--" + known);
        if (d < best) best = d, nearest = "--" + known;
      }
    // Megatron-LM's names for train's flags (a user who comes from it types them).
    static const std::pair<const char*, const char*> megatron[] = {
        {"--train-iters", "--steps"},
        {"--num-layers", "--layers"},
        {"--hidden-size", "--hidden"},
        {"--num-attention-heads", "--heads"},
        {"--seq-length", "--seq-len"},
        {"--pipeline-model-parallel-size", "--stages"},
        {"--virtual-pipeline-model-parallel-size", "--chunks"},
        {"--num-layers-per-virtual-pipeline-stage", "--chunks"},
        {"--global-batch-size", "--batch-size (per replica), or --set global_batch_size=N"},
        {"--lr-warmup-iters", "--warmup-steps"},
        {"--clip-grad", "--grad-clip"},
        {"--adam-epsilon", "--adam-eps"},
        {"--lr-decay-iters", "--lr-decay-steps"},
        {"--min-lr", "--min-lr-ratio (a fraction of --lr: Megatron's --min-lr is --lr x --min-lr-ratio)"},
        {"--save-interval", "--save-every"},
        {"--load", "--resume"},
        {"--save", "--save-dir"},
        {"--split", "--eval-split F (the last F of --data-file held out; or --eval-file)"},
        {"--data-path", "--data-file PREFIX.bin (a Megatron dataset: the PREFIX.idx beside it is read; a blend: "
                        "--data-file W1 A.bin W2 B.bin)"}};
    if (sub->get_name() == "train")
      for (const auto& [theirs, ours] : megatron)
        if (name == theirs) nearest = ours;
    std::string text = "unknown flag '" + name + "'";
    if (!nearest.empty()) text += " (did you mean " + nearest + "?)";
    // A train flag given to launch: it belongs to the command launch runs.
    if (sub->get_name() == "launch")
      for (CLI::App* s : app.get_subcommands({}))
        if (s->get_name() == "train" && s->get_option_no_throw(name) != nullptr)
          text += "; " + name + " is a flag of train: put it after --, with the command";
    return text;
  }
  return "";
}

// An unknown command, or flags CLI11 refuses: one error line, exit 2. Help: printed, exit 0.
// nullopt when the command line parsed.
std::optional<int> parse_command_line(CLI::App& app, int argc, const char* const* argv, std::ostream& out,
                                      std::ostream& err) {
  if (argc > 1 && argv[1][0] != '-') {
    std::string names;
    bool known = false;
    for (const auto* sub : app.get_subcommands({})) {
      known = known || sub->get_name() == argv[1];
      names += (names.empty() ? "" : ", ") + sub->get_name();
    }
    if (!known) {
      err << "actorpipe: error: unknown command '" << shown_text(argv[1], 200) << "' (commands: " << names << "; see --help)\n";
      return exit_refused;
    }
  }
  // Help or the version on an output that takes it not (/dev/full, closed): exit 1, said.
  const auto shown = [&out, &err](int code) {
    const write_signals_ignored no_sigpipe;
    errno = 0;
    if (out.flush()) return code;
    err << "actorpipe: error: could not write to standard output" << (errno ? std::string(" (") + std::strerror(errno) + ")" : "")
        << '\n';
    return exit_failed;
  };
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return shown(app.exit(e, out, err));
  } catch (const CLI::CallForAllHelp& e) {
    return shown(app.exit(e, out, err));
  } catch (const CLI::CallForVersion& e) {
    return shown(app.exit(e, out, err));
  } catch (const CLI::ParseError& e) {
    std::string what = e.what();
    if (what.find("subcommand") != std::string::npos && what.find("required") != std::string::npos) {
      // A flag before any command ("actorpipe -V") is no missing command.
      const bool flag = argc > 1 && argv[1][0] == '-';
      what = flag ? "unknown flag '" + std::string(argv[1]) + "' (actorpipe's own are --help and --version; a command's "
                    "go after it: actorpipe train --help)"
                  : "missing command (try: actorpipe train, actorpipe simulate, actorpipe launch, actorpipe doctor, or "
                    "actorpipe --help)";
    }
    const bool in_command = argc > 1 && (std::string(argv[1]) == "simulate" || std::string(argv[1]) == "train" ||
                                         std::string(argv[1]) == "launch" || std::string(argv[1]) == "doctor");
    // CLI11's "Could not convert: --stages = 9999999999": digits the value-text check passed
    // (decimal, within 64 bits) that the flag's own type cannot hold.
    const std::string convert = "Could not convert: ";
    if (what.rfind(convert, 0) == 0) {
      const std::string rest = what.substr(convert.size());
      const auto eq = rest.find(" = ");
      if (eq != std::string::npos)
        what = rest.substr(0, eq) + "=" + rest.substr(eq + 3) + " is out of range for this flag (at most 2147483647)";
    }
    // A validator's message that names its flag itself, after CLI11's own "--flag: ".
    if (const auto colon = what.find(": "); colon != std::string::npos && what.rfind("--", 0) == 0 &&
                                            what.compare(colon + 2, colon + 1, what.substr(0, colon) + "=") == 0)
      what = what.substr(colon + 2);
    // CLI11's "--microbatches: At Most 1 required but received 2": a flag given twice.
    const std::string twice = ": At Most 1 required but received ";
    if (const auto at = what.find(twice); at != std::string::npos)
      what = what.substr(0, at) + " is given " + what.substr(at + twice.size()) + " times: give it once";
    if (dynamic_cast<const CLI::ExtrasError*>(&e)) {
      if (const std::string unknown = unknown_flag_text(app, argc, argv); !unknown.empty())
        what = unknown;
      else if (argc > 1 && std::string(argv[1]) == "launch")
        what += " (the command to run and its flags go after --)";
    }
    err << "actorpipe" << (in_command ? std::string(" ") + argv[1] : std::string()) << ": error: "
        << shown_text(what, what.size()) << '\n';
    return exit_refused;
  }
  return std::nullopt;
}

// Every option's value, before CLI11 converts it: an empty text (CLI11 gives the default for
// it, so "--steps ''" ran 60 steps), and numbers in a form its conversion takes otherwise than
// written (integers with base 0: "010" is 8 and "0x3" 3; hex floats: "0x10" is 16).
void check_value_texts(CLI::App& app) {
  for (CLI::App* sub : app.get_subcommands({})) check_value_texts(*sub);
  for (CLI::Option* opt : app.get_options()) {
    if (!opt->nonpositional() || opt->get_type_size() == 0) continue;  // flags, and launch's command after --
    const std::string named = opt->get_type_name();  // "INT", or "INT:<a validator's description>"
    const std::string type = named.substr(0, named.find(':'));
    const bool integer = type == "INT" || type == "UINT", real = type == "FLOAT";
    opt->transform(CLI::Validator(
        [integer, real, type](std::string& text) -> std::string {
          if (text.empty()) return "must not be empty (leave the flag out for its default)";
          // "--svg --print-plan" wrote a file named --print-plan, and dropped the flag.
          if (!integer && !real && text.size() > 2 && text.compare(0, 2, "--") == 0)
            return "needs a value, and got the flag '" + text + "' (a file of that name: write ./" + text + ")";
          if (integer && !decimal_integer_text(text)) return "must be a whole number in decimal digits, got '" + text + "'";
          if (integer) {
            // Past 64 bits (CLI11 would clamp it, reading 2^64 as 2^64 - 1).
            errno = 0;
            if (type == "UINT" ? (text[0] != '-' && (std::strtoull(text.c_str(), nullptr, 10), errno == ERANGE))
                               : (std::strtoll(text.c_str(), nullptr, 10), errno == ERANGE))
              return text + " is out of range (" + (type == "UINT" ? "0.." + std::to_string(ULLONG_MAX) : "64-bit") + ")";
            // As written: "010" is ten.
            const std::size_t sign = text[0] == '+' || text[0] == '-' ? 1 : 0;
            const std::size_t zeros = std::min(text.find_first_not_of('0', sign), text.size() - 1) - sign;
            text.erase(sign, zeros);
          }
          if (real && !decimal_number_text(text) && text != "inf" && text != "-inf" && text != "nan")
            return "must be a decimal number, got '" + text + "'";
          if (real && decimal_number_text(text)) {  // 1e-400 read as 0 ("--grad-clip 1e-400": no clipping)
            errno = 0;
            const double v = std::strtod(text.c_str(), nullptr);
            if (errno == ERANGE && (v == 0 || std::isinf(v)))
              return text + " is out of a double's range (it reads as " + (v == 0 ? "0" : "inf") + ")";
          }
          return "";
        },
        "", "value text"));
  }
}

// The whole command line: its commands, and what each one's flags fill in.
struct command_line {
  CLI::App app{"actorpipe: pipeline-parallel training on the actor model.\n"
               "Schedules are data: print, validate, simulate and draw them before you train."};
  simulate_cli simulate;
#ifdef ACTORPIPE_WITH_TORCH
  train_cli train;
#endif
  launch_cli launch;
  doctor_cli doctor;

  command_line() {
    app.name("actorpipe");
    app.set_version_flag("--version", "actorpipe " ACTORPIPE_VERSION_STRING);
    app.require_subcommand(1);
    add_simulate(app, simulate);
#ifdef ACTORPIPE_WITH_TORCH
    add_train(app, train);
#endif
    add_launch(app, launch);
    add_doctor(app, doctor);
    check_value_texts(app);
  }
};

// The command after launch's --, parsed as each process will parse it: a typo in a flag is
// one error before any process starts (it was one per process, among launch's own lines).
// Returns the exit code of a command line refused (its error written to `err`).
std::optional<int> refused_launched_command(const char* argv0, const std::vector<std::string>& command, std::ostream& err) {
  command_line line;
  const auto commands = line.app.get_subcommands({});
  if (command.empty() || command.front() == "launch" ||
      std::none_of(commands.begin(), commands.end(), [&](const CLI::App* c) { return c->get_name() == command.front(); }))
    return std::nullopt;  // run_launch names what it cannot run
  std::vector<const char*> argv{argv0};
  for (const auto& a : command) argv.push_back(a.c_str());
  std::ostringstream help;
  const auto code = parse_command_line(line.app, static_cast<int>(argv.size()), argv.data(), help, err);
  return code && *code != 0 ? code : std::nullopt;
}

}  // namespace

int cli_main(int argc, const char* const* argv, std::ostream& out, std::ostream& err) {
  if (argc < 1 || argv == nullptr || argv[0] == nullptr) {  // an exec with no argv[0] (CLI11 threw length_error)
    err << "actorpipe: error: no program name (argv[0]) to parse the command line from\n";
    return exit_refused;
  }
  // A standard stream the parent closed (cron's >&-): the first file the run opens took its
  // descriptor, and --log-file was refused as "this process's standard output". /dev/null
  // takes it instead; a report that had nowhere to go is still a failure (below).
  bool stdout_closed = false;
  if (&out == &std::cout)
    for (int fd = 0; fd <= 2; ++fd)
      if (::fcntl(fd, F_GETFD) == -1 && errno == EBADF)
        stdout_closed = ::open("/dev/null", fd == 0 ? O_RDONLY : O_WRONLY) == 1 || stdout_closed;
  command_line line;
  CLI::App& app = line.app;
  simulate_cli& simulate = line.simulate;
#ifdef ACTORPIPE_WITH_TORCH
  train_cli& train = line.train;
#endif
  launch_cli& launch = line.launch;
  doctor_cli& doctor = line.doctor;
  if (auto code = parse_command_line(app, argc, argv, out, err)) return *code;
  // A write past the file-size limit (ulimit -f, a batch scheduler's) fails with EFBIG, which
  // the writer names ("File too large"); SIGXFSZ killed the process (153), every output lost.
  // A reader that goes away (`simulate ... | head`): the write fails (exit 1, said), where
  // SIGPIPE ended the process without a word (141). Both put back when cli_main returns.
  const write_signals_ignored no_write_signals;

  logging_scope logging;
  // A report that could not be written (stdout on a full disk, /dev/full) is a failure, not
  // exit 0 with the report silently lost.
  const auto written = [&out, stdout_closed](int code) {
    if (code != 0) return code;
    if (stdout_closed) throw std::runtime_error("could not write the report to standard output: it is closed");
    errno = 0;
    if (out.flush()) return code;
    // Why: the write that failed set errno long ago; one more byte says it again (/dev/full: No
    // space left on device).
    if (errno == 0 && &out == &std::cout) {
      [[maybe_unused]] const ssize_t again = ::write(STDOUT_FILENO, "\n", 1);  // fails, setting errno
    }
    throw std::runtime_error(std::string("could not write the report to standard output") +
                             (errno ? std::string(" (") + std::strerror(errno) + ")" : std::string()));
  };
  try {
#ifdef ACTORPIPE_WITH_TORCH
    if (train.command->parsed()) return written(run_train_cli(train, out, err, logging));
#endif
    if (launch.command->parsed()) {
      if (auto code = refused_launched_command(argv[0], launch.la.command, err)) return *code;
      return run_launch_cli(app, launch, argc, argv, err, logging);
    }
    if (simulate.command->parsed()) return written(run_simulate_cli(simulate, out));
    if (doctor.command->parsed()) return written(run_doctor(doctor.o, out));
  } catch (const std::exception& e) {
#ifdef ACTORPIPE_WITH_TORCH
    std::string what = error_text(e);  // a LibTorch error without its C++ backtrace
#else
    std::string what = e.what();
#endif
    std::replace(what.begin(), what.end(), '\n', ' ');  // one line, whatever the source
    // Control bytes of a file's or a flag's text as \xNN: a NUL cut the line ("unknown schedule
    // 'zbv" from a config's "zbv\u0000x"), an ESC reached the terminal.
    what = shown_text(what, what.size());
    const char* command = simulate.command->parsed()  ? "simulate"
                          : launch.command->parsed()  ? "launch"
                          : doctor.command->parsed()  ? "doctor"
                                                      : "train";
    const std::string line = std::string("actorpipe ") + command + ": error: " + what;
    if (&err == &std::cerr) end_terminal_line();  // after a progress line drawn in place, on a row of its own
    // In a job, the process and its ranks first, as on its log lines.
    err << log_prefix_text() << line << '\n';
    log_to_file(log_level::error, std::string("actorpipe ") + command + ": " + what);  // the file's pattern adds the level
    // Bad input (std::invalid_argument) is refused; anything else failed while it ran.
    return dynamic_cast<const std::invalid_argument*>(&e) ? exit_refused : exit_failed;
  }
  return 0;
}

}  // namespace actorpipe
