// Benchmark: pipelined GPTs (2 stages, one thread each) against the unpartitioned reference
// (one thread), the runs taking turns a step at a time in one process: step k of each schedule
// named, then reference step k, then step k + 1 of each. Each pipeline step is compared with the
// two reference steps around it, and with the other schedules' steps of the same round, seconds
// apart, so a shared machine's slow spells (seconds to minutes) hit both sides of each ratio;
// gpt_throughput compares whole runs, minutes apart. Prints every step's ratio, split as in
// gpt_throughput (schedule: stages x busy share; the actions' speed against the reference's),
// their medians and spread, how far the reference's own speed moved between its consecutive
// steps and, for two or more schedules, each against the first, round by round.
//
//   bench/gpt_turns [--schedule 1f1b[,zbv,zbv:strict,zbv:whole,...] --chunks (each schedule's default) --layers 8
//                    --hidden 256 --seq-len 128 --microbatch-size 4 --microbatches 16 --steps 12]
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
#include "core/schedule/policy_registry.hpp"
#include "core/schedule/schedule_registry.hpp"
#include "core/train/reference_trainer.hpp"

using namespace actorpipe;

namespace {

// Runs taking turns, sides 0 .. n - 1 in a cycle: a side waits for its first turn before it
// starts; after each of its steps it hands the turn to the next side still running and waits for
// it back, or for every other side's end.
class turns {
 public:
  explicit turns(int sides) : finished_(sides, false) {}

  void wait_turn(int side) {
    std::unique_lock<std::mutex> lock(m_);
    cv_.wait(lock, [&] { return turn_ == side || others_finished(side); });
  }

  void step_done(int side) {
    std::unique_lock<std::mutex> lock(m_);
    pass_on(side);
    cv_.wait(lock, [&] { return turn_ == side || others_finished(side); });
  }

  void finish(int side) {
    std::lock_guard<std::mutex> lock(m_);
    finished_[side] = true;
    pass_on(side);
  }

 private:
  void pass_on(int side) {
    const int n = static_cast<int>(finished_.size());
    for (int i = 1; i <= n; ++i) {
      const int next = (side + i) % n;
      if (!finished_[next]) {
        turn_ = next;
        break;
      }
    }
    cv_.notify_all();
  }

  bool others_finished(int side) const {
    for (size_t i = 0; i < finished_.size(); ++i)
      if (static_cast<int>(i) != side && !finished_[i]) return false;
    return true;
  }

