// Entry point of the actor runtime: builds the run (partition, plan or policy, chunk runners,
// optimizers, data; make_chunk replaces the GPT, e.g. by a fixed-cost stage), spawns the actors in one actor system, trains, and returns the metrics,
// the measured timeline and the final parameters. No torch or CAF in this header.
#pragma once

#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/job_place.hpp"
#include "core/train/run_setup.hpp"
#include "core/train/train_options.hpp"

namespace actorpipe {

// A run that ended on a stop asked for (options.stop_signal, or another process's) the way a
// failure would: before every process of the job had joined (nothing was trained), or with a
// process lost while the job stopped (its launch SIGKILLed it at --stop-timeout). A stop, not a
// failure: train exits 128 + `signal` (launch --max-restarts does not restart it).
struct stopped_on_request : std::runtime_error {
  stopped_on_request(const std::string& what, int sig) : std::runtime_error(what), signal(sig) {}
  int signal;
};

// `place`: this process's place in the job (the default: the whole job in this process).
// Throws std::invalid_argument for bad options (naming the option and value) and
// std::runtime_error when the run fails (an action threw, an actor died, a step timed out, a
// process was lost). In a multi-process job every process calls this with the same options;
// process 0 returns the metrics, timeline and (options.gather_parameters) every parameter;
// the others return when process 0 says the run is over, with empty metrics.
// A model with eval data gets a forward-only pass through the same actors after the steps
// eval_due names (core/train/evaluation.hpp), reported to on_eval (process 0) and kept in
// train_result::evals.
// on_step and on_eval run on an actor's thread (not the caller's), one call at a time; one that
// throws stops the run with its message. With options.save_dir, process 0 holds the folder's
// lock (save_dir_lock) for the run unless the calling thread holds it already.
train_result run_pipeline(const train_options& options, const std::function<void(const step_metrics&)>& on_step = {},
                          const chunk_factory& make_chunk = {}, const job_place& place = {},
                          const std::function<void(const eval_record&)>& on_eval = {});

}  // namespace actorpipe
