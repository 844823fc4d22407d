// Benchmark: data parallelism on this machine's cores.
// 1. pp=1 x dp=2 against one replica on the same global batch (2M microbatches against M per
//    replica): tokens/s, target >= 1.8x on 2 cores.
// 2. pp=2 x dp=2 (4 ranks on 2 cores): the gradient sync's window (first bucket sent to last
//    shard reduced) and its exposed part (after the pipeline's last action), measured; and
//    what the simulator makes of it with one core per rank: the plan on the per-action costs
//    of a pp=2 run (2 ranks, one core each); each stage's sync ends its parameter count times
//    the per-parameter time run 1's ZeRO-1 replicas took after both had finished computing (2
//    ranks, one core each, uncontended) after its last backward: what is left of the sync once
//    the buckets that leave during that backward have left. Measured, exposed is also given
//    against the stages' summed syncs (each from its first bucket out to its shard reduced).
// Steps after the first are timed (the first pays for allocation warm-up).
//
//   bench/data_parallel_throughput [--layers 8 --hidden 256 --seq-len 128 --microbatch-size 4 --microbatches 16 --steps 3
//                                   --bucket-mb 4]
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "actors/pipeline_runtime.hpp"
#include "bench/gpt_bench.hpp"
#include "core/blas_kernels.hpp"
#include "core/schedule/schedule_registry.hpp"
#include "core/train/run_setup.hpp"

using namespace actorpipe;

namespace {

// Mean over the timed steps of a step_metrics field.
template <class F>
double timed_mean(const train_result& r, F field) {
  double sum = 0;
  for (size_t k = 1; k < r.steps.size(); ++k) sum += field(r.steps[k]);
  return sum / static_cast<double>(r.steps.size() - 1);
}

// The sync window, as the runtime measures it, for stages whose gradients are final at
// `ready[v]` and whose sync lasts `seconds[v]`, in a pipeline that ends at `end`.
void sync_window(const std::vector<double>& ready, const std::vector<double>& seconds, double end, double& total,
                 double& exposed) {
  double start = 1e300, stop = 0;
  for (size_t v = 0; v < ready.size(); ++v) start = std::min(start, ready[v]), stop = std::max(stop, ready[v] + seconds[v]);
  total = stop - start;
  exposed = stop - std::max(start, std::min(end, stop));
}

}  // namespace

