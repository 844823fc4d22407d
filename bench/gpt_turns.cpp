// Benchmark: a pipelined GPT (2 stages, one thread each) against the unpartitioned reference
// (one thread), the two runs taking turns a step at a time in one process: pipeline step k,
// then reference step k, then pipeline step k + 1. Each pipeline step is compared with the two
// reference steps around it, a few seconds apart, so a shared machine's slow spells (seconds to
// minutes) hit both sides of each ratio; gpt_throughput compares whole runs, minutes apart.
// Prints every step's ratio, split as in gpt_throughput (schedule: stages x busy share; the
// actions' speed against the reference's), their medians and spread, and how far the
// reference's own speed moved between its consecutive steps.
//
//   bench/gpt_turns [--schedule 1f1b --chunks 1 --layers 8 --hidden 256 --seq-len 128
//                    --microbatch-size 4 --microbatches 16 --steps 12]
#include <algorithm>
#include <condition_variable>
#include <cstdio>
#include <exception>
#include <stdexcept>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "actors/pipeline_runtime.hpp"
#include "bench/gpt_bench.hpp"
#include "core/blas_kernels.hpp"
#include "core/median.hpp"
#include "core/train/reference_trainer.hpp"

using namespace actorpipe;

namespace {

// Two runs taking turns: after each of its steps a side hands the turn to the other and waits
// for it back, or for the other side's end.
class turns {
 public:
  void step_done(int side) {
    std::unique_lock<std::mutex> lock(m_);
    turn_ = 1 - side;
    cv_.notify_all();
    cv_.wait(lock, [&] { return turn_ == side || finished_[1 - side]; });
  }

  void finish(int side) {
    std::lock_guard<std::mutex> lock(m_);
    finished_[side] = true;
    turn_ = 1 - side;
    cv_.notify_all();
  }

 private:
  std::mutex m_;
  std::condition_variable cv_;
  int turn_ = 0;
  bool finished_[2] = {false, false};
};

constexpr int pipeline_side = 0, reference_side = 1;

// Runs both, the pipeline on this thread (its steps' reports come from its supervisor), the
// reference on a thread started after the pipeline's first step (so the two setups do not
// overlap). Fills each side's step reports; rethrows either side's error.
void run_taking_turns(const train_options& o, std::vector<step_metrics>& pipeline, std::vector<step_metrics>& reference) {
  turns t;
  std::thread reference_thread;
  std::exception_ptr reference_error;
  const auto start_reference = [&] {
    reference_thread = std::thread([&] {
      try {
        run_reference(o, [&](const step_metrics& m) {
          reference.push_back(m);
          t.step_done(reference_side);
        });
      } catch (...) {
        reference_error = std::current_exception();
      }
      t.finish(reference_side);
    });
  };
  try {
    run_pipeline(o, [&](const step_metrics& m) {
      pipeline.push_back(m);
      if (m.step == 0) start_reference();
      t.step_done(pipeline_side);
    });
  } catch (...) {
    t.finish(pipeline_side);
    if (reference_thread.joinable()) reference_thread.join();
    throw;
  }
  t.finish(pipeline_side);
  if (reference_thread.joinable()) reference_thread.join();
  if (reference_error) std::rethrow_exception(reference_error);
}

// The largest over the smallest.
double spread(const std::vector<double>& v) { return *std::max_element(v.begin(), v.end()) / *std::min_element(v.begin(), v.end()); }

int bench_main(int argc, char** argv) {
  ensure_best_blas_kernels(argv);
  train_options o = bench::gpt_bench_options();
  o.stages = 2;
  o.steps = 12;
  o.schedule = "1f1b";
  if (!bench::parse_gpt_bench_flags(argc, argv, o, "gpt_turns", {true, false, nullptr, &o.schedule, &o.chunks})) return 2;
  if (o.steps < 3) {
    std::fprintf(stderr, "gpt_turns: --steps must be >= 3 (the first is not timed; each ratio needs a reference step either side), got %d\n",
                 o.steps);
    return 2;
  }
  bench::print_what_it_runs_on();
  std::printf("GPT %d layers, hidden %d, seq %d; %d microbatches x %d; %s on %d stages x %d chunk%s x 1 thread and the\n"
              "reference on 1 thread take turns, a step each, %d steps each (the first untimed)\n\n",
              o.model.layers, o.model.hidden, o.model.seq_len, o.microbatches, o.microbatch_size, o.schedule.c_str(), o.stages,
              o.chunks, o.chunks == 1 ? "" : "s", o.steps);
  std::vector<step_metrics> pipe, ref;
  run_taking_turns(o, pipe, ref);

  // Pipeline step k ran between reference steps k - 1 and k.
  std::printf("| step | reference before | %s | reference after | vs reference | = schedule | x actions' speed |\n"
              "|---|---|---|---|---|---|---|\n",
              o.schedule.c_str());
  std::vector<double> ratio, schedule, speed, ref_moved;
  for (size_t k = 2; k < pipe.size() && k < ref.size(); ++k) {
    const double before = ref[k - 1].tokens_per_s, after = ref[k].tokens_per_s;
    const double r = pipe[k].tokens_per_s / ((before + after) / 2), s = o.stages * (1 - pipe[k].bubble_ratio);
    ratio.push_back(r);
    schedule.push_back(s);
    speed.push_back(r / s);
    ref_moved.push_back(bench::moved(before, after));
    std::printf("| %zu | %.0f | %.0f | %.0f | %.3fx | %.3f | %.3f |\n", k + 1, before, pipe[k].tokens_per_s, after, r, s,
                r / s);
  }
  if (ratio.empty()) throw std::runtime_error("no step had a reference step either side");
  std::printf("\n%s vs reference: median %.3fx = schedule %.3f x actions' speed %.3f (the steps' ratios %.3f-%.3f, %zu of them)\n",
              o.schedule.c_str(), median(ratio), median(schedule), median(speed),
              *std::min_element(ratio.begin(), ratio.end()), *std::max_element(ratio.begin(), ratio.end()), ratio.size());
  std::vector<double> ref_timed;
  for (size_t k = 1; k < ref.size(); ++k) ref_timed.push_back(ref[k].tokens_per_s);
  std::printf("machine: the reference's speed moved by %.1f%% between consecutive steps (median; up to %.1f%%),\n"
              "its timed steps spanning %.3fx from slowest to fastest\n",
              100 * median(ref_moved), 100 * *std::max_element(ref_moved.begin(), ref_moved.end()), spread(ref_timed));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return bench::run_reporting_errors("gpt_turns", [&] { return bench_main(argc, argv); });
}
