// The names virtual stages save their tensors under (checkpoints, --save-final). Two stages of
// one replica that hold one name would meet only in the saved files ("duplicate tensor name"),
// after the training: a run refuses them before it starts, in one process (prepare_run) and
// across processes (process 0, as the job forms: each process sends the names of its own).
// No torch here.
#pragma once

#include <string>
#include <vector>

namespace actorpipe {

struct held_name {
  std::string name;
  int replica = 0;  // data-parallel replica (each holds every name once)
  int stage = 0;    // virtual stage of the replica's pipeline
  int process = 0;
  bool buffer = false;  // a buffer, not a parameter
};

// The first name that two virtual stages of one replica hold, as an error ("" where none):
// "parameter 'p.w' is held by virtual stages 1 (process 0) and 2 (process 1): two layers give
// their parameters the same names (give them distinct param prefixes)". Processes are named
// where `processes` > 1, replicas where `replicas` > 1.
std::string held_name_clash(const std::vector<held_name>& held, int replicas, int processes);

}  // namespace actorpipe