namespace {

int bench_main(int argc, char** argv) {
  ensure_best_blas_kernels(argv);
  train_options o = bench::gpt_bench_options();
  o.plan_on_measured_costs = false;
  if (!bench::parse_gpt_bench_flags(argc, argv, o, "data_parallel_throughput", {true, true, nullptr})) return 2;
  if (o.steps < 2 || o.microbatches < 2 || o.microbatches % 2) {
    std::fprintf(stderr, "data_parallel_throughput: --steps >= 2 and an even --microbatches >= 2, please\n");
    return 2;
  }
  const int global = o.microbatches;
  bench::print_what_it_runs_on();
  std::printf("GPT %d layers, hidden %d, seq %d; global batch %d microbatches x %d; %d steps (first untimed); "
              "1 thread per rank; buckets of %g MiB\n\n", o.model.layers, o.model.hidden, o.model.seq_len, global,
              o.microbatch_size, o.steps, o.bucket_mb);

  // 1. One replica on one rank against two replicas on two ranks, same global batch.
  train_options one = o;
  one.stages = 1;
  const double base = bench::tokens_per_s(run_pipeline(one));
  std::printf("| run | ranks | tokens/s | vs one replica |\n|---|---|---|---|\n");
  std::printf("| pp=1 x dp=1, %d microbatches | 1 | %.0f | 1.00x |\n", global, base);
  double sync_per_element = 0;  // seconds, uncontended (ZeRO-1)
  for (int zero : {0, 1}) {
    train_options two = one;
    two.dp = 2;
    two.zero_stage = zero;
    two.microbatches = global / 2;
    const train_result r = run_pipeline(two);
    const double t = bench::tokens_per_s(r);
    std::printf("| pp=1 x dp=2 (ZeRO-%d), %d microbatches each | 2 | %.0f | %.2fx |\n", zero, global / 2, t, t / base);
    if (t / base > 2.2)  // two replicas give at most 2x
      std::printf("warning: above 2x, more than two replicas can give: the runs are too short to time apart from the "
                  "machine's noise; use a larger model or more --steps\n");
    std::fflush(stdout);
    const double elements = 2.0 * static_cast<double>(r.optimizer_state_bytes.at(0)) / 8;  // ZeRO-1: half the moments
    if (zero == 1)
      sync_per_element = timed_mean(r, [](const step_metrics& m) { return m.exposed_sync_seconds; }) / elements;
  }

  // 2. pp=2 x dp=2: the sync, measured on 4 ranks and 2 cores, and simulated on one core per rank.
  train_options pp = o;
  pp.stages = 2;
  pp.dp = 2;
  pp.zero_stage = 1;
  pp.microbatches = global / 2;
  const train_result r = run_pipeline(pp);
  const double total = timed_mean(r, [](const step_metrics& m) { return m.sync_seconds; });
  const double exposed = timed_mean(r, [](const step_metrics& m) { return m.exposed_sync_seconds; });
  const double summed = timed_mean(r, [](const step_metrics& m) {
    double s = 0;
    for (double x : m.stage_sync_seconds) s += x;
    return s / 2;  // per replica
  });
  std::printf("\npp=2 x dp=2 (1f1b, ZeRO-1), %d microbatches per replica, 4 ranks on this machine: %.0f tokens/s;\n"
              "  gradient sync window %.1f ms per step, %.1f ms of it exposed (%.1f%% of the window); the stages' own "
              "sync work %.1f ms a replica (the exposed part is wall time: it also holds waits for the other replica's "
              "slices, so it can pass that)\n",
              pp.microbatches, bench::tokens_per_s(r), 1e3 * total, 1e3 * exposed, total > 0 ? 100 * exposed / total : 0.0,
              1e3 * summed);
  // One core per rank: the plan on a pp=2 run's costs (2 ranks, 2 cores), each stage's sync as measured.
  train_options single = pp;
  single.dp = 1;
  const train_result s = run_pipeline(single);
  const int S = s.last_step.stages * s.last_step.chunks;
  const plan p = make_schedule("1f1b", {2, pp.microbatches, 1});
  const sim_result sim = simulate(p, mean_costs(s.last_step.events, S));
  std::vector<double> ready(S, 0), seconds(S, 0);
  for (const auto& e : sim.events)
    if (e.act.op == op_kind::backward || e.act.op == op_kind::weight_grad)
      ready[e.act.virtual_stage] = std::max(ready[e.act.virtual_stage], e.end);
  for (int v = 0; v < S; ++v)  // rank v holds stage v: its ZeRO-1 moments are 1/2 of 2 x 4 bytes per element
    seconds[v] = sync_per_element * static_cast<double>(r.optimizer_state_bytes.at(v)) * 2 / 8;
  double sim_total = 0, sim_exposed = 0;
  sync_window(ready, seconds, sim.makespan, sim_total, sim_exposed);
  std::printf("  simulated with one core per rank (pipeline %.1f ms): sync window %.1f ms, %.1f ms exposed: %.1f%% of "
              "the window\n",
              1e3 * sim.makespan, 1e3 * sim_total, 1e3 * sim_exposed, sim_total > 0 ? 100 * sim_exposed / sim_total : 0.0);
  for (int v = 0; v < S; ++v)
    std::printf("    stage %d: last backward ends at %.1f ms, then %.1f ms of sync (%.2f ns per parameter, uncontended)\n",
                v, 1e3 * ready[v], 1e3 * seconds[v], 1e9 * sync_per_element);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return bench::run_reporting_errors("data_parallel_throughput", [&] { return bench_main(argc, argv); });
}
