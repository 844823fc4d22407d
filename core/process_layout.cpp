// process_layout: see process_layout.hpp.
#include "core/process_layout.hpp"

#include <algorithm>
#include <numeric>
#include <sstream>
#include <stdexcept>

namespace actorpipe {

namespace {
std::string join(const std::vector<int>& v) {
  std::string out;
  for (size_t i = 0; i < v.size(); ++i) out += (i ? "," : "") + std::to_string(v[i]);
  return out;
}
}  // namespace

std::vector<int> assign_ranks_to_processes(int ranks, int processes, const std::vector<int>& per_process,
                                           const std::string& ranks_text) {
  const std::string job_ranks = ranks_text.empty() ? "--stages=" + std::to_string(ranks) : ranks_text;
  if (processes < 1) throw std::invalid_argument("WORLD_SIZE=" + std::to_string(processes) + " must be >= 1");
  std::vector<int> counts = per_process;
  if (counts.empty()) {
    if (processes > ranks)
      throw std::invalid_argument("WORLD_SIZE=" + std::to_string(processes) + " processes but the job has " + job_ranks +
                                  " ranks: every process needs at least one rank");
    for (int p = 0; p < processes; ++p) counts.push_back(ranks / processes + (p < ranks % processes ? 1 : 0));
  } else {
    if (static_cast<int>(counts.size()) != processes)
      throw std::invalid_argument("--ranks-per-process=" + join(counts) + " has " + std::to_string(counts.size()) +
                                  (counts.size() == 1 ? " entry" : " entries") + " but the job has WORLD_SIZE=" +
                                  std::to_string(processes) + (processes == 1 ? " process" : " processes"));
    for (int c : counts)
      if (c < 1) throw std::invalid_argument("--ranks-per-process=" + join(counts) + ": every process needs at least one rank");
    const int total = std::accumulate(counts.begin(), counts.end(), 0);
    if (total != ranks)
      throw std::invalid_argument("--ranks-per-process=" + join(counts) + " sums to " + std::to_string(total) +
                                  " but the job has " + job_ranks + " ranks");
  }
  std::vector<int> process_of_rank;
  for (int p = 0; p < processes; ++p)
    for (int i = 0; i < counts[p]; ++i) process_of_rank.push_back(p);
  return process_of_rank;
}

std::vector<int> parse_ranks_per_process(const std::string& text) {
  if (text.empty()) throw std::invalid_argument("--ranks-per-process is empty (expected e.g. 1,3)");
  std::vector<int> out;
  // As written: digits only between the commas (stoi took " 1" and "+1", and getline dropped a
  // trailing empty entry).
  for (std::size_t start = 0;;) {
    const std::size_t comma = text.find(',', start);
    const std::string item = text.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    const bool digits = !item.empty() && item.size() <= 9 &&
                        std::all_of(item.begin(), item.end(), [](char c) { return c >= '0' && c <= '9'; });
    if (!digits)
      throw std::invalid_argument("--ranks-per-process='" + text + "': '" + item +
                                  "' is not a count of ranks (whole numbers >= 1, e.g. 1,3)");
    out.push_back(std::stoi(item));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return out;
}

std::string ranks_of_process(const std::vector<int>& process_of_rank, int process) {
  std::string out;
  for (size_t r = 0; r < process_of_rank.size(); ++r)
    if (process_of_rank[r] == process) out += (out.empty() ? "" : ", ") + std::to_string(r);
  return out.empty() ? "none" : out;
}

std::string ranks_label(const std::vector<int>& process_of_rank, int process) {
  const std::string ranks = ranks_of_process(process_of_rank, process);
  return (ranks.find(',') != std::string::npos ? "ranks " : "rank ") + ranks;
}

}  // namespace actorpipe