  std::mutex m_;
  std::condition_variable cv_;
  int turn_ = 0;
  std::vector<bool> finished_;
};

// Runs the pipelines (sides 0 .. n - 1, one per entry of `pipelines`) and then the reference
// (side n), each on its own thread, set up when its first turn comes (so no two setups overlap).
// Fills each side's step reports; rethrows the first side's error.
void run_taking_turns(const std::vector<train_options>& pipelines, std::vector<std::vector<step_metrics>>& steps) {
  const int n = static_cast<int>(pipelines.size());
  turns t(n + 1);
  steps.assign(n + 1, {});
  std::vector<std::exception_ptr> errors(n + 1);
  std::vector<std::thread> threads;
  for (int side = 0; side <= n; ++side)
    threads.emplace_back([&, side] {
      t.wait_turn(side);
      const auto on_step = [&, side](const step_metrics& m) {
        steps[side].push_back(m);
        t.step_done(side);
      };
      try {
        if (side < n) run_pipeline(pipelines[side], on_step);
        else run_reference(pipelines[0], on_step);
      } catch (...) {
        errors[side] = std::current_exception();
      }
      t.finish(side);
    });
  for (auto& th : threads) th.join();
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
}

// The largest over the smallest.
double spread(const std::vector<double>& v) { return *std::max_element(v.begin(), v.end()) / *std::min_element(v.begin(), v.end()); }

// "1f1b", "zbv x 2 chunks", "zbv x 2 chunks, strict order" or "..., fills run whole".
std::string describe(const train_options& o) {
  return o.schedule + (o.chunks == 1 ? "" : " x " + std::to_string(o.chunks) + " chunks") +
         (!o.fill_weight_grads ? ", strict order" : o.pause_filled_weight_grads ? "" : ", fills run whole");
}

// Takes `suffix` off the end of `name`; whether it was there.
bool take_suffix(std::string& name, const std::string& suffix) {
  if (name.size() <= suffix.size() || name.compare(name.size() - suffix.size(), suffix.size(), suffix) != 0) return false;
  name.resize(name.size() - suffix.size());
  return true;
}

// The comma-separated schedule names, each with --chunks where it was given, else the
// schedule's default chunk count; a name ending in ":strict" runs each rank's plan strictly in
// order (no W out of turn, train --no-w-fill), one ending in ":whole" runs its W out of turn
// without pausing them (train_options::pause_filled_weight_grads).
std::vector<train_options> pipelines_to_run(const train_options& o, const std::string& schedules, int chunks) {
  std::vector<train_options> out;
  size_t from = 0;
  while (from <= schedules.size()) {
    const size_t comma = std::min(schedules.find(',', from), schedules.size());
    train_options p = o;
    p.schedule = schedules.substr(from, comma - from);
    if (take_suffix(p.schedule, ":strict")) p.fill_weight_grads = false;
    if (take_suffix(p.schedule, ":whole")) p.pause_filled_weight_grads = false;
    if (p.schedule.empty()) throw std::invalid_argument("--schedule needs schedule names separated by commas, got '" + schedules + "'");
    std::string known;  // checked before anything runs (the header was printed, then exit 1)
    bool found = false;
    for (const auto& info : list_schedules()) {
      known += (known.empty() ? "" : ", ") + info.name;
      found = found || info.name == p.schedule;
    }
    if (!found) throw std::invalid_argument("--schedule: unknown schedule '" + p.schedule + "' (known: " + known + ")");
    p.chunks = chunks > 0 ? chunks : default_chunks(p.schedule);
    // The schedule's own rules (zbv's 2 chunks, dualpipev's microbatches), before anything runs:
    // a bad pair was said after the reference's turns (77 s), exit 1.
    if (!is_dynamic_policy(p.schedule)) (void)make_schedule(p.schedule, {p.stages, p.microbatches, p.chunks});
    out.push_back(p);
    from = comma + 1;
  }
  return out;
}

int bench_main(int argc, char** argv) {
  ensure_best_blas_kernels(argv);
  train_options o = bench::gpt_bench_options();
  o.stages = 2;
  o.steps = 12;
  std::string schedules = "1f1b";
  int chunks = 0;  // each schedule's default
  if (!bench::parse_gpt_bench_flags(argc, argv, o, "gpt_turns", {true, false, nullptr, &schedules, &chunks})) return 2;
  if (o.steps < 3) {
    std::fprintf(stderr, "gpt_turns: --steps must be >= 3 (the first is not timed; each ratio needs a reference step either side), got %d\n",
                 o.steps);
    return 2;
  }
  std::vector<train_options> pipes;
  try {  // a bad --schedule or --chunks is a bad flag: exit 2, as the others
    pipes = pipelines_to_run(o, schedules, chunks);
  } catch (const std::invalid_argument& e) {
    std::fprintf(stderr, "gpt_turns: %s\n", e.what());
    return 2;
  }
  const int n = static_cast<int>(pipes.size());
  bench::print_what_it_runs_on();
  std::string names;
  for (const auto& p : pipes) names += (names.empty() ? "" : ", ") + describe(p);
  std::printf("GPT %d layers, hidden %d, seq %d; %d microbatches x %d; %s on %d stages x 1 thread and the\n"
              "reference on 1 thread take turns, a step each, %d steps each (the first untimed)\n",
              o.model.layers, o.model.hidden, o.model.seq_len, o.microbatches, o.microbatch_size, names.c_str(), o.stages,
              o.steps);
  std::vector<std::vector<step_metrics>> steps;
  run_taking_turns(pipes, steps);
  const std::vector<step_metrics>& ref = steps[n];

  // Pipeline step k ran between reference steps k - 1 and k.
  std::vector<std::vector<double>> ratio(n), schedule(n), speed(n);
  std::vector<double> ref_moved;
  for (int i = 0; i < n; ++i) {
    const auto& pipe = steps[i];
    std::printf("\n| step | reference before | %s | reference after | vs reference | = schedule | x actions' speed |\n"
                "|---|---|---|---|---|---|---|\n",
                describe(pipes[i]).c_str());
    for (size_t k = 2; k < pipe.size() && k < ref.size(); ++k) {
      const double before = ref[k - 1].tokens_per_s, after = ref[k].tokens_per_s;
      const double r = pipe[k].tokens_per_s / ((before + after) / 2), s = o.stages * (1 - pipe[k].bubble_ratio);
      ratio[i].push_back(r);
      schedule[i].push_back(s);
      speed[i].push_back(r / s);
      if (i == 0) ref_moved.push_back(bench::moved(before, after));
      std::printf("| %zu | %.0f | %.0f | %.0f | %.3fx | %.3f | %.3f |\n", k + 1, before, pipe[k].tokens_per_s, after, r, s,
                  r / s);
    }
    if (ratio[i].empty()) throw std::runtime_error("no step had a reference step either side");
  }
  std::printf("\n");
  for (int i = 0; i < n; ++i)
    std::printf("%s vs reference: median %.3fx; medians of its factors: schedule %.3f, actions' speed %.3f (each its own "
                "median, so their product need not be the ratio's; the steps' ratios %.3f-%.3f, %zu of them)\n",
                describe(pipes[i]).c_str(), median(ratio[i]), median(schedule[i]), median(speed[i]),
                *std::min_element(ratio[i].begin(), ratio[i].end()), *std::max_element(ratio[i].begin(), ratio[i].end()),
                ratio[i].size());
  // Each schedule against the first, round by round (steps of one round run seconds apart).
  for (int i = 1; i < n; ++i) {
    std::vector<double> r, s, a;
    for (size_t k = 1; k < steps[0].size() && k < steps[i].size(); ++k) {
      r.push_back(steps[i][k].tokens_per_s / steps[0][k].tokens_per_s);
      s.push_back((1 - steps[i][k].bubble_ratio) / (1 - steps[0][k].bubble_ratio));
      a.push_back(r.back() / s.back());
    }
    if (r.empty()) continue;
    std::printf("%s vs %s, round by round: median %.3fx; medians of its factors: schedule %.3f, actions' speed %.3f "
                "(rounds %.3f-%.3f, %zu of them; the former ahead in %zu)\n",
                describe(pipes[i]).c_str(), describe(pipes[0]).c_str(), median(r), median(s), median(a),
                *std::min_element(r.begin(), r.end()), *std::max_element(r.begin(), r.end()), r.size(),
                static_cast<size_t>(std::count_if(r.begin(), r.end(), [](double x) { return x > 1; })));
  }
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
