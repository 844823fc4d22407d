// Entry point of the actor runtime: builds the run (partition, plan or policy, chunk runners,
// optimizers, data; make_chunk replaces the GPT, e.g. by a fixed-cost stage), spawns the actors in one actor system, trains, and returns the metrics,
// the measured timeline and the final parameters. No torch or CAF in this header.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "core/train/run_setup.hpp"
#include "core/train/train_options.hpp"

namespace actorpipe {

// A multi-process job as one of its processes sees it. processes == 1: the whole job here.
struct process_group {
  int processes = 1;
  int process = 0;                        // 0 hosts rank 0 and the supervisor
  std::string master_addr = "127.0.0.1";  // process 0 listens here (binds this address)
  int master_port = 29500;
  std::string token;                      // the job token (ACTORPIPE_JOB_TOKEN)
  double join_timeout_s = 60;             // how long the job may take to form
  std::vector<int> ranks_per_process;     // empty: spread evenly
};

// Throws std::invalid_argument for bad options (naming the option and value) and
// std::runtime_error when the run fails (an action threw, an actor died, a step timed out, a
// process was lost). In a multi-process job every process calls this with the same options;
// process 0 returns the metrics, timeline and (options.gather_parameters) every parameter;
// the others return when process 0 says the run is over, with empty metrics.
train_result run_pipeline(const train_options& options, const std::function<void(const step_metrics&)>& on_step = {},
                          const chunk_factory& make_chunk = {}, const process_group& group = {});

}  // namespace actorpipe
