// Cutting a step's samples into microbatches as tensors (int64 [B, S] inputs and targets).
#pragma once

#include <cstdint>
#include <functional>
#include <utility>

#include "core/data/token_source.hpp"
#include "core/model/tensor_box.hpp"

namespace actorpipe {

struct microbatch_tensors {
  tensor_box inputs;   // GPT: [microbatch_size, seq_len] int64
  tensor_box targets;  // GPT: [microbatch_size, seq_len] int64, inputs shifted by one
};

// Microbatch m of step k holds samples m * microbatch_size .. (m + 1) * microbatch_size - 1
// (offset by data_parallel_rank * samples_per_replica when data parallelism lands).
// Any model's data: microbatch `microbatch` of optimizer step `step`, a pure function of its
// arguments, so every process feeds its own stages the same data without sending it.
using batch_function = std::function<microbatch_tensors(std::uint64_t step, int microbatch)>;

microbatch_tensors make_microbatch(const token_source& src, std::uint64_t step, int microbatch, int microbatch_size,
                                   int seq_len, std::uint64_t sample_offset = 0);

// Microbatch m of the source's held-out set (token_source::eval_sequence), of the first
// `sequences` eval sequences: rows m * microbatch_size .. (m + 1) * microbatch_size - 1; a row
// at or past `sequences` (the last microbatch filled up) has inputs 0 and targets -100, which
// count in no loss.
microbatch_tensors make_eval_microbatch(const token_source& src, int microbatch, int microbatch_size, int seq_len,
                                        std::uint64_t sequences);

}  // namespace actorpipe
