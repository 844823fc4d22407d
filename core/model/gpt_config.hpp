// Shape of the GPT decoder (no torch here, so config and CLI code stay light).
#pragma once

#include <cstdint>

namespace actorpipe {

struct gpt_config {
  int vocab = 256;
  int seq_len = 128;  // maximum sequence length (position embeddings)
  int hidden = 256;
  int heads = 4;
  int layers = 8;     // transformer blocks
  double init_std = 0.02;
  std::uint64_t seed = 1234;  // parameter init: each tensor from (seed, its global name)
};

}  // namespace actorpipe
