// The rank grid of a job: D replicas (data parallel) of a P-rank pipeline. Rank
// r = replica * P + pipeline_rank, so each pipeline is a run of consecutive ranks (a process
// with P ranks holds a whole pipeline) and a data-parallel group is every P-th rank. Virtual
// stages are numbered the same way: id = replica * S + virtual stage (S = P x V per pipeline).
#pragma once

#include <string>
#include <vector>

namespace actorpipe {

struct rank_grid {
  int pipeline_ranks = 1;  // P
  int replicas = 1;        // D

  int world() const { return pipeline_ranks * replicas; }
  int rank(int replica, int pipeline_rank) const { return replica * pipeline_ranks + pipeline_rank; }
  int replica_of(int rank) const { return rank / pipeline_ranks; }
  int pipeline_rank_of(int rank) const { return rank % pipeline_ranks; }
  std::vector<int> pipeline(int replica) const;             // the P ranks of one replica
  std::vector<int> data_parallel_group(int pipeline_rank) const;  // the D ranks of one position
  // "pipelines: 0-1 | 2-3; data-parallel groups: 0,2 | 1,3" (one line).
  std::string describe() const;
};

// Checks P >= 1 and D >= 1 (std::invalid_argument naming the option and value).
rank_grid make_rank_grid(int pipeline_ranks, int replicas);

}  // namespace actorpipe
