// Benchmark: tokens/s of the real GPT pipelined on 2 stages (one thread each) against the
// unpartitioned reference on one thread, same microbatches; each ratio split into what the
// schedule gives (stages x the share of the time they were busy) and how fast the actions ran
// against the reference's (both cores busy vs one); then what splitting costs: I + W against B,
// and the model in 4 half-size chunks against 2 stages (from the measured actions). Target
// >= 1.85x for 1f1b at M = 16 on 2 cores. Steps after the first are timed (the first pays for
// allocation warm-up). --repeat N runs N rounds and shows each column's median. The reference
// runs before and after every round (a round's closing run opens the next), and each ratio is
// taken against the reference interpolated to the middle of the schedule's run, so a slow phase
// of a shared machine hits both sides of it. Each round's lines (stderr) show tokens/s as the
// runs end, then every ratio as (schedule x actions' speed).
//
//   bench/gpt_throughput [--layers 8 --hidden 256 --seq-len 128 --microbatch-size 4 --microbatches 16 --steps 3]
//                        [--repeat 1]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "actors/pipeline_runtime.hpp"
#include "bench/gpt_bench.hpp"
#include "core/blas_kernels.hpp"
#include "core/median.hpp"
#include "core/model/compute_threads.hpp"
#include "core/train/reference_trainer.hpp"

using namespace actorpipe;

namespace {

// Over the timed steps: the ranks' summed busy seconds per second of step (the stages x the
// share of the time they computed; the reference's is 1 by definition).
double busy_ranks(const train_result& r, int ranks) {
  double busy = 0, seconds = 0;
  for (size_t k = 1; k < r.steps.size(); ++k) {
    busy += (1 - r.steps[k].bubble_ratio) * ranks * r.steps[k].seconds;
    seconds += r.steps[k].seconds;
  }
  return busy / seconds;
}

// Mean duration of each op over the last step's measured actions, summed over virtual stages:
// the compute of one microbatch through the whole model, op by op.
double per_microbatch(const train_result& r, op_kind op) {
  const cost_model c = mean_costs(r.last_step.events, r.last_step.stages * r.last_step.chunks);
  const auto& v = op == op_kind::forward ? c.forward : op == op_kind::backward ? c.backward
                  : op == op_kind::input_grad ? c.input_grad : c.weight_grad;
  double sum = 0;
  for (double x : v) sum += x;
  return sum;
}

struct run_spec {
  const char* schedule;
  int chunks;
};

// One schedule's rounds: tokens/s, the ratio to its round's (interpolated) reference, the
// schedule's part, the actions' speed.
struct samples {
  std::vector<double> tokens, ratio, schedule, speed;
};

}  // namespace

