// Benchmark: tokens/s of the real GPT pipelined on 2 stages (one thread each) against the
// unpartitioned reference on one thread, same microbatches; each ratio split into what the
// schedule gives (stages x the share of the time they were busy) and how fast the actions ran
// against the reference's (both cores busy vs one); then what splitting costs: I + W against B,
// and the model in 4 half-size chunks against 2 stages (from the measured actions). Target
// >= 1.85x for 1f1b at M = 16 on 2 cores. Steps after the first are timed (the first pays for
// allocation warm-up). --repeat N runs N rounds and shows each column's median. The reference
// runs before and after every round (a round's closing run opens the next), and each ratio is
// taken against the reference interpolated to the middle of the schedule's run, so a slow phase
// of a shared machine hits both sides of it. Each round also runs two references at once, one
// per core, with no runtime between them: their speed against one alone is what the machine's
// second core costs by itself, the actions' speed a runtime that lost nothing would get. Each
// round's lines (stderr) show tokens/s as the runs end, then every ratio as (schedule x
// actions' speed).
//
//   bench/gpt_throughput [--layers 8 --hidden 256 --seq-len 128 --microbatch-size 4 --microbatches 16 --steps 3]
//                        [--repeat 1]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <future>
#include <map>
#include <string>
#include <vector>

#include "actors/pipeline_runtime.hpp"
#include "bench/gpt_bench.hpp"
#include "core/blas_kernels.hpp"
#include "core/median.hpp"
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

const std::vector<run_spec> specs = {{"1f1b", 1}, {"zb-h1", 1}, {"interleaved", 2}, {"zbv", 2}, {"gpipe", 1}};

// The rounds and what they measured. A reference run before and after every round (a round's
// closing one opens the next): each schedule's ratio is against the reference interpolated to
// the middle of its run, so a machine that drifts during a round (this shared one moves by
// several % per minute) does not favour the schedules that run early in it.
class rounds {
 public:
  explicit rounds(train_options o) : o_(std::move(o)) {}

  void run(int repeat) {
    timed before = reference_run();
    for (int round = 0; round < repeat; ++round) {
      std::fprintf(stderr, "round %d/%d: reference %.0f tokens/s", round + 1, repeat, before.tokens);
      std::vector<timed> runs;
      for (const run_spec& spec : specs) {
        o_.schedule = spec.schedule;
        o_.chunks = spec.chunks;
        const double from = now_s();
        train_result r = run_pipeline(o_);
        runs.push_back({bench::tokens_per_s(r), (from + now_s()) / 2});
        std::fprintf(stderr, ", %s %.0f", spec.schedule, runs.back().tokens);
        last_[spec.schedule] = std::move(r);
      }
      const timed pair = pair_run();
      std::fprintf(stderr, ", two references at once %.0f each", pair.tokens);
      const timed after = reference_run();
      std::fprintf(stderr, ", reference %.0f\n  against the reference interpolated to each run's middle:", after.tokens);
      for (size_t i = 0; i < specs.size(); ++i) record(specs[i].schedule, runs[i], before, after, i == 0);
      pair_speed_.push_back(pair.tokens / interpolated(pair, before, after));
      std::fprintf(stderr, "; two references at once %.3f each", pair_speed_.back());
      std::fprintf(stderr, "\n");
      record_split_costs();
      before = after;
    }
  }

