// The rank grid: which ranks form a pipeline, which a data-parallel group.
#include "core/topology.hpp"

#include <stdexcept>

namespace actorpipe {

std::vector<int> rank_grid::pipeline(int replica) const {
  std::vector<int> out;
  for (int p = 0; p < pipeline_ranks; ++p) out.push_back(rank(replica, p));
  return out;
}

std::vector<int> rank_grid::data_parallel_group(int pipeline_rank) const {
  std::vector<int> out;
  for (int d = 0; d < replicas; ++d) out.push_back(rank(d, pipeline_rank));
  return out;
}

namespace {
std::string join(const std::vector<int>& v, const char* sep) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) s += (i ? sep : "") + std::to_string(v[i]);
  return s;
}
std::string span(const std::vector<int>& v) {
  return v.size() == 1 ? std::to_string(v[0]) : std::to_string(v.front()) + "-" + std::to_string(v.back());
}
}  // namespace

std::string rank_grid::describe() const {
  std::string pipes, groups;
  for (int d = 0; d < replicas; ++d) pipes += (d ? " | " : "") + span(pipeline(d));
  for (int p = 0; p < pipeline_ranks; ++p) groups += (p ? " | " : "") + join(data_parallel_group(p), ",");
  return "pipelines (ranks): " + pipes + "; data-parallel groups: " + groups;
}

rank_grid make_rank_grid(int pipeline_ranks, int replicas) {
  if (pipeline_ranks < 1) throw std::invalid_argument("--stages=" + std::to_string(pipeline_ranks) + " must be >= 1");
  if (replicas < 1) throw std::invalid_argument("--dp=" + std::to_string(replicas) + " must be >= 1");
  return {pipeline_ranks, replicas};
}

}  // namespace actorpipe
