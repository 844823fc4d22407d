// What the GPT benchmarks share: the benchmark model, its flags, and tokens/s over the timed
// steps (every step after the first, which pays for allocation warm-up).
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <stdexcept>
#include <string>

#include "bench/bench_args.hpp"
#include "core/blas_kernels.hpp"
#include "core/model/compute_threads.hpp"
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

// A flag's value as a positive integer into `out`; else the error text naming the flag and the
// value.
inline std::string positive_int_flag(const std::string& flag, const char* text, int& out) {
  const long long v = whole_number(text, 1, 1000000);
  if (v < 0) return flag + " needs a whole number from 1 to 1000000, got '" + text + "'";
  out = static_cast<int>(v);
  return {};
}

// Which flags a benchmark takes beyond the model's size (--layers --hidden --seq-len
// --microbatch-size).
struct bench_flags {
  bool batches = true;    // --microbatches and --steps (false: the bench times single passes)
  bool buckets = false;   // --bucket-mb
  int* repeat = nullptr;  // --repeat, where given
  std::string* schedule = nullptr;  // --schedule, where given
  int* chunks = nullptr;            // --chunks, where given
  bool steps = true;  // with batches: --steps too (false: a benchmark that replays one step)
  std::string extra = {};  // flags the benchmark reads itself, for the lists (", --dir, --save-every")
  bool layers = true;      // --layers (false: the bench times one block)
  std::string extra_defaults = {};  // the defaults of `extra`'s flags, for --help (" --save-every 3")
};

// The flags a benchmark takes, for --help and the unknown-flag error.
inline std::string bench_flags_taken(const bench_flags& accepts) {
  std::string takes = std::string(accepts.layers ? "--layers, " : "") + "--hidden, --seq-len, --microbatch-size";
  if (accepts.batches) takes += accepts.steps ? ", --microbatches, --steps" : ", --microbatches";
  if (accepts.buckets) takes += ", --bucket-mb";
  if (accepts.repeat) takes += ", --repeat";
  if (accepts.schedule) takes += ", --schedule";
  if (accepts.chunks) takes += ", --chunks";
  return takes + accepts.extra;
}

// Reads the flags `accepts` names into `o` (and into what its pointers point at). Empty when all were good;
// else one line naming the flag: another flag (with the list this benchmark takes), a flag
// without a value, or a value that is not a positive number.
inline std::string gpt_bench_flag_error(int argc, char** argv, train_options& o, const bench_flags& accepts = {}) {
  for (int i = 1; i < argc; i += 2) {
    const std::string k = argv[i];
    if (i + 1 >= argc) return k + " needs a value";
    const char* v = argv[i + 1];
    std::string error;
    if (accepts.layers && k == "--layers") error = positive_int_flag(k, v, o.model.layers);
    else if (k == "--hidden") error = positive_int_flag(k, v, o.model.hidden);
    else if (k == "--seq-len") error = positive_int_flag(k, v, o.model.seq_len);
    else if (k == "--microbatch-size") error = positive_int_flag(k, v, o.microbatch_size);
    else if (accepts.batches && k == "--microbatches") error = positive_int_flag(k, v, o.microbatches);
    else if (accepts.batches && accepts.steps && k == "--steps") error = positive_int_flag(k, v, o.steps);
    else if (accepts.repeat && k == "--repeat") error = positive_int_flag(k, v, *accepts.repeat);
    else if (accepts.schedule && k == "--schedule") *accepts.schedule = v;
    else if (accepts.chunks && k == "--chunks") error = positive_int_flag(k, v, *accepts.chunks);
    else if (accepts.buckets && k == "--bucket-mb") {
      char* end = nullptr;
      o.bucket_mb = std::strtod(v, &end);
      if (end == v || *end != '\0' || !(o.bucket_mb > 0)) error = k + " needs a positive number, got '" + v + "'";
    } else {
      return "unknown flag " + k + " (it takes " + bench_flags_taken(accepts) + ")";
    }
    if (!error.empty()) return error;
  }
  return {};
}

