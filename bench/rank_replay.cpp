// Benchmark: each rank's actions in its plan's order, on one thread, rank after rank, with
// no wait, no runtime and no second core in it. A pipelined run's ranks compute a step's actions
// in the plan's order on two cores; split_costs times each cut's F, I and W one microbatch at
// a time. Between the two lies the order itself: half-size actions interleaved, W's run long
// after their I, more activations alive. Here each rank's whole list for one step runs as the
// plan orders it (1f1b's and interleaved's B on every virtual stage but the first as I then W,
// as train runs it; zb-h1's and zbv's plan rebuilt on costs measured here, as train rebuilds it),
// its inputs from the other rank recorded once beforehand, and every action is timed. The
// uncut model's 16 microbatches (F then B each, as the reference trainer runs them) are timed
// the same way. Each repetition runs every schedule and the uncut model (in reverse order every
// other time), so a slow phase of a shared machine hits both sides of every ratio, taken within
// the repetition; then the median over the repetitions. W's that a rank fills into a wait at run
// time (train's default) run here where the plan puts them. Then each schedule's ranks run their
// lists at once, a thread each (no waits: the inputs are recorded), against each alone: what
// sharing the machine's cores costs each schedule's actions.
//
//   bench/rank_replay [--schedule 1f1b,zbv] [--repeat 7] [--layers 8 --hidden 256 --seq-len 128
//                      --microbatch-size 4 --microbatches 16]
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <functional>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "bench/gpt_bench.hpp"
#include "core/blas_kernels.hpp"
#include "core/median.hpp"
#include "core/model/compute_threads.hpp"
#include "core/schedule/schedule_registry.hpp"
#include "core/sim/plan_choice.hpp"
#include "core/sim/simulator.hpp"
#include "core/train/run_setup.hpp"

using namespace actorpipe;

