// Cutting a step's samples into microbatch tensors: int64 [B, S] inputs and targets shifted by one.
#include "core/data/microbatch.hpp"

#include <stdexcept>
#include <string>

#include "core/model/tensor_box_torch.hpp"

namespace actorpipe {

namespace {

void check_shape(int microbatch, int microbatch_size, int seq_len) {
  if (microbatch < 0) throw std::invalid_argument("microbatch must be >= 0: got microbatch=" + std::to_string(microbatch));
  if (microbatch_size < 1)
    throw std::invalid_argument("microbatch_size must be >= 1: got microbatch_size=" + std::to_string(microbatch_size));
  if (seq_len < 1) throw std::invalid_argument("seq_len must be >= 1: got seq_len=" + std::to_string(seq_len));
}

}  // namespace

microbatch_tensors make_microbatch(const token_source& src, std::uint64_t step, int microbatch, int microbatch_size,
                                   int seq_len, std::uint64_t sample_offset) {
  check_shape(microbatch, microbatch_size, seq_len);
  // One row of seq_len + 1 tokens per sample; inputs and targets are two overlapping windows of it.
  const std::int64_t width = static_cast<std::int64_t>(seq_len) + 1;
  at::Tensor rows = torch::empty({microbatch_size, width}, torch::kInt32);
  std::int32_t* data = rows.data_ptr<std::int32_t>();
  const std::uint64_t first = sample_offset + static_cast<std::uint64_t>(microbatch) * microbatch_size;
  for (int b = 0; b < microbatch_size; ++b) src.sequence(step, first + b, seq_len, data + b * width);

  at::Tensor all = rows.to(torch::kInt64);
  microbatch_tensors out;
  out.inputs = box(all.slice(1, 0, seq_len).contiguous());
  out.targets = box(all.slice(1, 1, width).contiguous());
  return out;
}

microbatch_tensors make_eval_microbatch(const token_source& src, int microbatch, int microbatch_size, int seq_len,
                                        std::uint64_t sequences) {
  check_shape(microbatch, microbatch_size, seq_len);
  const std::int64_t width = static_cast<std::int64_t>(seq_len) + 1;
  at::Tensor rows = torch::zeros({microbatch_size, width}, torch::kInt32);
  std::int32_t* data = rows.data_ptr<std::int32_t>();
  const std::uint64_t first = static_cast<std::uint64_t>(microbatch) * static_cast<std::uint64_t>(microbatch_size);
  int filled = 0;
  for (; filled < microbatch_size && first + filled < sequences; ++filled)
    src.eval_sequence(first + filled, seq_len, data + filled * width);
  at::Tensor all = rows.to(torch::kInt64);
  microbatch_tensors out;
  out.inputs = box(all.slice(1, 0, seq_len).contiguous());
  at::Tensor targets = all.slice(1, 1, width).contiguous();
  if (filled < microbatch_size) targets.slice(0, filled, microbatch_size).fill_(-100);
  out.targets = box(targets);
  return out;
}

}  // namespace actorpipe
