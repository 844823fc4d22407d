// Which process of a multi-process job hosts which pipeline ranks: contiguous runs of ranks,
// process 0 first (it hosts rank 0 and the supervisor).
#pragma once

#include <string>
#include <vector>

namespace actorpipe {

// per_process empty: ranks spread evenly (the first ranks % processes processes get one more).
// Otherwise per_process[p] ranks go to process p. Throws std::invalid_argument naming the
// flag and the values ("--ranks-per-process=1,2 sums to 3 but the job has --stages=4 ranks");
// ranks_text names the job's ranks in them (default "--stages=N").
std::vector<int> assign_ranks_to_processes(int ranks, int processes, const std::vector<int>& per_process = {},
                                           const std::string& ranks_text = "");

// The ranks process `process` hosts, for messages: "2, 3" ("none" when it hosts none).
// process_of_rank[r] is rank r's process (assign_ranks_to_processes).
std::string ranks_of_process(const std::vector<int>& process_of_rank, int process);
// The same with its word: "rank 2", "ranks 2, 3" ("rank none").
std::string ranks_label(const std::vector<int>& process_of_rank, int process);

// "1,3" -> {1, 3}; throws std::invalid_argument naming --ranks-per-process and the text.
std::vector<int> parse_ranks_per_process(const std::string& text);

}  // namespace actorpipe
