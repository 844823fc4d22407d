// What the GPT benchmarks share: the benchmark model, its flags, and tokens/s over the timed
// steps (every step after the first, which pays for allocation warm-up).
#pragma once

#include <cstdio>
#include <cstdlib>
#include <exception>
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

// A flag's value as a positive integer; false (after a message naming `program`, the flag and
// the value) for anything else.
inline bool positive_int_flag(const char* program, const std::string& flag, const char* text, int& out) {
  char* end = nullptr;
  const long v = std::strtol(text, &end, 10);
  if (end == text || *end != '\0' || v < 1 || v > 1000000) {
    std::fprintf(stderr, "%s: %s needs a positive integer, got '%s'\n", program, flag.c_str(), text);
    return false;
  }
  out = static_cast<int>(v);
  return true;
}

// --layers --hidden --seq-len --microbatch-size --microbatches --steps, --bucket-mb where
// `buckets`, --repeat where `repeat` is given. False (after a message naming `program`) for
// anything else, a flag without a value, or a value that is not a positive number.
inline bool parse_gpt_bench_flags(int argc, char** argv, train_options& o, const char* program, bool buckets = false,
                                  int* repeat = nullptr) {
  for (int i = 1; i < argc; i += 2) {
    const std::string k = argv[i];
    if (i + 1 >= argc) {
      std::fprintf(stderr, "%s: %s needs a value\n", program, k.c_str());
      return false;
    }
    const char* v = argv[i + 1];
    bool ok = true;
    if (k == "--layers") ok = positive_int_flag(program, k, v, o.model.layers);
    else if (k == "--hidden") ok = positive_int_flag(program, k, v, o.model.hidden);
    else if (k == "--seq-len") ok = positive_int_flag(program, k, v, o.model.seq_len);
    else if (k == "--microbatch-size") ok = positive_int_flag(program, k, v, o.microbatch_size);
    else if (k == "--microbatches") ok = positive_int_flag(program, k, v, o.microbatches);
    else if (k == "--steps") ok = positive_int_flag(program, k, v, o.steps);
    else if (repeat && k == "--repeat") ok = positive_int_flag(program, k, v, *repeat);
    else if (buckets && k == "--bucket-mb") {
      char* end = nullptr;
      o.bucket_mb = std::strtod(v, &end);
      if (end == v || *end != '\0' || !(o.bucket_mb > 0)) {
        std::fprintf(stderr, "%s: --bucket-mb needs a positive number, got '%s'\n", program, v);
        return false;
      }
    } else {
      std::fprintf(stderr, "%s: unknown flag %s\n", program, k.c_str());
      return false;
    }
    if (!ok) return false;
  }
  return true;
}

// Runs a benchmark's body: a bad model size or option is one line naming the benchmark, and
// exit status 1, instead of std::terminate.
template <class Body>
int run_reporting_errors(const char* program, Body&& body) {
  try {
    return body();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: %s\n", program, e.what());
    return 1;
  }
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
