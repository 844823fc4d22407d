// `actorpipe train`: the main job. Builds the run from a job config, flags and overrides,
// trains with the actor runtime (or the --no-pipeline reference), shows progress and a
// summary against the simulator, and writes metrics, a trace and the final parameters.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <optional>
#include <string>
#include <vector>

namespace actorpipe {

struct train_cli_options {
  std::string config_path;
  std::vector<std::string> overrides;  // KEY=VALUE on the job config
  std::optional<std::string> schedule;
  std::string schedule_file;
  std::optional<std::string> model;      // a registered model (register_model); gpt is built in
  std::optional<std::string> partition;  // empty: the model's default
  std::optional<int> stages, chunks, microbatches, microbatch_size, batch_size, steps;
  std::optional<int> dp, zero;    // data-parallel replicas, ZeRO stage
  std::optional<double> bucket_mb;  // gradient bucket size
  std::optional<int> layers, hidden, heads, seq_len, vocab, warmup_steps, lr_decay_steps;
  std::optional<std::uint64_t> seed;
  std::optional<double> lr, grad_clip, weight_decay, min_lr_ratio, adam_beta1, adam_beta2, adam_eps;
  std::optional<std::string> lr_decay_style;
  std::string data = "synthetic";  // --data; a file comes through --data-file
  std::vector<std::string> data_file;  // one file, or a blend: weight file pairs, or files (parse_data_files)
  // The built-in bert (GLUE TSV): eval file, vocabulary, columns, sizes; evaluation cadence.
  std::string eval_file, vocab_file, text_columns;
  bool no_lower_case = false;
  int max_positions = 0, intermediate = 0, eval_every = 0, eval_microbatches = 0;
  double eval_split = 0;  // gpt: the share of --data-file held out for evaluation
  int threads_per_stage = 1;
  int budget = 0;
  bool activation_checkpointing = false;
  double step_timeout_s = 600;
  std::string metrics_path, trace_path, save_final_path;
  std::string save_dir, resume, init_from;  // checkpoints, fine-tuning
  int save_every = 0, keep_last = 0;
  bool no_pipeline = false;
  bool unit_cost_plan = false;  // keep the generated plan (no rebuild on measured costs)
  bool late_input_grad = false;  // B sends its input gradient after its weight gradients
  bool no_w_fill = false;        // run each rank's plan strictly in order
  bool interactive_progress = false;  // redraw one progress line (a terminal) or print a line per step
  // Multi-process jobs (WORLD_SIZE > 1 from actorpipe launch, torchrun, srun or mpirun).
  std::string ranks_per_process;  // "1,3": ranks of each process; empty: spread evenly
  double join_timeout_s = 60;
  double heartbeat_timeout_s = 60;
};

// Throws std::invalid_argument / std::runtime_error with a one-line message on bad input or
// a failed run. SIGINT or SIGTERM during the run stops it after the step in flight (a
// checkpoint of that step first, with --save-dir; the summary and the files as after a full
// run); a second one ends the process at once. Returns the exit code: 0, or 128 + the signal
// for a run a signal stopped early.
int run_train(const train_cli_options& options, std::ostream& out, std::ostream& progress);

// The files a run writes (--metrics, --trace, --save-final and `log_file`, --log-file's) against
// each other and against those it reads: std::invalid_argument naming both flags where two are
// one file. Called before the log is opened (run_train checks its outputs again).
void check_train_files(const train_cli_options& options, const std::string& log_file);

// Whether a SIGHUP asks this process to stop: it was not ignored (nohup) when the process
// began, as recorded before any library's initialiser ran (UCX takes SIGHUP when it loads).
bool hangup_is_a_stop();

// Lets SIGINT and SIGTERM through (the actorpipe executable holds them from its first
// initialiser: apps/main.cpp); a pending one is delivered now.
void release_stop_signals();

// While train sets up, SIGINT and SIGTERM are held (the run's handler takes one when it
// starts). A setup that waits on something that may never come (a pipe's other end, a scan of
// a huge file) kept them held for ever: from this call on, one held for a second ends the
// process at once (exit 128 + the signal, nothing was trained), until release_stop_signals.
void watch_held_stop_signals();

}  // namespace actorpipe
