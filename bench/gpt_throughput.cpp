// Benchmark: tokens/s of the real GPT pipelined on 2 stages (one thread each) against the
// unpartitioned reference on one thread, same microbatches. Target >= 1.8x at M = 16 on 2
// cores. Steps after the first are timed (the first pays for allocation warm-up).
//
//   bench/gpt_throughput [--layers 8 --hidden 256 --seq-len 128 --microbatch-size 4 --microbatches 16 --steps 3]
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "actors/pipeline_runtime.hpp"
#include "core/blas_kernels.hpp"
#include "core/train/reference_trainer.hpp"

using namespace actorpipe;

namespace {
double tokens_per_s(const train_result& r) {
  double tokens = 0, seconds = 0;
  for (size_t k = 1; k < r.steps.size(); ++k) {
    tokens += r.steps[k].tokens_per_s * r.steps[k].seconds;
    seconds += r.steps[k].seconds;
  }
  return tokens / seconds;
}
}  // namespace

int main(int argc, char** argv) {
  ensure_best_blas_kernels(argv);
  train_options o;
  o.model.layers = 8;
  o.model.hidden = 256;
  o.model.heads = 4;
  o.model.seq_len = 128;
  o.model.vocab = 256;
  o.microbatch_size = 4;
  o.microbatches = 16;
  o.steps = 3;
  o.stages = 2;
  o.threads_per_stage = 1;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i];
    const int v = std::atoi(argv[i + 1]);
    if (k == "--layers") o.model.layers = v;
    else if (k == "--hidden") o.model.hidden = v;
    else if (k == "--seq-len") o.model.seq_len = v;
    else if (k == "--microbatch-size") o.microbatch_size = v;
    else if (k == "--microbatches") o.microbatches = v;
    else if (k == "--steps") o.steps = v;
    else {
      std::fprintf(stderr, "gpt_throughput: unknown flag %s\n", k.c_str());
      return 2;
    }
  }
  if (o.steps < 2) {
    std::fprintf(stderr, "gpt_throughput: --steps must be >= 2 (the first step is not timed)\n");
    return 2;
  }
  std::printf("%s\n", describe_blas(current_blas()).c_str());
  std::printf("GPT %d layers, hidden %d, seq %d; %d microbatches x %d; %d steps (first untimed)\n", o.model.layers,
              o.model.hidden, o.model.seq_len, o.microbatches, o.microbatch_size, o.steps);
  train_result ref = run_reference(o);
  const double base = tokens_per_s(ref);
  std::printf("| run | tokens/s | vs reference |\n|---|---|---|\n| reference, 1 thread | %.0f | 1.00x |\n", base);
  for (const char* s : {"1f1b", "zb-h1", "gpipe"}) {
    o.schedule = s;
    train_result r = run_pipeline(o);
    const double t = tokens_per_s(r);
    std::printf("| %s, 2 stages x 1 thread | %.0f | %.2fx |\n", s, t, t / base);
    std::fflush(stdout);
  }
  return 0;
}
