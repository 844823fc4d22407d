// Benchmark: how much the actor runtime adds to a schedule's ideal time. Every virtual stage
// is a fixed-cost stand-in (F, B, I, W sleep for set times), so the simulator's makespan for
// the same plan is exactly what a zero-overhead runtime would take; the ratio measured /
// simulated is the runtime's cost. Target: <= 1.03. A second ratio replays the plan in the
// simulator on the action times actually measured, which takes the stand-in's own timing
// error (the OS's sleep) out and leaves the runtime's: dispatch and message hops. Both run the
// plan as listed (--no-w-fill): on these exact costs the plan is already the best order. A
// last column runs the schedules that split B with train's default, W filling waits (each W
// in 4 pieces, so it can give way to an F or I), against the same simulated makespan.
//
//   bench/pipeline_overhead [--quick] [--only NAME] [--trace-dir DIR]
//     --quick: P in {2, 4}, M = 8; --only: that schedule alone; --trace-dir: each run's measured
//     last step as a Chrome trace, DIR/NAME-pP-mM[-fill].json (opens in Perfetto)
#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "actors/pipeline_runtime.hpp"
#include "bench/bench_args.hpp"
#include "core/blas_kernels.hpp"
#include "core/schedule/policy_registry.hpp"
#include "core/schedule/schedule_registry.hpp"
#include "core/sim/chrome_trace.hpp"
#include "core/sim/policy_simulator.hpp"
#include "core/train/fixed_cost_chunk.hpp"

using namespace actorpipe;

