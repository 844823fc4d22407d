// Reading the launcher's environment variables.
#include "core/launch_env.hpp"

#include <algorithm>
#include <climits>
#include <cstdlib>
#include <stdexcept>

namespace actorpipe {
namespace {

int parse_int(const char* name, const char* text) {
  const std::string given = text;
  const std::string s = given.size() > 1 && given[0] == '+' ? given.substr(1) : given;  // "+29600" is 29600
  bool digits = !s.empty();
  for (char c : s) digits = digits && c >= '0' && c <= '9';
  if (!digits) throw std::invalid_argument(std::string(name) + "='" + given + "' is not a non-negative integer");
  const std::size_t first = std::min(s.find_first_not_of('0'), s.size() - 1);  // "007" is 7
  if (s.size() - first > 10 || std::stoll(s.substr(first)) > INT_MAX)
    throw std::invalid_argument(std::string(name) + "=" + given + " is more than " + std::to_string(INT_MAX));
  return std::stoi(s.substr(first));
}

struct family {
  const char* launcher;
  const char* rank;
  const char* size;
  const char* local;
};

}  // namespace

launch_env read_launch_env(const std::function<const char*(const char*)>& env, bool jobs_only) {
  static const family families[] = {
      {"torchrun", "RANK", "WORLD_SIZE", "LOCAL_RANK"},
      {"slurm", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID"},
      {"openmpi", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK"},
  };
  launch_env out;
  for (const family& f : families) {
    const char* rank = env(f.rank);
    const char* size = env(f.size);
    if (!rank && !size) continue;
    if (!rank) throw std::invalid_argument(std::string(f.size) + " is set but " + f.rank + " is not");
    if (!size) throw std::invalid_argument(std::string(f.rank) + " is set but " + f.size + " is not");
    out.launcher = f.launcher;
    out.size_variable = f.size;
    out.process = parse_int(f.rank, rank);
    out.processes = parse_int(f.size, size);
    if (out.processes < 1) throw std::invalid_argument(std::string(f.size) + "=" + size + " must be >= 1");
    if (out.process >= out.processes)
      throw std::invalid_argument(std::string(f.rank) + "=" + rank + " is not below " + f.size + "=" + size);
    const char* local = env(f.local);
    out.local_rank = local ? parse_int(f.local, local) : out.process;
    break;
  }
  if (jobs_only && out.processes <= 1) {  // no job to find: its address is of no use here
    if (const char* restart = env(kRestartCountVariable)) out.restart_count = parse_int(kRestartCountVariable, restart);
    return out;
  }
  if (const char* addr = env("MASTER_ADDR")) {
    if (*addr == '\0') throw std::invalid_argument("MASTER_ADDR is set but empty");
    out.master_addr = addr;
  }
  if (const char* port = env("MASTER_PORT")) {
    out.master_port = parse_int("MASTER_PORT", port);
    if (out.master_port < 1 || out.master_port > 65535)
      throw std::invalid_argument(std::string("MASTER_PORT=") + port + " is not a port (1..65535)");
  }
  if (const char* restart = env(kRestartCountVariable)) out.restart_count = parse_int(kRestartCountVariable, restart);
  return out;
}

launch_env read_launch_env(bool jobs_only) {
  return read_launch_env([](const char* name) -> const char* { return std::getenv(name); }, jobs_only);
}

}  // namespace actorpipe