  void print(int repeat) {
    std::printf("\n| run | tokens/s | vs reference | = schedule: stages x busy share | x actions' speed vs reference |\n"
                "|---|---|---|---|---|\n| reference, 1 thread | %.0f | 1.00x | 1.00 | 1.00 |\n", median(reference_));
    for (const run_spec& spec : specs) {
      const samples& s = got_[spec.schedule];
      std::printf("| %s, 2 stages x %d chunk%s x 1 thread | %.0f | %.2fx | %.3f | %.3f |\n", spec.schedule, spec.chunks,
                  spec.chunks == 1 ? "" : "s", median(s.tokens), median(s.ratio), median(s.schedule), median(s.speed));
    }
    const double pair = median(pair_speed_);
    std::printf("| two references at once, 1 thread each | %.0f each | %.2fx each | 1.00 | %.3f |\n",
                median(pair_tokens_), pair, pair);
    std::printf("\n%s; the schedule column is what the pipeline would give if its actions ran as fast as the\n"
                "reference's (2 x (1 - measured bubble)); the last is how fast they ran with both cores busy.\n"
                "Two references at once, one per core, with no runtime between them, show what the machine's second\n"
                "core costs by itself: %.3f of one thread's speed. A runtime that lost nothing would reach the\n"
                "schedule factor x %.3f; 1f1b's actions ran at %.3f of that, zbv's at %.3f.\n",
                repeat == 1 ? "one round, ratios against the reference interpolated to each run's middle"
                            : "each cell: its median over the rounds (so a row's two factors need not multiply to its "
                              "ratio), ratios against the reference interpolated to each run's middle",
                pair, pair, median(got_["1f1b"].speed) / pair, median(got_["zbv"].speed) / pair);
    if (repeat > 1) print_per_round("1f1b vs reference per round:", got_["1f1b"].ratio);
    print_noise();
    std::printf("\nper microbatch, whole model (each round's last step, measured actions; %s):\n",
                repeat == 1 ? "one round" : "medians over the rounds, each ratio within its round");
    std::printf("  B (1f1b) %.1f ms; I + W (zb-h1) %.1f ms = %.3f x B\n", median(ms_b_), median(ms_iw_), median(iw_b_));
    std::printf("  F in 2 stages (1f1b) %.1f ms; in 4 half-size chunks (zbv) %.1f ms = %.3f x\n", median(ms_f2_),
                median(ms_f4_), median(f4_f2_));
    std::printf("  I + W in 4 half-size chunks (zbv) %.1f ms = %.3f x B (1f1b)\n", median(ms_iw4_), median(iw4_b_));
    if (repeat > 1) print_per_round("  I + W (zb-h1) / B per round:", iw_b_);
    std::printf("  (bench/split_costs measures these without the drift between runs)\n");
    for (const char* s : {"zb-h1", "zbv"}) {
      if (last_[s].replan_report.empty()) continue;
      std::string report = last_[s].replan_report;
      for (size_t at = report.find('\n'); at != std::string::npos; at = report.find('\n', at + 1)) report.insert(at + 1, "    ");
      std::printf("  %s (the last round):\n    %s\n", s, report.c_str());
    }
  }

 private:
  struct timed {
    double tokens, at;  // tokens/s; the middle of the run, seconds since the bench began
  };

  double now_s() const { return std::chrono::duration<double>(std::chrono::steady_clock::now() - started_).count(); }

  timed reference_run() {
    const double from = now_s();
    const train_result r = run_reference(o_);
    const double t = bench::tokens_per_s(r);
    for (size_t k = 2; k < r.steps.size(); ++k)  // the same work step after step: only the machine moves it
      step_moved_ = std::max(step_moved_, bench::moved(r.steps[k - 1].seconds, r.steps[k].seconds));
    if (!reference_.empty()) round_moved_ = std::max(round_moved_, bench::moved(reference_.back(), t));
    reference_.push_back(t);
    return timed{t, (from + now_s()) / 2};
  }

  // Two references on two threads at once (each its own model, the same work): tokens/s of
  // each, averaged. What the second core costs the first with no runtime involved. (Their
  // models' initial values may interleave draws from LibTorch's global generator: only their
  // speed is read.) The second's error, if any, is rethrown here by get().
  timed pair_run() {
    const double from = now_s();
    std::future<double> second = std::async(std::launch::async, [this] { return bench::tokens_per_s(run_reference(o_)); });
    const double first = bench::tokens_per_s(run_reference(o_));
    const double other = second.get();
    pair_tokens_.push_back((first + other) / 2);
    return timed{pair_tokens_.back(), (from + now_s()) / 2};
  }

  // The reference's tokens/s at a run's middle, interpolated between the round's two.
  static double interpolated(const timed& run, const timed& before, const timed& after) {
    const double w = (run.at - before.at) / (after.at - before.at);
    return before.tokens + w * (after.tokens - before.tokens);
  }

  // One schedule's run against the reference interpolated between the round's two.
  void record(const char* schedule, const timed& run, const timed& before, const timed& after, bool first) {
    const double base = interpolated(run, before, after);
    const double t = run.tokens, sched = busy_ranks(last_[schedule], o_.stages);
    samples& s = got_[schedule];
    s.tokens.push_back(t);
    s.ratio.push_back(t / base);
    s.schedule.push_back(sched);
    s.speed.push_back(t / base / sched);
    std::fprintf(stderr, "%s %s %.2fx (%.3f x %.3f)", first ? "" : ",", schedule, t / base, sched, t / base / sched);
  }