int main(int argc, char** argv) {
  ensure_best_blas_kernels(argv);
  bool quick = false;
  std::string only, trace_dir;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--help" || a == "-h") {
      std::printf("usage: pipeline_overhead [--quick] [--only NAME] [--trace-dir DIR]\n"
                  "  each schedule's measured step against its simulated ideal on fixed costs (bench/pipeline_overhead.cpp)\n"
                  "  --quick: P in {2, 4} and M = 8 only (the full run adds P = 8 and M = 32)\n"
                  "  --only NAME: that schedule alone\n"
                  "  --trace-dir DIR: each run's measured last step as a Chrome trace, DIR/NAME-pP-mM[-fill].json\n");
      return 0;
    } else if (a == "--quick") {
      quick = true;
    } else if (a == "--only" || a == "--trace-dir") {
      // An empty value ran everything (--only "") or wrote nothing (--trace-dir ""), exit 0.
      if (i + 1 >= argc || argv[i + 1][0] == '\0') {
        std::fprintf(stderr, "pipeline_overhead: %s needs a value (usage: [--quick] [--only NAME] [--trace-dir DIR])\n",
                     a.c_str());
        return 2;
      }
      (a == "--only" ? only : trace_dir) = argv[++i];
    } else {
      std::fprintf(stderr, "pipeline_overhead: unknown argument '%s' (usage: [--quick] [--only NAME] [--trace-dir DIR])\n",
                   a.c_str());
      return 2;
    }
  }
  const std::vector<std::string> schedules = {"gpipe", "1f1b", "interleaved", "zb-h1", "zbv", "dualpipev", "greedy"};
  if (!only.empty() && std::find(schedules.begin(), schedules.end(), only) == schedules.end()) {
    std::string choices;
    for (const auto& name : schedules) choices += (choices.empty() ? "" : ", ") + name;
    std::fprintf(stderr, "pipeline_overhead: --only %s: not one of %s\n", only.c_str(), choices.c_str());
    return 2;
  }
  // The folder is checked before the runs (a missing one was said after each run, and exit 0).
  if (!trace_dir.empty()) {
    std::error_code ec;
    if (!std::filesystem::is_directory(trace_dir, ec)) {
      std::fprintf(stderr, "pipeline_overhead: --trace-dir '%s' is not a folder\n", trace_dir.c_str());
      return 2;
    }
  }
  // Each run's measured last step, in milliseconds, for Perfetto; a trace not written fails the run.
  int unwritten = 0;
  auto write_trace = [&trace_dir, &unwritten](const std::string& name, int P, int M, const char* suffix,
                                              const sim_result& r) {
    if (trace_dir.empty()) return;
    const std::string path =
        trace_dir + "/" + name + "-p" + std::to_string(P) + "-m" + std::to_string(M) + suffix + ".json";
    errno = 0;
    std::ofstream f(path);
    if (!(f << render_chrome_trace(in_milliseconds(r)) << std::flush)) {
      std::fprintf(stderr, "pipeline_overhead: cannot write %s: %s\n", path.c_str(),
                   errno ? std::strerror(errno) : "write failed");
      ++unwritten;
    }
  };
  fixed_costs fc;
  fc.forward_s = 0.004;
  fc.backward_s = 0.008;
  fc.input_grad_s = 0.004;
  fc.weight_grad_s = 0.004;
  cost_model costs = cost_model::uniform(fc.forward_s, fc.backward_s, fc.input_grad_s, fc.weight_grad_s);
  costs.early_input_grad = true;  // as the runtime runs B: its input gradient leaves after its I part
  const bench::load_watch load;
  // Its actions sleep: no kernel runs, so there is no BLAS or LibTorch to name.
  std::printf("fixed costs per virtual stage (each action sleeps: no kernels run): F %.0f ms, B %.0f ms (I, then W), "
              "I %.0f ms, W %.0f ms; last of 2 steps measured\n\n",
              fc.forward_s * 1e3, fc.backward_s * 1e3, fc.input_grad_s * 1e3, fc.weight_grad_s * 1e3);
  std::printf("| schedule | P | M | V | simulated ms | measured ms | measured / simulated | measured / replayed | "
              "with W filling waits / simulated |\n"
              "|---|---|---|---|---|---|---|---|---|\n");
  double worst = 0, log_sum = 0, worst_replay = 0, log_replay = 0, worst_fill = 0, log_fill = 0;
  int n = 0, n_fill = 0;
  for (const std::string& schedule : schedules)
    for (int P : quick ? std::vector<int>{2, 4} : std::vector<int>{2, 4, 8})
      for (int M : quick ? std::vector<int>{8} : std::vector<int>{8, 32}) {
        const char* name = schedule.c_str();
        if (!only.empty() && only != schedule) continue;
        const int V = default_chunks(name);
        train_options o;  // the model fields only feed the (ignored) token tensors
        o.schedule = name;
        o.stages = P;
        o.chunks = V;
        o.microbatches = M;
        o.microbatch_size = 1;
        o.model.layers = P * V;
        o.model.seq_len = 8;
        o.model.vocab = 16;
        o.model.hidden = 8;
        o.model.heads = 1;
        o.steps = 2;
        o.plan_on_measured_costs = false;  // the runtime against the generated plan, nothing else
        o.fill_weight_grads = false;
        double simulated = 0;
        bool splits = false;  // the plan has W actions (greedy, as made here, runs whole Bs)
        try {
          if (is_dynamic_policy(name)) {
            auto policies = make_policies(name, P, M, V);
            simulated = simulate_policies(policy_placement(name, P, V), M, policies, costs).timeline.makespan;
          } else {
            const plan p = make_schedule(name, {P, M, V});
            splits = p.uses_split_backward();
            simulated = simulate(p, costs).makespan;
          }
        } catch (const std::invalid_argument& e) {
          std::printf("| %s | %d | %d | %d | - | - | not run: %s | | |\n", name, P, M, V, e.what());
          continue;
        }
        train_result r = run_pipeline(o, {}, fixed_cost_factory(fc));
        const double measured = r.last_step.makespan;
        write_trace(name, P, M, "", r.last_step);
        const double ratio = measured / simulated;
        const double replay = measured / r.predicted.makespan;
        worst = std::max(worst, ratio);
        worst_replay = std::max(worst_replay, replay);
        log_sum += std::log(ratio);
        log_replay += std::log(replay);
        ++n;
        std::string fill = "-";
        if (splits) {
          o.fill_weight_grads = true;
          fixed_costs pieces = fc;
          pieces.weight_grad_pieces = 4;
          const train_result rf = run_pipeline(o, {}, fixed_cost_factory(pieces));
          write_trace(name, P, M, "-fill", rf.last_step);
          const double filled = rf.last_step.makespan / simulated;
          worst_fill = std::max(worst_fill, filled);
          log_fill += std::log(filled);
          ++n_fill;
          char buf[32];
          std::snprintf(buf, sizeof buf, "%.3f", filled);
          fill = buf;
        }
        std::printf("| %s | %d | %d | %d | %.1f | %.1f | %.3f | %.3f | %s |\n", name, P, M, V, simulated * 1e3,
                    measured * 1e3, ratio, replay, fill.c_str());
        std::fflush(stdout);
      }
  std::printf("\n%d runs: measured / simulated: geometric mean %.3f, worst %.3f (target <= 1.03); "
              "measured / replayed: geometric mean %.3f, worst %.3f\n",
              n, std::exp(log_sum / n), worst, std::exp(log_replay / n), worst_replay);
  if (n_fill > 0)
    std::printf("%d runs with W filling waits: measured / simulated: geometric mean %.3f, worst %.3f\n", n_fill,
                std::exp(log_fill / n_fill), worst_fill);
  if (unwritten > 0) std::fprintf(stderr, "pipeline_overhead: %d trace(s) not written (above)\n", unwritten);
  load.say();
  return unwritten > 0 ? 1 : 0;
}
