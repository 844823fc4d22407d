// `actorpipe launch`: start this node's worker processes of a multi-process job (like torchrun),
// give each its place in the job through the environment, and watch them until they end.
#pragma once

#include <iosfwd>
#include <string>
#include <vector>

#include "core/job_place.hpp"

namespace actorpipe {

struct launch_options {
  int nproc_per_node = 1;                 // processes started on this node
  int nnodes = 1;                         // nodes in the job, each running one launch
  int node_rank = 0;                      // this node's index in [0, nnodes)
  std::string master_addr = default_master_addr;  // where rank 0's supervisor listens
  int master_port = default_master_port;
  double grace_s = 15;      // after a failure, how long the others may take to exit on their own
  double kill_after_s = 5;  // after launch's SIGTERM (a failure's grace over), how long before SIGKILL
  // After a SIGINT / SIGTERM passed on, how long before SIGKILL: train stops after its step in
  // flight and saves a checkpoint meanwhile.
  double stop_timeout_s = 30;
  // When a process fails, start this node's processes again, up to this many times (each
  // restart's processes see ACTORPIPE_RESTART_COUNT = 1, 2, ...; train then resumes from the
  // newest valid checkpoint in its --save-dir). A stop launch was told (SIGINT/SIGTERM) is
  // never restarted.
  int max_restarts = 0;
  std::string program;      // the executable every process runs; the CLI sets the running actorpipe
  // Arguments before the command: where the CLI was started through the dynamic loader
  // (program is then the loader), its options and actorpipe's path (core/proc_files.hpp).
  std::vector<std::string> program_arguments;
  std::vector<std::string> command;  // its arguments (an actorpipe subcommand and its flags)
  std::vector<std::string> env;      // KEY=VALUE set for every process too (e.g. ACTORPIPE_LOG_LEVEL)
  // Where the processes' output goes, a whole line at a time, each line prefixed "[pN] " with
  // the process index N (apps/process_output.hpp).
  int out_fd = 1, err_fd = 2;
  // err_fd is a terminal: the processes may redraw a progress line there (launch sets
  // ACTORPIPE_PROGRESS_TERMINAL=1 for them and keeps that line below the others).
  bool terminal = false;
};

// Set to 1 by launch for its processes when its stderr is a terminal (their stderr is a pipe).
constexpr const char* kProgressTerminalVariable = "ACTORPIPE_PROGRESS_TERMINAL";
// launch tells each attempt's processes which restart it is in kRestartCountVariable
// (core/launch_env.hpp).

// Validates the options, then starts nproc_per_node processes of `program command...`, each with
// RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT and
// ACTORPIPE_JOB_TOKEN set (the token from the environment, or a new one on a single node), and
// waits for all of them. Their stdout and stderr lines go to out_fd and err_fd, prefixed with
// the process index; launch's own lines (what it starts, which process failed, what it stops)
// go to `log` when the log level lets them (info: starting; warn: stopping; error: a failure),
// and to the log file when there is one. They never show the token.
// On the first failure the others get grace_s to exit, then SIGTERM, then SIGKILL; SIGINT and
// SIGTERM sent to launch are forwarded. With max_restarts, a failed attempt (every process
// ended) is followed by another, up to max_restarts times, each logged with its cause; the
// history of every attempt is logged when launch gives up. Returns 0 when every process of an
// attempt exits 0, else the last failure's exit code (128 + signal for a process killed by a
// signal, or for a signal that stopped launch). Every process is reaped before it returns.
// Throws std::invalid_argument for a bad option (one line naming the flag and its value) and
// std::runtime_error when the processes cannot be started; nothing keeps running then.
int run_launch(const launch_options& opt, std::ostream& log);

// Open files launch needs for `nproc_per_node` processes: each one's stdout and stderr come
// through a pipe (4 descriptors while the processes start, 2 after), plus launch's own.
unsigned long long launch_files_needed(int nproc_per_node);

// The absolute path of the running executable (/proc/self/exe), or argv0 when that cannot be
// read and argv0 names a path.
std::string running_executable(const std::string& argv0);

}  // namespace actorpipe