namespace {

int bench_main(int argc, char** argv) {
  ensure_best_blas_kernels(argv);
  train_options o = bench::gpt_bench_options();
  o.stages = 2;
  int repeat = 1;
  if (!bench::parse_gpt_bench_flags(argc, argv, o, "gpt_throughput", false, &repeat)) return 2;
  if (o.steps < 2) {
    std::fprintf(stderr, "gpt_throughput: --steps must be >= 2 (the first step is not timed), got %d\n", o.steps);
    return 2;
  }
  std::printf("%s; %s; allocator: %s\n", libtorch_version().c_str(), describe_blas(current_blas()).c_str(),
              describe_allocator().c_str());
  std::printf("GPT %d layers, hidden %d, seq %d; %d microbatches x %d; %d steps (first untimed); %d round%s\n",
              o.model.layers, o.model.hidden, o.model.seq_len, o.microbatches, o.microbatch_size, o.steps, repeat,
              repeat == 1 ? " (every schedule between two reference runs)"
                          : "s (each: every schedule, between two reference runs)");
  const std::vector<run_spec> specs = {{"1f1b", 1}, {"zb-h1", 1}, {"interleaved", 2}, {"zbv", 2}, {"gpipe", 1}};
  std::vector<double> reference;
  std::map<std::string, samples> got;
  std::map<std::string, train_result> last;  // the last round's runs, for the replan reports
  // Per round (both sides from the same round): I + W (zb-h1) / B (1f1b), F in 4 half chunks
  // (zbv) / F in 2 stages (1f1b), I + W in 4 half chunks (zbv) / B (1f1b); and the per-microbatch
  // milliseconds they come from.
  std::vector<double> iw_b, f4_f2, iw4_b, ms_b, ms_iw, ms_f2, ms_f4, ms_iw4;
  // A reference run before and after every round (a round's closing one opens the next): each
  // schedule's ratio is against the reference interpolated to the middle of its run, so a
  // machine that drifts during a round (this shared one moves by several % per minute) does
  // not favour the schedules that run early in it.
  const auto started = std::chrono::steady_clock::now();
  auto now_s = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count(); };
  struct timed {
    double tokens, at;  // tokens/s; the middle of the run, seconds since the bench began
  };
  auto reference_run = [&] {
    const double from = now_s(), t = bench::tokens_per_s(run_reference(o));
    reference.push_back(t);
    return timed{t, (from + now_s()) / 2};
  };
  timed before = reference_run();
  for (int round = 0; round < repeat; ++round) {
    std::fprintf(stderr, "round %d/%d: reference %.0f tokens/s", round + 1, repeat, before.tokens);
    std::vector<timed> runs;
    for (const run_spec& spec : specs) {
      o.schedule = spec.schedule;
      o.chunks = spec.chunks;
      const double from = now_s();
      train_result r = run_pipeline(o);
      runs.push_back({bench::tokens_per_s(r), (from + now_s()) / 2});
      std::fprintf(stderr, ", %s %.0f", spec.schedule, runs.back().tokens);
      last[spec.schedule] = std::move(r);
    }
    const timed after = reference_run();
    std::fprintf(stderr, ", reference %.0f\n  against the reference interpolated to each run's middle:", after.tokens);
    for (size_t i = 0; i < specs.size(); ++i) {
      const double w = (runs[i].at - before.at) / (after.at - before.at);
      const double base = before.tokens + w * (after.tokens - before.tokens);
      const double t = runs[i].tokens, sched = busy_ranks(last[specs[i].schedule], o.stages);
      samples& s = got[specs[i].schedule];
      s.tokens.push_back(t);
      s.ratio.push_back(t / base);
      s.schedule.push_back(sched);
      s.speed.push_back(t / base / sched);
      std::fprintf(stderr, "%s %s %.2fx (%.3f x %.3f)", i ? "," : "", specs[i].schedule, t / base, sched, t / base / sched);
    }
    std::fprintf(stderr, "\n");
    before = after;
    // Split backward against full backward on the same 2 stages (1f1b vs zb-h1), and the same
    // model cut into 4 chunks instead of 2 stages (zbv vs 1f1b): 1.00 means no overhead.
    const double b = per_microbatch(last["1f1b"], op_kind::backward);
    const double iw = per_microbatch(last["zb-h1"], op_kind::input_grad) + per_microbatch(last["zb-h1"], op_kind::weight_grad);
    const double f2 = per_microbatch(last["1f1b"], op_kind::forward), f4 = per_microbatch(last["zbv"], op_kind::forward);
    const double iw4 = per_microbatch(last["zbv"], op_kind::input_grad) + per_microbatch(last["zbv"], op_kind::weight_grad);
    iw_b.push_back(iw / b);
    f4_f2.push_back(f4 / f2);
    iw4_b.push_back(iw4 / b);
    ms_b.push_back(1e3 * b);
    ms_iw.push_back(1e3 * iw);
    ms_f2.push_back(1e3 * f2);
    ms_f4.push_back(1e3 * f4);
    ms_iw4.push_back(1e3 * iw4);
  }
  std::printf("\n| run | tokens/s | vs reference | = schedule: stages x busy share | x actions' speed vs reference |\n"
              "|---|---|---|---|---|\n| reference, 1 thread | %.0f | 1.00x | 1.00 | 1.00 |\n", median(reference));
  for (const run_spec& spec : specs) {
    const samples& s = got[spec.schedule];
    std::printf("| %s, 2 stages x %d chunk%s x 1 thread | %.0f | %.2fx | %.3f | %.3f |\n", spec.schedule, spec.chunks,
                spec.chunks == 1 ? "" : "s", median(s.tokens), median(s.ratio), median(s.schedule), median(s.speed));
  }
  std::printf("\n%s; the schedule column is what the pipeline would give if its actions ran as fast as the\n"
              "reference's (2 x (1 - measured bubble)); the last is how fast they ran with both cores busy.\n",
              repeat == 1 ? "one round, ratios against the reference interpolated to each run's middle"
                          : "each cell: its median over the rounds, ratios against the reference interpolated to each run's middle");
  if (repeat > 1) {
    std::printf("1f1b vs reference per round:");
    for (double x : got["1f1b"].ratio) std::printf(" %.3f", x);
    std::printf("\n");
  }
  std::printf("\nper microbatch, whole model (each round's last step, measured actions; %s):\n",
              repeat == 1 ? "one round" : "medians over the rounds, each ratio within its round");
  std::printf("  B (1f1b) %.1f ms; I + W (zb-h1) %.1f ms = %.3f x B\n", median(ms_b), median(ms_iw), median(iw_b));
  std::printf("  F in 2 stages (1f1b) %.1f ms; in 4 half-size chunks (zbv) %.1f ms = %.3f x\n", median(ms_f2), median(ms_f4),
              median(f4_f2));
  std::printf("  I + W in 4 half-size chunks (zbv) %.1f ms = %.3f x B (1f1b)\n", median(ms_iw4), median(iw4_b));
  if (repeat > 1) {
    std::printf("  I + W (zb-h1) / B per round:");
    for (double x : iw_b) std::printf(" %.3f", x);
    std::printf("\n");
  }
  for (const char* s : {"zb-h1", "zbv"})
    if (!last[s].replan_report.empty()) {
      std::string report = last[s].replan_report;
      for (size_t at = report.find('\n'); at != std::string::npos; at = report.find('\n', at + 1)) report.insert(at + 1, "    ");
      std::printf("  %s (the last round):\n    %s\n", s, report.c_str());
    }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return bench::run_reporting_errors("gpt_throughput", [&] { return bench_main(argc, argv); });
}
