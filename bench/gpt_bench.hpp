// What the GPT benchmarks share: the benchmark model, its flags, and tokens/s over the timed
// steps (every step after the first, which pays for allocation warm-up).
#pragma once

#include <cstdio>
#include <cstdlib>
#include <string>

#include "core/train/train_options.hpp"

namespace actorpipe::bench {

// 8 layers, hidden 256, 4 heads, sequence 128, vocab 256; 16 microbatches of 4; 3 steps; one
// thread per rank.
inline train_options gpt_bench_options() {
  train_options o;
  o.model.layers = 8;
  o.model.hidden = 256;
  o.model.heads = 4;
  o.model.seq_len = 128;
  o.model.vocab = 256;
  o.microbatch_size = 4;
  o.microbatches = 16;
  o.steps = 3;
  o.threads_per_stage = 1;
  return o;
}

// --layers --hidden --seq-len --microbatch-size --microbatches --steps, and --bucket-mb where
// `buckets`. False (after a message naming `program`) for anything else.
inline bool parse_gpt_bench_flags(int argc, char** argv, train_options& o, const char* program, bool buckets = false) {
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i];
    const int v = std::atoi(argv[i + 1]);
    if (k == "--layers") o.model.layers = v;
    else if (k == "--hidden") o.model.hidden = v;
    else if (k == "--seq-len") o.model.seq_len = v;
    else if (k == "--microbatch-size") o.microbatch_size = v;
    else if (k == "--microbatches") o.microbatches = v;
    else if (k == "--steps") o.steps = v;
    else if (buckets && k == "--bucket-mb") o.bucket_mb = std::atof(argv[i + 1]);
    else {
      std::fprintf(stderr, "%s: unknown flag %s\n", program, k.c_str());
      return false;
    }
  }
  return true;
}

inline double tokens_per_s(const train_result& r) {
  double tokens = 0, seconds = 0;
  for (size_t k = 1; k < r.steps.size(); ++k) {
    tokens += r.steps[k].tokens_per_s * r.steps[k].seconds;
    seconds += r.steps[k].seconds;
  }
  return tokens / seconds;
}

}  // namespace actorpipe::bench