namespace {

using bench::clock_type;
using bench::seconds_since;

constexpr int op_count = 4;  // F, B, I, W: op_kind's values
const char* const op_names[op_count] = {"F", "B", "I", "W"};

int op_index(op_kind k) {
  switch (k) {
    case op_kind::forward: return 0;
    case op_kind::backward: return 1;
    case op_kind::input_grad: return 2;
    case op_kind::weight_grad: return 3;
  }
  return 0;
}

// Tensors by (virtual stage that made them, microbatch).
using tensor_map = std::map<std::pair<int, int>, tensor_box>;

// One cut of the model and what flows between its virtual stages: every F's output and every
// B's or I's input gradient of one step, recorded once, so a rank replayed alone gets from the
// other rank what that rank would have sent.
struct replayed_cut {
  std::string name;
  run_setup setup;
  std::shared_ptr<const plan> order;  // the plan each rank replays
  std::string plan_note;
  tensor_map activations, gradients;
};

// Times in seconds per rank of one replay: each op kind's sum, and the rank's whole list.
struct rank_times {
  double op[op_count] = {0, 0, 0, 0};
  double total = 0;
};

// Runs one action of `cut` on this thread; its output goes into the recorded maps when
// `record`, else into `fresh` (a rank's own hand-offs, as its thread keeps them). Returns the
// seconds the action took.
double run_action(replayed_cut& cut, const action& a, bool record, tensor_map& fresh_act, tensor_map& fresh_grad,
                  const microbatch_tensors* data) {
  const int last = cut.setup.place.num_virtual_stages() - 1;
  const int v = a.virtual_stage;
  chunk_compute& runner = *cut.setup.runners[v];
  auto take = [&](tensor_map& fresh, tensor_map& recorded, int from) {
    const auto key = std::make_pair(from, a.microbatch);
    const auto f = fresh.find(key);
    if (f != fresh.end()) return f->second;
    const auto r = recorded.find(key);
    if (r == recorded.end()) throw std::logic_error("rank_replay: no recorded input for " + to_string(a));
    return r->second;
  };
  auto put = [&](tensor_map& fresh, tensor_map& recorded, const tensor_box& t) {
    (record ? recorded : fresh)[std::make_pair(v, a.microbatch)] = t;
  };
  const double loss_scale = 1.0 / cut.order->microbatches;  // as a step scales each microbatch's loss
  const microbatch_tensors& mb = data[a.microbatch];
  const auto t0 = clock_type::now();
  switch (a.op) {
    case op_kind::forward: {
      const tensor_box in = v == 0 ? mb.inputs : take(fresh_act, cut.activations, v - 1);
      forward_result r = runner.forward(a.microbatch, in, v == last ? mb.targets : tensor_box(), loss_scale);
      if (v != last) put(fresh_act, cut.activations, r.output);
      break;
    }
    case op_kind::backward:
    case op_kind::input_grad: {
      const tensor_box g = v == last ? tensor_box() : take(fresh_grad, cut.gradients, v + 1);
      // train's B on every virtual stage but the first: I, its gradient sent, then W
      const bool early = a.op == op_kind::backward && v > 0;
      tensor_box out = runner.backward(a.microbatch, g, a.op == op_kind::input_grad || early);
      if (early) runner.weight_grad(a.microbatch);
      if (v > 0) put(fresh_grad, cut.gradients, out);
      break;
    }
    case op_kind::weight_grad: runner.weight_grad(a.microbatch); break;
  }
  return seconds_since(t0);
}

// Every rank's actions in one order valid across ranks (the plan simulated, its events by start
// time), untimed for the ratios: records what crosses between virtual stages, and returns the
// events with their measured durations laid end to end (for the costs a plan is rebuilt on).
std::vector<timeline_event> record(replayed_cut& cut, const plan& p, const microbatch_tensors* data) {
  sim_result sim = simulate(p, cost_model::uniform(1, 2, 1, 1));
  std::vector<timeline_event> order;
  for (const timeline_event& e : sim.events)
    if (!e.continues) order.push_back(e);
  std::stable_sort(order.begin(), order.end(), [](const timeline_event& a, const timeline_event& b) {
    return std::tie(a.start, a.rank) < std::tie(b.start, b.rank);
  });
  for (auto& runner : cut.setup.runners) runner->zero_grad();
  tensor_map unused_act, unused_grad;
  std::vector<timeline_event> measured;
  double now = 0;
  for (const timeline_event& e : order) {
    timeline_event m = e;
    m.start = now;
    m.end = now += 1e3 * run_action(cut, e.act, true, unused_act, unused_grad, data);
    measured.push_back(m);
  }
  return measured;
}

replayed_cut prepare_cut(const train_options& base, const std::string& name, const microbatch_tensors* data) {
  train_options o = base;
  o.schedule = name;
  o.chunks = name == "interleaved" || name == "zbv" ? 2 : 1;
  o.stages = 2;
  replayed_cut cut{name, prepare_run(o), nullptr, "", {}, {}};
  cut.setup.runners.resize(cut.setup.place.num_virtual_stages());
  if (!cut.setup.static_plan) throw std::invalid_argument("--schedule " + name + " is a dynamic policy: it has no plan to replay");
  cut.order = cut.setup.static_plan;
  const std::vector<timeline_event> measured = record(cut, *cut.order, data);
  if (replan_step(o) >= 0) {  // as train does after its first step: a plan rebuilt on the costs measured, or kept
    cost_model costs = median_costs(measured, cut.setup.place.num_virtual_stages());
    const plan_choice chosen =
        choose_plan(name, o.stages, o.microbatches, cut.setup.place, costs, cut.setup.static_plan);
    cut.order = chosen.use;
    std::ostringstream note;
    if (chosen.built_on == "running")
      note << "the generated plan, kept on these costs as train keeps it";
    else
      note << "plan rebuilt on these costs as train rebuilds it ("
           << (chosen.built_on == "measured" ? "as measured" : "the ranks' speeds made equal") << ")";
    note << "; simulated bubble " << std::lround(1000 * chosen.on_measured.bubble_ratio) / 10.0 << "%";
    cut.plan_note = note.str();
  } else {
    cut.plan_note = "the generated plan (train does not rebuild it)";
  }
  return cut;
}

// One rank's list on the calling thread, every action timed.
rank_times replay_rank(replayed_cut& cut, const std::vector<action>& actions, const microbatch_tensors* data) {
  tensor_map fresh_act, fresh_grad;
  rank_times t;
  for (const action& a : actions) {
    const double s = run_action(cut, a, false, fresh_act, fresh_grad, data);
    t.op[op_index(a.op)] += s;
    t.total += s;
  }
  return t;
}

// Each rank's list in turn, alone on this thread.
std::vector<rank_times> replay(replayed_cut& cut, const microbatch_tensors* data) {
  for (auto& runner : cut.setup.runners) runner->zero_grad();
  std::vector<rank_times> out;
  for (const auto& actions : cut.order->ranks) out.push_back(replay_rank(cut, actions, data));
  return out;
}

// Every rank's list at once, each on a thread of its own started together, every action timed:
// the same work as replay(), with the machine's cores shared as a running pipeline shares them
// (their caches, memory bandwidth and clocks), but with no waits: each rank's inputs from the
// other were recorded beforehand.
std::vector<rank_times> replay_together(replayed_cut& cut, const microbatch_tensors* data) {
  for (auto& runner : cut.setup.runners) runner->zero_grad();
  const int ranks = static_cast<int>(cut.order->ranks.size());
  std::vector<rank_times> out(ranks);
  std::atomic<int> ready{0};
  std::vector<std::thread> threads;
  for (int r = 0; r < ranks; ++r)
    threads.emplace_back([&, r] {
      set_compute_threads(1);  // torch's thread count is per thread
      ready.fetch_add(1);
      while (ready.load() < ranks) std::this_thread::yield();
      out[r] = replay_rank(cut, cut.order->ranks[r], data);
    });
  for (auto& t : threads) t.join();
  return out;
}

// The uncut model: each microbatch F then B whole, as the reference trainer runs them.
double replay_uncut(const run_setup& one, const microbatch_tensors* data, int microbatches) {
  chunk_compute& runner = *one.runners[0];
  runner.zero_grad();
  const auto t0 = clock_type::now();
  for (int m = 0; m < microbatches; ++m) {
    runner.forward(m, data[m].inputs, data[m].targets, 1.0 / microbatches);
    runner.backward(m, tensor_box(), false);
  }
  return seconds_since(t0);
}

std::vector<std::string> split_list(const std::string& text) {
  std::vector<std::string> out;
  std::stringstream in(text);
  for (std::string item; std::getline(in, item, ',');)
    if (!item.empty()) out.push_back(item);
  return out;
}

int bench_main(int argc, char** argv) {
  ensure_best_blas_kernels(argv);
  train_options o = bench::gpt_bench_options();
  int repeat = 7;
  std::string schedules = "1f1b,zbv";
  if (!bench::parse_gpt_bench_flags(argc, argv, o, "rank_replay", {true, false, &repeat, &schedules, nullptr, false})) return 2;
  const std::vector<std::string> names = split_list(schedules);
  if (names.empty()) throw std::invalid_argument("--schedule needs at least one schedule, got '" + schedules + "'");
  set_compute_threads(1);
  bench::print_what_it_runs_on();
  std::printf("GPT %d layers, hidden %d, seq %d; %d microbatches of %d; 2 stages; one thread (and both ranks at once on "
              "two); %d repetition(s) (after one warm-up), each replaying every schedule's ranks and the uncut model\n",
              o.model.layers, o.model.hidden, o.model.seq_len, o.microbatches, o.microbatch_size, repeat);

  train_options uncut_options = o;
  uncut_options.no_pipeline = true;
  uncut_options.stages = 1;
  run_setup one = prepare_run(uncut_options);
  std::vector<microbatch_tensors> data;
  for (int m = 0; m < o.microbatches; ++m) data.push_back(one.data(0, m));

  std::vector<replayed_cut> cuts;
  for (const std::string& name : names) {
    std::fprintf(stderr, "rank_replay: recording %s\n", name.c_str());
    cuts.push_back(prepare_cut(o, name, data.data()));
  }
  // [cut][repetition]: per rank; the uncut model's seconds per repetition
  std::vector<std::vector<std::vector<rank_times>>> times(cuts.size()), together(cuts.size());
  std::vector<double> uncut;
  for (int k = 0; k <= repeat; ++k) {
    std::fprintf(stderr, "rank_replay: repetition %d of %d%s\n", k, repeat, k == 0 ? " (warm-up)" : "");
    std::vector<std::function<void()>> ways;
    double u = 0;
    std::vector<std::vector<rank_times>> rep(cuts.size()), both(cuts.size());
    ways.push_back([&] { u = replay_uncut(one, data.data(), o.microbatches); });
    for (size_t c = 0; c < cuts.size(); ++c) ways.push_back([&, c] { rep[c] = replay(cuts[c], data.data()); });
    for (size_t c = 0; c < cuts.size(); ++c) ways.push_back([&, c] { both[c] = replay_together(cuts[c], data.data()); });
    if (k % 2) std::reverse(ways.begin(), ways.end());
    for (auto& way : ways) way();
    if (k == 0) continue;
    uncut.push_back(u);
    for (size_t c = 0; c < cuts.size(); ++c) times[c].push_back(rep[c]), together[c].push_back(both[c]);
  }

  std::printf("\nthe uncut model, %d microbatches F then B: %.0f ms (median; %.0f-%.0f)\n", o.microbatches, 1e3 * median(uncut),
              1e3 * *std::min_element(uncut.begin(), uncut.end()), 1e3 * *std::max_element(uncut.begin(), uncut.end()));
  std::printf("\n| schedule | rank | F | B | I | W | the rank's list, ms | its ranks' sum / the uncut model |\n"
              "|---|---|---|---|---|---|---|---|\n");
  std::vector<std::vector<double>> sums(cuts.size());  // [cut][repetition]: ranks' sum / uncut
  for (size_t c = 0; c < cuts.size(); ++c) {
    const int ranks = static_cast<int>(times[c][0].size());
    for (size_t k = 0; k < uncut.size(); ++k) {
      double s = 0;
      for (const rank_times& r : times[c][k]) s += r.total;
      sums[c].push_back(s / uncut[k]);
    }
    for (int r = 0; r < ranks; ++r) {
      std::vector<double> op[op_count], total;
      for (const auto& rep : times[c]) {
        for (int i = 0; i < op_count; ++i) op[i].push_back(1e3 * rep[r].op[i]);
        total.push_back(1e3 * rep[r].total);
      }
      std::printf("| %s | %d |", r == 0 ? cuts[c].name.c_str() : "", r);
      for (int i = 0; i < op_count; ++i) {
        if (median(op[i]) > 0) std::printf(" %.0f |", median(op[i]));
        else std::printf(" |");
      }
      std::printf(" %.0f |", median(total));
      if (r == 0) std::printf(" %.3f |\n", median(sums[c]));
      else std::printf(" |\n");
    }
  }
  std::printf("(F, B, I, W: each op's time summed over the rank's step, ms, median over the repetitions)\n");
  for (size_t c = 0; c < cuts.size(); ++c) std::printf("- %s: %s\n", cuts[c].name.c_str(), cuts[c].plan_note.c_str());
  for (size_t c = 0; c < cuts.size(); ++c) {
    std::vector<double> balance;
    for (const auto& rep : times[c]) balance.push_back(rep[1].total / rep[0].total);
    std::printf("- %s's balance, rank 1's list / rank 0's, within each repetition: %.3f (%.3f-%.3f)\n", cuts[c].name.c_str(),
                median(balance), *std::min_element(balance.begin(), balance.end()),
                *std::max_element(balance.begin(), balance.end()));
  }
  for (size_t c = 1; c < cuts.size(); ++c) {
    std::vector<double> ratio;
    for (size_t k = 0; k < uncut.size(); ++k) ratio.push_back(sums[c][k] / sums[0][k]);
    std::printf("- %s's ranks' sum / %s's, within each repetition: %.3f (%.3f-%.3f)\n", cuts[c].name.c_str(),
                cuts[0].name.c_str(), median(ratio), *std::min_element(ratio.begin(), ratio.end()),
                *std::max_element(ratio.begin(), ratio.end()));
  }
  // The same lists with both ranks at once: what sharing the machine's two cores costs each.
  std::printf("\nboth ranks at once, each on its own thread (no waits), against each alone, within each repetition:\n");
  std::vector<std::vector<double>> together_sums(cuts.size());  // [cut][repetition]: both ranks' sum at once / alone
  for (size_t c = 0; c < cuts.size(); ++c) {
    std::string line = "- " + cuts[c].name + ":";
    const int ranks = static_cast<int>(times[c][0].size());
    for (int r = 0; r < ranks; ++r) {
      std::vector<double> ratio;
      for (size_t k = 0; k < times[c].size(); ++k) ratio.push_back(together[c][k][r].total / times[c][k][r].total);
      char text[96];
      std::snprintf(text, sizeof text, " rank %d %.3f (%.3f-%.3f),", r, median(ratio),
                    *std::min_element(ratio.begin(), ratio.end()), *std::max_element(ratio.begin(), ratio.end()));
      line += text;
    }
    for (size_t k = 0; k < times[c].size(); ++k) {
      double a = 0, b = 0;
      for (int r = 0; r < ranks; ++r) a += together[c][k][r].total, b += times[c][k][r].total;
      together_sums[c].push_back(a / b);
    }
    char text[96];
    std::snprintf(text, sizeof text, " the ranks' sum %.3f", median(together_sums[c]));
    std::printf("%s%s\n", line.c_str(), text);
  }
  for (size_t c = 1; c < cuts.size(); ++c) {
    std::vector<double> ratio;
    for (size_t k = 0; k < together_sums[c].size(); ++k) ratio.push_back(together_sums[c][k] / together_sums[0][k]);
    std::printf("- what two cores add to %s over what they add to %s, within each repetition: %.3f (%.3f-%.3f)\n",
                cuts[c].name.c_str(), cuts[0].name.c_str(), median(ratio), *std::min_element(ratio.begin(), ratio.end()),
                *std::max_element(ratio.begin(), ratio.end()));
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return bench::run_reporting_errors("rank_replay", [&] { return bench_main(argc, argv); });
}