  // Split backward against full backward on the same 2 stages (1f1b vs zb-h1), and the same
  // model cut into 4 chunks instead of 2 stages (zbv vs 1f1b), this round: 1.00 means no overhead.
  void record_split_costs() {
    const double b = per_microbatch(last_["1f1b"], op_kind::backward);
    const double iw = per_microbatch(last_["zb-h1"], op_kind::input_grad) + per_microbatch(last_["zb-h1"], op_kind::weight_grad);
    const double f2 = per_microbatch(last_["1f1b"], op_kind::forward), f4 = per_microbatch(last_["zbv"], op_kind::forward);
    const double iw4 = per_microbatch(last_["zbv"], op_kind::input_grad) + per_microbatch(last_["zbv"], op_kind::weight_grad);
    iw_b_.push_back(iw / b);
    f4_f2_.push_back(f4 / f2);
    iw4_b_.push_back(iw4 / b);
    ms_b_.push_back(1e3 * b);
    ms_iw_.push_back(1e3 * iw);
    ms_f2_.push_back(1e3 * f2);
    ms_f4_.push_back(1e3 * f4);
    ms_iw4_.push_back(1e3 * iw4);
  }

  // How much the machine moved the reference's own speed: between one timed step and the next,
  // and between a round's two runs. Ratios here are no more certain than that.
  void print_noise() const {
    // A move not measured (one timed step, or one run) is said so, not as 0%.
    const auto up_to = [](double moved, const char* unmeasured) {
      char text[96];
      if (moved < 0) return std::string(unmeasured);
      std::snprintf(text, sizeof text, "by up to %.1f%%", 100 * moved);
      return std::string(text);
    };
    std::printf("machine: the reference's speed moved %s between consecutive steps and %s between\n"
                "its runs before and after a round: %s\n",
                up_to(step_moved_, "(not measured: one timed step; give --steps 3 or more)").c_str(),
                up_to(round_moved_, "(not measured: one run)").c_str(),
                std::max(step_moved_, round_moved_) > noisy_above
                    ? "a noisy machine. The ratios above are uncertain by about as much;\n"
                      "a target within a few % needs a quieter machine or more rounds."
                    : "quiet enough for the ratios above to hold to a few %.");
  }

  static void print_per_round(const char* what, const std::vector<double>& values) {
    std::printf("%s", what);
    for (double x : values) std::printf(" %.3f", x);
    std::printf("\n");
  }

  train_options o_;
  const std::chrono::steady_clock::time_point started_ = std::chrono::steady_clock::now();
  std::vector<double> reference_;
  double step_moved_ = -1, round_moved_ = -1;  // the largest moves of the reference's speed (bench::moved); -1: none
  static constexpr double noisy_above = 0.05;
  std::vector<double> pair_tokens_, pair_speed_;  // two references at once: tokens/s each; / the reference
  std::map<std::string, samples> got_;
  std::map<std::string, train_result> last_;  // the last round's runs
  // Per round (both sides from the same round): I + W (zb-h1) / B (1f1b), F in 4 half chunks
  // (zbv) / F in 2 stages (1f1b), I + W in 4 half chunks (zbv) / B (1f1b); and the
  // per-microbatch milliseconds they come from.
  std::vector<double> iw_b_, f4_f2_, iw4_b_, ms_b_, ms_iw_, ms_f2_, ms_f4_, ms_iw4_;
};

int bench_main(int argc, char** argv) {
  ensure_best_blas_kernels(argv);
  train_options o = bench::gpt_bench_options();
  o.stages = 2;
  int repeat = 1;
  if (!bench::parse_gpt_bench_flags(argc, argv, o, "gpt_throughput", {true, false, &repeat})) return 2;
  if (o.steps < 2) {
    std::fprintf(stderr, "gpt_throughput: --steps must be >= 2 (the first step is not timed), got %d\n", o.steps);
    return 2;
  }
  if (o.model.layers < 4) {  // checked before any run, not when interleaved's turn comes
    std::fprintf(stderr, "gpt_throughput: --layers must be >= 4 (interleaved and zbv cut the model into 2 stages x 2 chunks), got %d\n",
                 o.model.layers);
    return 2;
  }
  bench::print_what_it_runs_on();
  std::printf("GPT %d layers, hidden %d, seq %d; %d microbatches x %d; %d steps (first untimed); %d round%s\n",
              o.model.layers, o.model.hidden, o.model.seq_len, o.microbatches, o.microbatch_size, o.steps, repeat,
              repeat == 1 ? " (every schedule between two reference runs)"
                          : "s (each: every schedule, between two reference runs)");
  rounds r(o);
  r.run(repeat);
  r.print(repeat);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return bench::run_reporting_errors("gpt_throughput", [&] { return bench_main(argc, argv); });
}
