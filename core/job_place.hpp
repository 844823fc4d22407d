// One process's place in a multi-process job: how many processes, which one this is, where
// process 0 listens, and what proves membership. The launcher's variables fill it
// (core/launch_env.hpp), the runtime runs in it (actors/pipeline_runtime.hpp) and the control
// plane forms the job from it (actors/control_plane.hpp). No torch, no CAF.
#pragma once

#include <string>
#include <vector>

namespace actorpipe {

// Where process 0 listens unless the launcher says otherwise (torchrun's default port).
inline constexpr char default_master_addr[] = "127.0.0.1";
// The environment variable that carries a multi-process job's token to every process.
inline constexpr char job_token_variable[] = "ACTORPIPE_JOB_TOKEN";
constexpr int default_master_port = 29500;

// "host:port" as users write it: an IPv6 address in brackets ("[::1]:29500").
inline std::string endpoint_text(const std::string& host, int port) {
  const bool v6 = host.find(':') != std::string::npos && host.front() != '[';
  return (v6 ? "[" + host + "]" : host) + ":" + std::to_string(port);
}

struct job_place {
  int processes = 1;                              // WORLD_SIZE; 1: the whole job in this process
  int process = 0;                                // RANK; 0 hosts rank 0 and the supervisor
  std::string master_addr = default_master_addr;  // process 0 binds here; the others connect here
  int master_port = default_master_port;
  std::string token;                              // ACTORPIPE_JOB_TOKEN (never logged)
  double join_timeout_s = 60;                     // how long the job may take to form
  // Once it formed, how long another process may stay silent (stopped, frozen, cut off)
  // before the job stops; 0: never. Every process says something every second.
  double heartbeat_timeout_s = 60;
  std::vector<int> ranks_per_process;             // pipeline ranks per process; empty: spread evenly
  // Process 0: a mark of this run alone (train: what its --save-dir lock names); the others
  // get it as the job forms (train_options::after_join).
  std::string run_mark;
};

}  // namespace actorpipe
