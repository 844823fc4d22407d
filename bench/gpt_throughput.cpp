// Benchmark: tokens/s of the real GPT pipelined on 2 stages (one thread each) against the
// unpartitioned reference on one thread, same microbatches; then what splitting costs: I + W
// against B, and the model in 4 half-size chunks against 2 stages (from the measured actions).
// Target >= 1.85x at M = 16 on 2 cores. Steps after the first are timed (the first pays for
// allocation warm-up).
//
//   bench/gpt_throughput [--layers 8 --hidden 256 --seq-len 128 --microbatch-size 4 --microbatches 16 --steps 3]
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>

#include "actors/pipeline_runtime.hpp"
#include "bench/gpt_bench.hpp"
#include "core/blas_kernels.hpp"
#include "core/model/compute_threads.hpp"
#include "core/train/reference_trainer.hpp"

using namespace actorpipe;

int main(int argc, char** argv) {
  ensure_best_blas_kernels(argv);
  train_options o = bench::gpt_bench_options();
  o.stages = 2;
  if (!bench::parse_gpt_bench_flags(argc, argv, o, "gpt_throughput")) return 2;
  if (o.steps < 2) {
    std::fprintf(stderr, "gpt_throughput: --steps must be >= 2 (the first step is not timed)\n");
    return 2;
  }
  std::printf("%s; %s; allocator: %s\n", libtorch_version().c_str(), describe_blas(current_blas()).c_str(),
              describe_allocator().c_str());
  std::printf("GPT %d layers, hidden %d, seq %d; %d microbatches x %d; %d steps (first untimed)\n", o.model.layers,
              o.model.hidden, o.model.seq_len, o.microbatches, o.microbatch_size, o.steps);
  train_result ref = run_reference(o);
  const double base = bench::tokens_per_s(ref);
  std::printf("| run | tokens/s | vs reference |\n|---|---|---|\n| reference, 1 thread | %.0f | 1.00x |\n", base);
  // Mean duration of each op over the last step's measured actions, summed over virtual
  // stages: the compute of one microbatch through the whole model, op by op.
  auto per_microbatch = [](const train_result& r, op_kind op) {
    const cost_model c = mean_costs(r.last_step.events, r.last_step.stages * r.last_step.chunks);
    const auto& v = op == op_kind::forward ? c.forward : op == op_kind::backward ? c.backward
                    : op == op_kind::input_grad ? c.input_grad : c.weight_grad;
    double sum = 0;
    for (double x : v) sum += x;
    return sum;
  };
  struct run_spec { const char* schedule; int chunks; };
  std::map<std::string, train_result> runs;
  for (run_spec spec : {run_spec{"1f1b", 1}, run_spec{"zb-h1", 1}, run_spec{"interleaved", 2}, run_spec{"zbv", 2},
                        run_spec{"gpipe", 1}}) {
    o.schedule = spec.schedule;
    o.chunks = spec.chunks;
    train_result r = run_pipeline(o);
    const double t = bench::tokens_per_s(r);
    std::printf("| %s, 2 stages x %d chunk%s x 1 thread | %.0f | %.2fx |\n", spec.schedule, spec.chunks,
                spec.chunks == 1 ? "" : "s", t, t / base);
    std::fflush(stdout);
    runs.emplace(spec.schedule, std::move(r));
  }
  // Split backward against full backward on the same 2 stages (1f1b vs zb-h1), and the same
  // model cut into 4 chunks instead of 2 stages (zbv vs 1f1b): 1.00 means no overhead.
  const double b = per_microbatch(runs["1f1b"], op_kind::backward);
  const double iw = per_microbatch(runs["zb-h1"], op_kind::input_grad) + per_microbatch(runs["zb-h1"], op_kind::weight_grad);
  std::printf("\nper microbatch, whole model (last step's measured actions):\n");
  std::printf("  B (1f1b) %.1f ms; I + W (zb-h1) %.1f ms = %.3f x B\n", 1e3 * b, 1e3 * iw, iw / b);
  const double f2 = per_microbatch(runs["1f1b"], op_kind::forward), f4 = per_microbatch(runs["zbv"], op_kind::forward);
  const double iw4 = per_microbatch(runs["zbv"], op_kind::input_grad) + per_microbatch(runs["zbv"], op_kind::weight_grad);
  std::printf("  F in 2 stages (1f1b) %.1f ms; in 4 half-size chunks (zbv) %.1f ms = %.3f x\n", 1e3 * f2, 1e3 * f4, f4 / f2);
  std::printf("  I + W in 4 half-size chunks (zbv) %.1f ms = %.3f x B (1f1b)\n", 1e3 * iw4, iw4 / b);
  for (const char* s : {"zb-h1", "zbv"})
    if (!runs[s].replan_report.empty()) std::printf("  %s: %s\n", s, runs[s].replan_report.c_str());
  return 0;
}
