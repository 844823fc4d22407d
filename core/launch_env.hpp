// Where a worker process learns its place in the job from what its launcher set: torchrun
// (RANK, WORLD_SIZE, LOCAL_RANK), srun (SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID) or mpirun
// (OMPI_COMM_WORLD_RANK, OMPI_COMM_WORLD_SIZE, OMPI_COMM_WORLD_LOCAL_RANK), plus MASTER_ADDR /
// MASTER_PORT for the supervisor's control port. No variables: a single process.
#pragma once

#include <functional>
#include <string>

#include "core/job_place.hpp"

namespace actorpipe {

// The job_place the variables give (processes = the world size, process = the rank; token and
// join timeout are not the launcher's to say), plus what only the launcher knows.
// How many times actorpipe launch --max-restarts has restarted the job (0 on the first
// attempt), like torchrun's TORCHELASTIC_RESTART_COUNT.
constexpr const char* kRestartCountVariable = "ACTORPIPE_RESTART_COUNT";

struct launch_env : job_place {
  int local_rank = 0;
  std::string launcher = "none";  // "torchrun", "slurm", "openmpi" or "none"
  std::string size_variable = "WORLD_SIZE";  // the variable the world size came from, for messages
  int restart_count = 0;          // ACTORPIPE_RESTART_COUNT, set by actorpipe launch
};

// torchrun's variables win over srun's, which win over mpirun's (srun may start torchrun).
// Throws std::invalid_argument naming the variable and its value: a missing partner
// ("RANK is set but WORLD_SIZE is not"), a non-integer, a rank outside [0, world size), a
// port outside 1..65535, a restart count that is not a non-negative integer.
launch_env read_launch_env(const std::function<const char*(const char*)>& getenv_fn, bool jobs_only = false);

// The same, from the process environment.
// jobs_only: MASTER_ADDR and MASTER_PORT are read only for a job of several processes (train
// alone has no use for them: an empty MASTER_PORT refused a one-process run); doctor reads them
// always.
launch_env read_launch_env(bool jobs_only = false);

}  // namespace actorpipe