// The values the flags `accepts` names take when not given, as flags: "--layers 8 --hidden 256 ...".
inline std::string bench_flag_defaults(const train_options& o, const bench_flags& accepts) {
  std::string d = accepts.layers ? "--layers " + std::to_string(o.model.layers) + " " : "";
  d += "--hidden " + std::to_string(o.model.hidden) + " --seq-len " + std::to_string(o.model.seq_len) +
       " --microbatch-size " + std::to_string(o.microbatch_size);
  if (accepts.batches) d += " --microbatches " + std::to_string(o.microbatches);
  if (accepts.batches && accepts.steps) d += " --steps " + std::to_string(o.steps);
  if (accepts.buckets) {
    char mb[32];
    std::snprintf(mb, sizeof mb, "%g", o.bucket_mb);
    d += std::string(" --bucket-mb ") + mb;
  }
  if (accepts.repeat) d += " --repeat " + std::to_string(*accepts.repeat);
  if (accepts.schedule) d += " --schedule " + *accepts.schedule;
  if (accepts.chunks) d += " --chunks " + std::to_string(*accepts.chunks);
  return d + accepts.extra_defaults;
}

// --help (or -h) anywhere: the flags it takes, each a flag and its value, their defaults, and
// where what it measures is told; exit 0 before anything runs.
inline void print_bench_help_if_asked(int argc, char** argv, const char* program, const std::string& takes,
                                      const std::string& defaults) {
  if (!asked_for_help(argc, argv)) return;
  std::printf("usage: %s [FLAG VALUE]...\nflags: %s (each takes a value)\ndefaults: %s\nwhat it measures: "
              "bench/%s.cpp's first comment, and the README's Benchmarks\n",
              program, takes.c_str(), defaults.c_str(), program);
  std::exit(0);
}

// gpt_bench_flag_error, its error printed after `program`'s name: false then.
inline bool parse_gpt_bench_flags(int argc, char** argv, train_options& o, const char* program,
                                  const bench_flags& accepts = {}) {
  print_bench_help_if_asked(argc, argv, program, bench_flags_taken(accepts), bench_flag_defaults(o, accepts));
  const std::string error = gpt_bench_flag_error(argc, argv, o, accepts);
  if (!error.empty()) std::fprintf(stderr, "%s: %s\n", program, error.c_str());
  return error.empty();
}

// What a benchmark ran on, its first line: LibTorch and its kernels, the BLAS and its kernels,
// the allocator, actorpipe's own loops.
inline void print_what_it_runs_on() {
  std::printf("%s; %s; allocator: %s; own loops: %s\n", libtorch_version().c_str(),
              describe_blas(current_blas()).c_str(), describe_allocator().c_str(), describe_own_kernels().c_str());
}

// Runs a benchmark's body: a bad model size or option is one line naming the benchmark, and
// exit status 2 (refused: std::invalid_argument) or 1, instead of std::terminate. A run that
// others' processes shared says so at its end (load_watch).
template <class Body>
int run_reporting_errors(const char* program, Body&& body) {
  try {
    const load_watch load;
    const int code = body();
    if (code == 0) load.say();
    return code;
  } catch (const std::invalid_argument& e) {
    std::fprintf(stderr, "%s: %s\n", program, e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: %s\n", program, e.what());
    return 1;
  }
}

// Seconds on the steady clock since t.
using clock_type = std::chrono::steady_clock;
inline double seconds_since(clock_type::time_point t) {
  return std::chrono::duration<double>(clock_type::now() - t).count();
}

// How far apart two measurements of the same work are: the larger over the smaller, minus 1.
inline double moved(double a, double b) { return std::max(a, b) / std::min(a, b) - 1; }

inline double tokens_per_s(const train_result& r) {
  double tokens = 0, seconds = 0;
  for (size_t k = 1; k < r.steps.size(); ++k) {
    tokens += r.steps[k].tokens_per_s * r.steps[k].seconds;
    seconds += r.steps[k].seconds;
  }
  return tokens / seconds;
}

}  // namespace actorpipe::bench
