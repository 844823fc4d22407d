// `actorpipe train` end to end: progress, summary, metrics, trace, safetensors (read back by
// Python's safetensors where it is installed), the reference mode and the error contract.
#include <catch2/catch.hpp>

#include <sched.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <cmath>
#include <functional>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <regex>
#include <sstream>
#include <thread>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "core/blas_kernels.hpp"
#include "core/checkpoint/checkpoint_store.hpp"
#include "core/schedule/plan.hpp"
#include "core/schedule/schedule_registry.hpp"
#include "core/model/attention_kernel.hpp"
#include "core/model/safetensors.hpp"
#include "core/optim/optimizer.hpp"
#include "tests/apps/cli_runner.hpp"
#include "tests/apps/process_runner.hpp"
#include "core/model/safetensors.hpp"

using namespace actorpipe;
using Catch::Contains;
using namespace actorpipe::testing;

namespace {

const std::vector<std::string> tiny = {"--layers", "4", "--hidden", "32", "--heads", "2", "--seq-len", "16",
                                       "--vocab", "64", "--microbatches", "4", "--microbatch-size", "2"};

std::vector<std::string> with(std::vector<std::string> a, const std::vector<std::string>& more) {
  a.insert(a.end(), more.begin(), more.end());
  return a;
}

}  // namespace

CATCH_TEST_CASE("train runs, reports and writes metrics, trace and parameters", "[apps][train]") {
  const std::string metrics = temp_path(".jsonl"), trace = temp_path(".json"), final_params = temp_path(".safetensors");
  auto r = cli(with({"train", "--schedule", "zbv", "--chunks", "2", "--steps", "3", "--metrics", metrics, "--trace", trace,
                     "--save-final", final_params},
                    tiny));
  CATCH_REQUIRE(r.code == 0);
  CATCH_CHECK_THAT(r.out, Contains("actorpipe train: zbv, 2 stages x 2 chunks; 4 microbatches x 2 sequences of 16 tokens"));
  CATCH_CHECK_THAT(r.out, Contains("last step, measured vs simulated"));
  CATCH_CHECK_THAT(r.out, Contains("pipeline time"));
  CATCH_CHECK_THAT(r.err, Contains("step 3/3 [########################] loss "));
  {  // each rank's busy time over steps 2..3: the median within its range
    std::smatch b;
    const std::string num = "([0-9.]+) s \\(([0-9.]+)-([0-9.]+)\\)";
    CATCH_REQUIRE(std::regex_search(r.out, b, std::regex("busy per step, steps 2..3 \\(median, range\\): rank 0 " + num +
                                                             ", rank 1 " + num + "\n")));
    for (int k : {1, 4}) {
      const double mid = std::stod(b[k]), lo = std::stod(b[k + 1]), hi = std::stod(b[k + 2]);
      CATCH_CHECK(lo > 0);
      CATCH_CHECK(lo <= mid);
      CATCH_CHECK(mid <= hi);
    }
  }
  {  // the last step's time, and the part of it beyond the pipeline: non-negative, below the step
    std::smatch pipe, step;
    CATCH_REQUIRE(std::regex_search(r.out, pipe, std::regex("pipeline time ([0-9.]+) s measured")));
    CATCH_REQUIRE(std::regex_search(r.out, step, std::regex("step time ([0-9.]+) s: (-?[0-9.]+) ms of it outside the pipeline")));
    const double pipeline_s = std::stod(pipe[1]), step_s = std::stod(step[1]), outside_ms = std::stod(step[2]);
    CATCH_CHECK(step_s > 0);
    CATCH_CHECK(outside_ms >= 0);
    CATCH_CHECK(outside_ms < 1e3 * step_s);
    CATCH_CHECK(outside_ms == Approx(1e3 * (step_s - pipeline_s)).margin(0.2));
  }

  std::ifstream m(metrics);
  std::string line;
  int lines = 0;
  std::vector<double> last_busy;
  while (std::getline(m, line)) {
    auto j = nlohmann::json::parse(line);
    CATCH_CHECK(j["step"] == lines);
    for (const char* key : {"loss", "lr", "tokens_per_s", "bubble_ratio", "peak_activations", "grad_norm", "busy_seconds"})
      CATCH_CHECK(j.contains(key));
    CATCH_CHECK(j["peak_activations"].size() == 2);
    // Each rank's busy time: within the step; together, the busy share the bubble leaves (the
    // pipeline's span is at most the step).
    last_busy = j.value("busy_seconds", std::vector<double>{});
    CATCH_REQUIRE(last_busy.size() == 2);
    const double step_s = j["seconds"], bubble = j["bubble_ratio"];
    for (double b : last_busy) {
      CATCH_CHECK(b > 0);
      CATCH_CHECK(b < step_s);
    }
    CATCH_CHECK(last_busy[0] + last_busy[1] <= 2 * step_s * (1 - bubble) + 1e-9);
    ++lines;
  }
  CATCH_CHECK(lines == 3);

  std::ifstream t(trace);
  auto tj = nlohmann::json::parse(t);
  int complete = 0;
  std::vector<double> traced_busy(2, 0.0);  // microseconds per rank
  for (auto& e : tj["traceEvents"]) {
    if (e["ph"] != "X") continue;
    traced_busy.at(e["tid"].get<int>()) += e["dur"].get<double>();
    // A W run out of turn that paused for an F or I: its earlier piece, marked; the W's end follows.
    const bool piece = e["args"].value("continues", false);
    if (piece) CATCH_CHECK(e["cat"] == "weight_grad");
    complete += !piece;
  }
  CATCH_CHECK(complete == 2 * 2 * 4 * 3);  // P * V * M * (F, I, W)
  // The last step's busy_seconds are its traced actions' spans, rank by rank.
  for (int rank = 0; rank < 2; ++rank) CATCH_CHECK(last_busy[rank] == Approx(traced_busy[rank] / 1e6).epsilon(1e-6));
  // The trace's costs feed the simulator.
  auto sim = cli({"simulate", "--schedule", "zbv", "--stages", "2", "--microbatches", "4", "--costs-from", trace});
  CATCH_CHECK(sim.code == 0);
  CATCH_CHECK_THAT(sim.out, Contains("costs from " + trace + ": the median of each op on each virtual stage over 48 traced actions"));

  auto params = load_safetensors(final_params);
  CATCH_CHECK(params.size() == 2 + 4 * 12 + 2);  // embeddings, 4 blocks, final LayerNorm
  // Python's safetensors reads it too, when installed (make deps installs it).
  if (std::system("python3 -c 'import safetensors.numpy' 2>/dev/null") == 0) {
    std::string cmd = "python3 -c \"from safetensors.numpy import load_file; d = load_file('" + final_params +
                      "'); assert d['tok_emb.weight'].shape == (64, 32), d['tok_emb.weight'].shape; "
                      "assert len(d) == 52, len(d)\"";
    CATCH_CHECK(std::system(cmd.c_str()) == 0);
  } else {
    CATCH_WARN("python3 with safetensors not found: skipped reading the file from Python");
  }
  std::remove(metrics.c_str());
  std::remove(trace.c_str());
  std::remove(final_params.c_str());
}

CATCH_TEST_CASE("train's trace marks when each B sent its input gradient, inside that B", "[apps][train]") {
  const std::string trace = temp_path(".json");
  auto r = cli(with({"train", "--schedule", "1f1b", "--steps", "2", "--trace", trace}, tiny));
  CATCH_REQUIRE(r.code == 0);
  std::ifstream t(trace);
  auto tj = nlohmann::json::parse(t);
  int marked = 0, backwards = 0;
  for (auto& e : tj["traceEvents"]) {
    if (e["ph"] != "X" || e["cat"] != "backward") continue;
    ++backwards;
    const bool first_stage = e["args"]["virtual_stage"] == 0;
    CATCH_CHECK(e["args"].contains("input_grad_sent_at") == !first_stage);  // stage 0 sends none
    if (first_stage) continue;
    // Trace microseconds, as ts and dur: after the B's start, before its end.
    const double at = e["args"]["input_grad_sent_at"], ts = e["ts"], dur = e["dur"];
    CATCH_CHECK(at > ts);
    CATCH_CHECK(at < ts + dur);
    ++marked;
  }
  CATCH_CHECK(backwards == 2 * 4);  // P * M
  CATCH_CHECK(marked == 4);
}

CATCH_TEST_CASE("train --no-pipeline is the reference and matches the pipeline", "[apps][train]") {
  const std::string a = temp_path(".safetensors"), b = temp_path(".safetensors"), m = temp_path(".jsonl");
  auto ref = cli(with({"train", "--no-pipeline", "--steps", "2", "--save-final", a, "--metrics", m}, tiny));
  CATCH_REQUIRE(ref.code == 0);
  CATCH_CHECK_THAT(ref.out, Contains("reference (--no-pipeline"));
  {  // no ranks, so none of the per-rank fields (it wrote peak_activations [1])
    std::ifstream lines(m);
    std::string first;
    CATCH_REQUIRE(std::getline(lines, first));
    const auto j = nlohmann::json::parse(first);
    CATCH_CHECK(j.contains("loss"));
    CATCH_CHECK(!j.contains("peak_activations"));
    CATCH_CHECK(!j.contains("busy_seconds"));
  }
  std::remove(m.c_str());
  // The pipeline's rules (1f1b on 2 stages needs 2 microbatches) do not apply to the reference.
  CATCH_CHECK(cli({"train", "--no-pipeline", "--steps", "1", "--layers", "4", "--hidden", "32", "--heads", "2",
                   "--seq-len", "16", "--vocab", "64", "--microbatches", "1", "--microbatch-size", "2"})
                  .code == 0);
  auto pipe = cli(with({"train", "--schedule", "1f1b", "--steps", "2", "--save-final", b}, tiny));
  CATCH_REQUIRE(pipe.code == 0);
  auto pa = load_safetensors(a), pb = load_safetensors(b);
  CATCH_REQUIRE(pa.size() == pb.size());
  for (size_t i = 0; i < pa.size(); ++i) CATCH_CHECK(pa[i].first == pb[i].first);
  std::remove(a.c_str());
  std::remove(b.c_str());
}

// --adam-beta1, --adam-beta2, --adam-eps and --min-lr-ratio (Megatron's --adam-beta1/2,
// --adam-eps and --min-lr): from flags or a config's keys alike, in the metrics' learning rate,
// in a checkpoint's record, and not the defaults' run.
CATCH_TEST_CASE("train takes AdamW's betas and eps and the learning rate's floor from flags or a config",
                "[apps][train]") {
  const std::string by_flags = temp_path(".safetensors"), by_config = temp_path(".safetensors"),
                    on_defaults = temp_path(".safetensors"), metrics = temp_path(".jsonl"), config = temp_path(".json"),
                    dir = temp_path(".ckpt");
  // --stages: a config's pp is 1 where train's own default is 2.
  const std::vector<std::string> run = with({"--steps", "3", "--warmup-steps", "0", "--lr", "0.01", "--stages", "2"}, tiny);
  auto flags = cli(with({"train", "--adam-beta1", "0.5", "--adam-beta2", "0.8", "--adam-eps", "0.001", "--min-lr-ratio",
                         "0.5", "--save-final", by_flags, "--metrics", metrics, "--save-dir", dir, "--save-every", "3"},
                        run));
  CATCH_REQUIRE(flags.code == 0);
  CATCH_CHECK_THAT(flags.out, Contains("\noptimizer: AdamW, betas 0.5 / 0.8, eps 0.001, weight decay 0.1 (tensors of 2+ "
                                       "dimensions); lr 0.01, linear decay to 0.5 x lr at step 3; gradient norm "
                                       "clipped at 1\n"));
  {
    std::ifstream lines(metrics);
    std::string line, last;
    while (std::getline(lines, line)) last = line;
    CATCH_CHECK(nlohmann::json::parse(last)["lr"].get<double>() == Approx(0.005));  // half of --lr at the last step
  }
  {
    std::ifstream manifest(dir + "/step-00000003/manifest.json");
    const auto meta = nlohmann::json::parse(manifest)["meta"];
    CATCH_CHECK(meta["adam_beta1"] == 0.5);
    CATCH_CHECK(meta["adam_beta2"] == 0.8);
    CATCH_CHECK(meta["adam_eps"] == 0.001);
    CATCH_CHECK(meta["min_lr_ratio"] == 0.5);
  }
  std::ofstream(config) << R"({"adam_beta1": 0.5, "adam_beta2": 0.8, "adam_eps": 1e-3, "min_lr_ratio": 0.5})";
  CATCH_REQUIRE(cli(with({"train", "--config", config, "--save-final", by_config}, run)).code == 0);
  CATCH_REQUIRE(cli(with({"train", "--save-final", on_defaults}, run)).code == 0);
  // A file's tensors are written in name order: the same parameters are the same bytes.
  const auto bytes = [](const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  };
  CATCH_CHECK(load_safetensors(by_flags).size() == 2 + 4 * 12 + 2);
  const std::string flags_file = bytes(by_flags), config_file = bytes(by_config), defaults_file = bytes(on_defaults);
  CATCH_CHECK(flags_file.size() == defaults_file.size());
  CATCH_CHECK((flags_file == config_file));  // (not shown: binary)
  CATCH_CHECK((flags_file != defaults_file));
  for (const auto& path : {by_flags, by_config, on_defaults, metrics, config}) std::remove(path.c_str());
  std::filesystem::remove_all(dir);
}

// --lr-decay-style cosine and constant (Megatron's --lr-decay-style): the metrics' learning
// rate at every step is lr_at's, and a floor the constant one never reaches is a note.
CATCH_TEST_CASE("train decays the learning rate linearly, along a cosine or not at all", "[apps][train]") {
  const std::string metrics = temp_path(".jsonl");
  for (const lr_decay style : {lr_decay::linear, lr_decay::cosine, lr_decay::constant}) {
    CATCH_CAPTURE(lr_decay_name(style));
    auto run = cli(with({"train", "--steps", "6", "--warmup-steps", "2", "--lr", "0.004", "--min-lr-ratio", "0.25",
                         "--lr-decay-style", lr_decay_name(style), "--metrics", metrics},
                        tiny));
    CATCH_REQUIRE(run.code == 0);
    CATCH_CHECK((run.out.find("note: --min-lr-ratio is where a decay ends, and --lr-decay-style constant has none: it "
                              "does not apply\n") != std::string::npos) == (style == lr_decay::constant));
    CATCH_CHECK_THAT(run.out, Contains(style == lr_decay::constant
                                           ? std::string("; lr 0.004, warm-up 2 steps, then constant;")
                                           : "; lr 0.004, warm-up 2 steps, " + std::string(lr_decay_name(style)) +
                                                 " decay to 0.25 x lr at step 6;"));
    std::ifstream lines(metrics);
    std::string line;
    int step = 0;
    while (std::getline(lines, line)) {
      const auto j = nlohmann::json::parse(line);
      if (!j.contains("lr")) continue;
      CATCH_CAPTURE(step);
      CATCH_CHECK(j["lr"].get<double>() == Approx(lr_at(step, 0.004, 2, 6, 0.25, style)).epsilon(1e-12));
      ++step;
    }
    CATCH_CHECK(step == 6);
  }
  // Given as keys, named as keys.
  auto keys = cli(with({"train", "--steps", "2", "--set", "lr_decay_style=constant", "--set", "min_lr_ratio=0.5"}, tiny));
  CATCH_CHECK(keys.code == 0);
  CATCH_CHECK_THAT(keys.out, Contains("note: min_lr_ratio is where a decay ends, and lr_decay_style=constant has none: "
                                      "it does not apply\n"));
  // The styles differ where they should: cosine above linear early in the decay.
  CATCH_CHECK(lr_at(3, 0.004, 2, 6, 0.25, lr_decay::cosine) > lr_at(3, 0.004, 2, 6, 0.25, lr_decay::linear));
  std::remove(metrics.c_str());
}

// --lr-decay-steps (Megatron's --lr-decay-iters): the decay ends there and the rate stays at
// the floor; past --steps the run is the first part of a longer one, which a resume with the
// same --lr-decay-steps and more --steps goes on as the straight run.
CATCH_TEST_CASE("train ends the learning rate's decay at --lr-decay-steps, and a resume goes on along it",
                "[apps][train][checkpoint]") {
  const std::string metrics = temp_path(".jsonl"), dir = temp_path(".ckpt"), straight = temp_path(".safetensors"),
                    resumed = temp_path(".safetensors"), config = temp_path(".json");
  const auto lrs = [&] {
    std::vector<double> out;
    std::ifstream lines(metrics);
    for (std::string line; std::getline(lines, line);) {
      const auto j = nlohmann::json::parse(line);
      if (j.contains("lr")) out.push_back(j["lr"].get<double>());
    }
    return out;
  };
  const std::vector<std::string> run = with({"--warmup-steps", "1", "--lr", "0.004", "--min-lr-ratio", "0.25"}, tiny);
  auto early = cli(with({"train", "--steps", "6", "--lr-decay-steps", "4", "--metrics", metrics}, run));
  CATCH_REQUIRE(early.code == 0);
  CATCH_CHECK_THAT(early.out, Contains("; lr 0.004, warm-up 1 step, linear decay to 0.25 x lr at step 4 (held there to "
                                       "step 6);"));
  const std::vector<double> by_flag = lrs();
  CATCH_REQUIRE(by_flag.size() == 6);
  for (int step = 0; step < 6; ++step) {
    CATCH_CAPTURE(step);
    CATCH_CHECK(by_flag[step] == Approx(lr_at(step, 0.004, 1, 6, 0.25, lr_decay::linear, 4)).epsilon(1e-12));
  }
  CATCH_CHECK(by_flag[3] == Approx(0.001));
  CATCH_CHECK(by_flag[5] == Approx(0.001));
  // The same from a config's key and from --set.
  std::ofstream(config) << R"({"lr_decay_steps": 4, "pp": 2})";
  CATCH_REQUIRE(cli(with({"train", "--config", config, "--steps", "6", "--metrics", metrics}, run)).code == 0);
  CATCH_CHECK(lrs() == by_flag);
  CATCH_REQUIRE(cli(with({"train", "--set", "lr_decay_steps=4", "--steps", "6", "--metrics", metrics}, run)).code == 0);
  CATCH_CHECK(lrs() == by_flag);

  // Past --steps: three steps of a six-step schedule, then the other three from its checkpoint.
  auto whole = cli(with({"train", "--steps", "6", "--lr-decay-steps", "6", "--save-final", straight}, run));
  CATCH_REQUIRE(whole.code == 0);
  auto first = cli(with({"train", "--steps", "3", "--lr-decay-steps", "6", "--save-dir", dir}, run));
  CATCH_REQUIRE(first.code == 0);
  CATCH_CHECK_THAT(first.out, Contains("linear decay to 0.25 x lr at step 6 (this run ends before it, at lr 0.00325);"));
  const std::string log = temp_path(".log");
  auto rest = cli(with({"train", "--steps", "6", "--lr-decay-steps", "6", "--resume", dir, "--save-final", resumed,
                        "--log-file", log},
                       run));
  CATCH_REQUIRE(rest.code == 0);
  CATCH_CHECK(read_text(log).find("warning") == std::string::npos);  // the schedule it was on: no change to name
  CATCH_CHECK(read_bytes(resumed) == read_bytes(straight));
  {
    std::ifstream manifest(dir + "/step-00000003/manifest.json");
    CATCH_CHECK(nlohmann::json::parse(manifest)["meta"]["lr_decay_steps"] == 6);
  }
  // --steps alone stretches the decay: said.
  std::remove(log.c_str());
  auto stretched = cli(with({"train", "--steps", "8", "--lr-decay-steps", "8", "--resume", dir + "/step-00000003",
                             "--log-file", log},
                            run));
  CATCH_REQUIRE(stretched.code == 0);
  CATCH_CHECK_THAT(read_text(log), Contains("continues a run with other settings: lr_decay_steps 6 -> 8, steps 3 -> 8; "
                                            "steps 4..8 train as this run's settings say"));
  std::remove(log.c_str());
  auto alone = cli(with({"train", "--steps", "8", "--resume", dir + "/step-00000003", "--log-file", log}, run));
  CATCH_REQUIRE(alone.code == 0);
  CATCH_CHECK_THAT(read_text(log), Contains("continues a run with other settings: lr_decay_steps 6 -> 8, steps 3 -> 8;"));

  // What is refused, by the flag's name; constant has no decay to end.
  auto negative = cli(with({"train", "--lr-decay-steps", "-1"}, run));
  CATCH_CHECK(negative.code == 2);
  CATCH_CHECK_THAT(negative.err, Contains("--lr-decay-steps must be >= 0 (0 = the decay ends at the last of --steps): "
                                          "got -1"));
  auto inside = cli(with({"train", "--lr-decay-steps", "3", "--warmup-steps", "2"}, tiny));
  CATCH_CHECK(inside.code == 2);
  CATCH_CHECK_THAT(inside.err, Contains("--lr-decay-steps 3 leaves no step to decay over after --warmup-steps 2: the "
                                        "decay starts at the full --lr at step 3 and reaches the floor at the step it "
                                        "names, so at least 4"));
  auto key = cli(with({"train", "--set", "lr_decay_steps=3", "--warmup-steps", "2"}, tiny));
  CATCH_CHECK(key.code == 2);
  CATCH_CHECK_THAT(key.err, Contains("lr_decay_steps=3 leaves no step to decay over after warmup_steps=2: at least 4"));
  auto constant = cli(with({"train", "--steps", "2", "--lr-decay-steps", "5", "--lr-decay-style", "constant"}, run));
  CATCH_CHECK(constant.code == 0);
  CATCH_CHECK_THAT(constant.out, Contains("note: --lr-decay-steps is when a decay ends, and --lr-decay-style constant has "
                                          "none: it does not apply\n"));
  auto megatron = cli(with({"train", "--lr-decay-iters", "5"}, tiny));
  CATCH_CHECK_THAT(megatron.err, Contains("unknown flag '--lr-decay-iters' (did you mean --lr-decay-steps?)"));
  auto split = cli(with({"train", "--split", "969,30,1"}, tiny));
  CATCH_CHECK(split.code == 2);
  CATCH_CHECK_THAT(split.err, Contains("unknown flag '--split' (did you mean --eval-split F (the last F of --data-file held "
                                       "out; or --eval-file)?)"));
  auto data_path = cli(with({"train", "--data-path", "corpus_text_document"}, tiny));
  CATCH_CHECK(data_path.code == 2);
  CATCH_CHECK_THAT(data_path.err, Contains("unknown flag '--data-path' (did you mean --data-file PREFIX.bin (a Megatron "
                                           "dataset: the PREFIX.idx beside it is read; a blend: --data-file W1 A.bin W2 "
                                           "B.bin)?)"));
  for (const auto& path : {metrics, straight, resumed, config, log}) std::remove(path.c_str());
  std::filesystem::remove_all(dir);
}

CATCH_TEST_CASE("train notes intra-op threads past the CPUs, not one thread per rank", "[apps][train]") {
  cpu_set_t allowed;
  CPU_ZERO(&allowed);
  CATCH_REQUIRE(sched_getaffinity(0, sizeof allowed, &allowed) == 0);
  const int cpus = CPU_COUNT(&allowed);  // this process may use: the online count missed taskset's limit
  CATCH_REQUIRE(cpus > 0);
  const std::string over = std::to_string(cpus + 1);
  auto r = cli(with({"train", "--no-pipeline", "--steps", "1", "--threads-per-stage", over}, tiny));
  CATCH_REQUIRE(r.code == 0);
  CATCH_CHECK_THAT(r.out, Contains("note: --threads-per-stage " + over + " x 1 rank in this process = " + over +
                                   " compute threads on " + std::to_string(cpus) + (cpus == 1 ? " CPU" : " CPUs") +
                                   " this process may use: they take turns, so steps run slower, not faster"));
  // Bound to one CPU (taskset, a container's cpuset), two threads take turns.
  const std::string log = temp_path(".one-cpu.log");
  std::vector<std::string> args = {"-c", "0", ACTORPIPE_BIN, "train", "--no-pipeline", "--steps", "1", "--threads-per-stage", "2"};
  args.insert(args.end(), tiny.begin(), tiny.end());
  if (std::system("/usr/bin/taskset -c 0 true >/dev/null 2>&1") == 0) {
    CATCH_CHECK(wait_process(start_process("/usr/bin/taskset", args, {}, log), 120) == 0);
    CATCH_CHECK_THAT(read_text(log), Contains("= 2 compute threads on 1 CPU this process may use: they take turns"));
  }
  // One thread per rank is the default layout, whatever the rank count: no note.
  auto one = cli(with({"train", "--stages", "4", "--steps", "1"}, tiny));
  CATCH_REQUIRE(one.code == 0);
  CATCH_CHECK(one.out.find("compute threads on") == std::string::npos);
}

// LibTorch's pool waits for ever on a thread it could not start, and OpenBLAS retries a buffer
// it cannot map for ever: a run past the process's limits hung in either. It is refused first.
CATCH_TEST_CASE("train refuses --threads-per-stage past the process's limits instead of hanging", "[apps][train]") {
  auto run = [](const std::string& threads) {
    std::vector<std::string> args = {"-c", "ulimit -s 8192 && ulimit -v 6000000 && exec \"$0\" \"$@\"", ACTORPIPE_BIN,
                                     "train", "--steps", "1", "--threads-per-stage", threads};
    args.insert(args.end(), tiny.begin(), tiny.end());
    const std::string log = temp_path(".log");
    const int code = wait_process(start_process("/bin/sh", args, {}, log), 120);
    return std::make_pair(code, read_text(log));
  };
  const auto [code, text] = run("1000");
  CATCH_INFO(text);
  CATCH_CHECK(code == 2);
  CATCH_CHECK_THAT(text, Contains("actorpipe train: error: --threads-per-stage 1000: 2 ranks in this process need 2997 "
                                  "threads besides their own"));
  CATCH_CHECK_THAT(text, Contains("limits: ulimit -v 6000000 KiB"));
  CATCH_CHECK_THAT(text, Contains("): lower --threads-per-stage, or raise the limit\n"));
  // Under the same limit, a count that fits runs.
  const auto [fits, fits_text] = run("2");
  CATCH_INFO(fits_text);
  CATCH_CHECK(fits == 0);
  CATCH_CHECK_THAT(fits_text, Contains("final loss"));
}

CATCH_TEST_CASE("train reads a text file as bytes and a .bin file as uint16 tokens", "[apps][train]") {
  const std::string text = temp_path(".txt"), bin = temp_path(".bin");
  {
    std::ofstream t(text);
    for (int i = 0; i < 50; ++i) t << "the quick brown fox jumps over the lazy dog; pipelines all the way down\n";
    std::ofstream b(bin, std::ios::binary);
    for (int i = 0; i < 4000; ++i) b.put(static_cast<char>((i * 7) % 64)).put(0);
  }
  auto t = cli({"train", "--data-file", text, "--vocab", "256", "--layers", "2", "--hidden", "32", "--heads", "2",
                "--seq-len", "16", "--steps", "2", "--microbatches", "2", "--microbatch-size", "2"});
  CATCH_CHECK(t.code == 0);
  CATCH_CHECK_THAT(t.out, Contains("bytes"));
  auto b = cli(with({"train", "--data-file", bin, "--steps", "2"}, tiny));
  CATCH_CHECK(b.code == 0);
  CATCH_CHECK_THAT(b.out, Contains("uint16"));
  // --seed seeds the file's windows too: from the same weights, another seed trains on other
  // samples, the same seed on the same.
  const std::string start = temp_path(".st"), seed5 = temp_path(".st"), seed6 = temp_path(".st"), again = temp_path(".st");
  CATCH_REQUIRE(cli(with({"train", "--steps", "1", "--save-final", start}, tiny)).code == 0);
  const auto from_start = [&](const std::string& seed, const std::string& out) {
    return cli(with({"train", "--data-file", bin, "--steps", "1", "--init-from", start, "--seed", seed, "--save-final", out},
                    tiny)).code;
  };
  CATCH_REQUIRE(from_start("5", seed5) == 0);
  CATCH_REQUIRE(from_start("6", seed6) == 0);
  CATCH_REQUIRE(from_start("5", again) == 0);
  CATCH_CHECK(read_bytes(seed5) != read_bytes(seed6));
  CATCH_CHECK(read_bytes(seed5) == read_bytes(again));
  for (const auto& f : {text, bin, start, seed5, seed6, again}) std::remove(f.c_str());
}

CATCH_TEST_CASE("train --dp prints the grid, the optimizer state per rank and the sync, metrics carry them",
                "[apps][train][dp]") {
  const std::string metrics = temp_path(".jsonl"), trace = temp_path(".trace.json");
  auto r = cli(with({"train", "--stages", "2", "--dp", "2", "--zero", "1", "--steps", "3", "--metrics", metrics, "--trace",
                     trace},
                    tiny));
  CATCH_REQUIRE(r.code == 0);
  // The trace has every rank of both replicas: 4 ranks x 4 microbatches x (F, B).
  CATCH_CHECK_THAT(r.out, Contains("wrote the last step's measured timeline on every rank of every replica to " + trace));
  // The summary's table is one pipeline's (replica 0's), as the simulation beside it; it says so.
  CATCH_CHECK_THAT(r.out, Contains("last step, measured vs simulated (the same schedule on the measured per-stage costs), "
                                   "replica 0's ranks (the progress line, --metrics and --trace count every replica's):\n"));
  {
    std::ifstream t(trace);
    const auto tj = nlohmann::json::parse(t);
    std::map<int, int> per_rank;
    std::string process;
    for (const auto& e : tj["traceEvents"]) {
      if (e["ph"] == "X") ++per_rank[e["tid"].get<int>()];
      if (e["name"] == "process_name") process = e["args"]["name"];
    }
    CATCH_CHECK(per_rank == std::map<int, int>{{0, 8}, {1, 8}, {2, 8}, {3, 8}});
    CATCH_CHECK(process == "actorpipe train 1f1b, the last step measured");
    // Which step of which run (an earlier run's trace, left where a killed run wrote none,
    // looked like this one's).
    CATCH_CHECK(tj["otherData"]["step"].get<std::string>() == "3");
    CATCH_CHECK(tj["otherData"]["written"].get<std::string>().size() == 20);  // 2026-12-07T00:30:12Z
    // simulate takes its costs from it like from a one-replica trace: 2 virtual stages.
    auto sim = cli({"simulate", "--stages", "2", "--microbatches", "4", "--costs-from", trace});
    CATCH_CHECK(sim.code == 0);
    CATCH_CHECK_THAT(sim.out, Contains("over 32 traced actions"));
  }
  std::remove(trace.c_str());
  CATCH_CHECK_THAT(r.out, Contains("1f1b, 2 stages x 1 chunk x 2 data-parallel replicas (ZeRO-1); 4 microbatches per replica"));
  CATCH_CHECK_THAT(r.out, Contains("grid: 2 x 2 ranks; pipelines (ranks): 0-1 | 2-3; data-parallel groups: 0,2 | 1,3"));
  CATCH_CHECK_THAT(r.out, Contains("optimizer state per rank (AdamW moments, ZeRO-1):"));
  CATCH_CHECK_THAT(r.out, Contains("gradient sync: "));
  std::ifstream m(metrics);
  std::string line;
  int lines = 0;
  while (std::getline(m, line)) {
    auto j = nlohmann::json::parse(line);
    for (const char* key : {"sync_seconds", "exposed_sync_seconds", "optimizer_state_bytes"}) CATCH_CHECK(j.contains(key));
    CATCH_CHECK(j["optimizer_state_bytes"].size() == 4);
    CATCH_CHECK(j["peak_activations"].size() == 4);
    CATCH_CHECK(j["exposed_sync_seconds"].get<double>() <= j["sync_seconds"].get<double>());
    ++lines;
  }
  CATCH_CHECK(lines == 3);
}

CATCH_TEST_CASE("train --save-dir writes checkpoints Python's safetensors reads, --resume goes on from one",
                "[apps][train][checkpoint]") {
  const std::string dir = temp_path(".ckpt"), straight = temp_path(".safetensors"), resumed = temp_path(".safetensors");
  auto saving = cli(with({"train", "--steps", "4", "--save-dir", dir, "--save-every", "2", "--keep-last", "1",
                          "--save-final", straight},
                         tiny));
  CATCH_REQUIRE(saving.code == 0);
  CATCH_CHECK_THAT(saving.out, Contains("wrote 2 checkpoints, the newest " + dir + "/step-00000004 ("));
  CATCH_CHECK_THAT(saving.out, Contains("s to write in the background, training held "));
  // --keep-last 1: only the newest is left.
  CATCH_CHECK(!std::filesystem::exists(dir + "/step-00000002"));
  std::ifstream m(dir + "/step-00000004/manifest.json");
  const auto manifest = nlohmann::json::parse(m);
  CATCH_CHECK(manifest["step"] == 4);
  CATCH_REQUIRE(manifest["files"].size() == 2);  // one part per stage
  if (std::system("python3 -c 'import safetensors.numpy' 2>/dev/null") == 0) {
    // Every part: Python reads it; the stage-0 part holds the embedding and its AdamW moments.
    const std::string py = "python3 -c \"import json, hashlib; from safetensors.numpy import load_file; d = '" + dir +
                           "/step-00000004'; m = json.load(open(d + '/manifest.json')); "
                           "[load_file(d + '/' + f) for f in m['files']]; "
                           "[exec('assert hashlib.sha256(open(d + \\'/\\' + f, \\'rb\\').read()).hexdigest() == "
                           "m[\\'files\\'][f][\\'sha256\\']') for f in m['files']]; "
                           "p = load_file(d + '/stage-0.safetensors'); assert p['tok_emb.weight'].shape == (64, 32); "
                           "assert p['tok_emb.weight.exp_avg@0'].shape == (64 * 32,), p.keys()\"";
    CATCH_CHECK(std::system(py.c_str()) == 0);
  } else {
    CATCH_WARN("python3 with safetensors not found: skipped reading the checkpoint from Python");
  }
  // What a resumed run changes of the saved run's settings is one warning in the log.
  const std::string log = temp_path(".resume.log");
  auto warnings = [&log] {
    std::ifstream f(log);
    std::vector<std::string> found;
    for (std::string line; std::getline(f, line);)
      if (line.find(" warning: ") != std::string::npos) found.push_back(line.substr(line.find(" warning: ") + 10));
    std::remove(log.c_str());
    return found;
  };
  auto again = cli(with({"train", "--steps", "6", "--resume", dir, "--save-final", resumed, "--log-file", log}, tiny));
  CATCH_REQUIRE(again.code == 0);
  CATCH_CHECK_THAT(again.out, Contains("resumed from " + dir + "/step-00000004 (steps 5..6 ran here)"));
  CATCH_CHECK_THAT(again.out, Contains("optimizer state per rank (AdamW moments):"));  // a resumed run's too
  // Its steps by their numbers: the first it ran is step 5 (it said "first step"), and the
  // busy line covers step 6 alone (it said "steps 6..6").
  CATCH_CHECK_THAT(again.out, Contains(" (step 5 ") && !Contains("(first step "));
  CATCH_CHECK_THAT(again.out, Contains("busy per step, step 6 (median, range): "));
  // Going on past the saved run's last step changes its learning rate's schedule.
  CATCH_CHECK(warnings() == std::vector<std::string>{"--resume " + dir + "/step-00000004 continues a run with other "
                                                     "settings: lr_decay_steps 4 -> 6, steps 4 -> 6; steps 5..6 train as this "
                                                     "run's settings "
                                                     "say, not as the interrupted run would have"});
  // Another seed (so other data) and a smaller batch are named; the same batch split otherwise
  // trains the same numbers and is not.
  const std::vector<std::string> tiny_model(tiny.begin(), tiny.begin() + 10);  // without the batch flags
  auto other = cli(with({"train", "--steps", "5", "--resume", dir, "--seed", "7", "-M", "2", "-B", "3", "--log-file", log},
                        tiny_model));
  CATCH_REQUIRE(other.code == 0);
  auto said = warnings();
  CATCH_REQUIRE(said.size() == 1);
  CATCH_CHECK_THAT(said[0], Contains("continues a run with other settings: data_seed 1234 -> 7, global batch 8 -> 6 "
                                     "sequences (microbatches x microbatch_size x dp), lr_decay_steps 4 -> 5, steps 4 -> 5; "
                                     "steps 5..5"));
  auto split = cli(with({"train", "--steps", "5", "--resume", dir, "-M", "2", "-B", "4", "--log-file", log}, tiny_model));
  CATCH_REQUIRE(split.code == 0);
  said = warnings();
  CATCH_REQUIRE(said.size() == 1);
  CATCH_CHECK_THAT(said[0], Contains("other settings: lr_decay_steps 4 -> 5, steps 4 -> 5;"));
  // The heads split the same tensors otherwise: another model, refused (exit 2, so launch does
  // not restart it), as is a --resume with nothing to take.
  auto heads = cli({"train", "--steps", "6", "--resume", dir, "--layers", "4", "--hidden", "32", "--heads", "4",
                    "--seq-len", "16", "--vocab", "64", "--microbatches", "4", "--microbatch-size", "2"});
  CATCH_CHECK(heads.code == 2);
  CATCH_CHECK_THAT(heads.err, Contains("--resume " + dir + "/step-00000004: the checkpoint's gpt has --heads 2, this run "
                                       "--heads 4: its tensors belong to another model (give --heads 2)"));
  // Fewer layers would leave the checkpoint's last ones unread.
  auto layers = cli({"train", "--steps", "6", "--resume", dir, "--layers", "2", "--hidden", "32", "--heads", "2",
                     "--seq-len", "16", "--vocab", "64", "--microbatches", "4", "--microbatch-size", "2"});
  CATCH_CHECK(layers.code == 2);
  CATCH_CHECK_THAT(layers.err, Contains("the checkpoint's gpt has --layers 4, this run --layers 2: its tensors belong to "
                                        "another model (give --layers 4)"));
  // A checkpoint of the last step with --save-final writes the file from it (the same bits as
  // the run's own): a --save-final that failed after the training (a full disk) could not be
  // written again ("leaves nothing to train"). Without --save-final, nothing to do is refused.
  const std::string again_final = temp_path(".again.safetensors");
  auto rewrite = cli(with({"train", "--steps", "4", "--resume", dir, "--save-final", again_final}, tiny));
  CATCH_CHECK(rewrite.code == 0);
  CATCH_CHECK_THAT(rewrite.out, Contains("tensors to " + again_final + " (from " + dir + "/step-00000004)"));
  CATCH_CHECK(read_bytes(again_final) == read_bytes(straight));
  std::remove(again_final.c_str());
  auto nothing_asked = cli(with({"train", "--steps", "4", "--resume", dir}, tiny));
  CATCH_CHECK(nothing_asked.code == 2);
  CATCH_CHECK_THAT(nothing_asked.err, Contains("holds step 4, and --steps=4 leaves nothing to train"));
  auto other_model = cli({"train", "--steps", "4", "--resume", dir, "--save-final", again_final, "--layers", "2", "--hidden",
                          "32", "--heads", "2", "--seq-len", "16", "--vocab", "64", "--microbatches", "4",
                          "--microbatch-size", "2"});
  CATCH_CHECK(other_model.code == 2);
  CATCH_CHECK_THAT(other_model.err, Contains("the checkpoint's gpt has --layers 4, this run --layers 2"));
  CATCH_CHECK(!std::filesystem::exists(again_final));
  const std::string empty = temp_path(".empty");
  std::filesystem::create_directory(empty);
  for (const std::string& nothing : {empty, std::string("/nonexistent/ckpt")}) {
    auto none = cli(with({"train", "--steps", "6", "--resume", nothing}, tiny));
    CATCH_CHECK(none.code == 2);
    CATCH_CHECK_THAT(none.err, Contains("--resume '" + nothing + "': "));
  }
  std::filesystem::remove(empty);
  // A new run does not write into (or prune) the folder of this one's checkpoints.
  auto other_run = cli(with({"train", "--steps", "4", "--save-dir", dir, "--keep-last", "1"}, tiny));
  CATCH_CHECK(other_run.code == 2);
  CATCH_CHECK_THAT(other_run.err, Contains("--save-dir '" + dir + "' holds 1 checkpoint of another run (step-00000004), "
                                           "which this run would write over or mix with, and prune: continue that run "
                                           "with --resume " + dir + ", or save into another folder"));
  CATCH_CHECK(std::filesystem::exists(dir + "/step-00000004/manifest.json"));
  // doctor --dir there says so, where it said "ready" as for an empty folder.
  auto doctor = cli({"doctor", "--dir", dir});
  CATCH_CHECK_THAT(doctor.out, Contains("  note  checkpoints a new run saving here is refused: --save-dir '" + dir +
                                        "' holds 1 checkpoint of another run (step-00000004), which this run would "
                                        "write over or mix with: continue that run with --resume " + dir));
  {  // Nor while another run writes there (two at once replaced and pruned each other's steps).
    const save_dir_lock held(dir);
    auto beside = cli(with({"train", "--steps", "6", "--save-dir", dir, "--resume", dir}, tiny));
    CATCH_CHECK(beside.code == 2);
    CATCH_CHECK_THAT(beside.err, Contains("--save-dir '" + dir + "' is in use by another run (process " +
                                          std::to_string(getpid()) + " on ") &&
                                     Contains("), which holds its lock file .lock: two runs in one folder would write "
                                              "over and prune each other's checkpoints"));
  }
  // An output under a name the checkpoints use would be replaced by one (or replace it).
  auto clash = cli(with({"train", "--steps", "6", "--save-dir", dir, "--resume", dir, "--metrics", dir + "/latest"}, tiny));
  CATCH_CHECK(clash.code == 2);
  CATCH_CHECK_THAT(clash.err, Contains("--metrics '" + dir + "/latest' is a name the checkpoints in --save-dir '" + dir +
                                       "' use: a checkpoint would replace it, or it one; give another name"));
  CATCH_CHECK(std::filesystem::exists(dir + "/latest"));
  // Through a link: to `latest`, to `.lock` (both replaced by metrics lines, exit 0), or into
  // a step to come.
  for (const std::string& target : {dir + "/latest", dir + "/.lock", dir + "/step-00000006/m.jsonl"}) {
    const std::string link = temp_path(".to-checkpoint.jsonl");
    std::filesystem::create_symlink(target, link);
    auto linked = cli(with({"train", "--steps", "6", "--save-dir", dir, "--resume", dir, "--metrics", link}, tiny));
    CATCH_INFO(target);
    CATCH_CHECK(linked.code == 2);
    CATCH_CHECK_THAT(linked.err, Contains("--metrics '" + link + "' is "));
    std::filesystem::remove(link);
  }
  CATCH_CHECK(read_text(dir + "/latest").rfind("step-", 0) == 0);
  const std::string unmade = temp_path(".unmade-ck"), to_latest = temp_path(".to-latest.jsonl");
  std::filesystem::create_symlink(unmade + "/latest", to_latest);  // a folder the run makes
  auto dangling = cli(with({"train", "--steps", "1", "--save-dir", unmade, "--metrics", to_latest}, tiny));
  CATCH_CHECK(dangling.code == 2);
  CATCH_CHECK_THAT(dangling.err, Contains("--metrics '" + to_latest + "' is a name the checkpoints in --save-dir"));
  std::filesystem::remove(to_latest);
  std::filesystem::remove_all(unmade);
  // Nor into a checkpoint's own folder: a --save-dir there (its run's --keep-last pruned it
  // with the checkpoint), or an output over or beside its files (a --save-final over its
  // stage-0.safetensors damaged the checkpoint it resumed from), or in a step to come.
  const std::string ckpt = dir + "/step-00000004";
  for (const std::string& inside : {ckpt, ckpt + "/sub"}) {
    auto nested = cli(with({"train", "--steps", "6", "--resume", ckpt, "--save-dir", inside}, tiny));
    CATCH_CHECK(nested.code == 2);
    CATCH_CHECK_THAT(nested.err, Contains("--save-dir '" + inside + "' is ") && Contains("step-00000004'") &&
                                     Contains(": that folder holds the checkpoint's own files, and pruning it would "
                                              "delete this run's: save into a folder of its own"));
    CATCH_CHECK(!std::filesystem::exists(ckpt + "/.lock"));
    CATCH_CHECK(!std::filesystem::exists(ckpt + "/sub"));
  }
  const std::string part = ckpt + "/stage-0.safetensors";
  const auto part_bytes = std::filesystem::file_size(part);
  auto over = cli(with({"train", "--steps", "6", "--resume", dir, "--save-final", part}, tiny));
  CATCH_CHECK(over.code == 2);
  CATCH_CHECK_THAT(over.err, Contains("--save-final '" + part + "' is inside checkpoint '") &&
                                 Contains("step-00000004': it would overwrite or add to that checkpoint's files; give "
                                          "another place"));
  CATCH_CHECK(std::filesystem::file_size(part) == part_bytes);
  auto to_come = cli(with({"train", "--steps", "6", "--resume", dir, "--save-dir", dir, "--metrics",
                           dir + "/step-00000006/m.jsonl"}, tiny));
  CATCH_CHECK(to_come.code == 2);
  CATCH_CHECK_THAT(to_come.err, Contains("step-00000006': it would overwrite or add to that checkpoint's files"));
  // A --resume that is not there leaves no --save-dir behind (it made the folder and its lock).
  const std::string fresh = temp_path(".fresh");
  auto typo = cli(with({"train", "--steps", "6", "--resume", dir + "-typo", "--save-dir", fresh}, tiny));
  CATCH_CHECK(typo.code == 2);
  CATCH_CHECK_THAT(typo.err, Contains("--resume '" + dir + "-typo': does not exist"));
  CATCH_CHECK(!std::filesystem::exists(fresh));
  // Nor one refused later, once the folder and its lock were made (a data file not there).
  auto no_data = cli(with({"train", "--steps", "6", "--save-dir", fresh, "--data-file", dir + "-none.txt"}, tiny));
  CATCH_CHECK(no_data.code == 2);
  CATCH_CHECK(!std::filesystem::exists(fresh));
  // Another run's `latest` is no output file, with --save-dir or without (metrics lines went
  // into it).
  auto onto_latest = cli(with({"train", "--steps", "1", "--metrics", dir + "/latest"}, tiny));
  CATCH_CHECK(onto_latest.code == 2);
  CATCH_CHECK_THAT(onto_latest.err, Contains("--metrics '" + dir + "/latest' is a name the checkpoints in '") &&
                                        Contains("' use (a folder of checkpoints): give another name"));
  CATCH_CHECK(is_checkpoint_store_name("step-00000012"));
  CATCH_CHECK(!is_checkpoint_store_name("step-times.jsonl"));  // only a step's own folder name
  // Resuming from it, it goes on there.
  auto going_on = cli(with({"train", "--steps", "6", "--save-dir", dir, "--resume", dir + "/step-00000004"}, tiny));
  CATCH_CHECK(going_on.code == 0);
  CATCH_CHECK_THAT(going_on.out, Contains("busy per step, step 6 (median, range)"));  // the run's numbers (was 2..2, then 6..6)
  CATCH_CHECK(std::filesystem::exists(dir + "/step-00000006/manifest.json"));
  // From an older one there, it would start a second line of steps beside the first.
  auto fork = cli(with({"train", "--steps", "8", "--save-dir", dir, "--resume", dir + "/step-00000004"}, tiny));
  CATCH_CHECK(fork.code == 2);
  CATCH_CHECK_THAT(fork.err, Contains("--resume " + dir + "/step-00000004 is not the newest checkpoint in --save-dir '" + dir +
                                      "' (step-00000006 came after it): going on from it there would mix two runs' "
                                      "checkpoints, and a restart would take the newest: save into another folder"));
  // --init-from takes a checkpoint's parameters (its newest, given the folder), and refuses
  // them for a model of another shape, as --resume does: a shallower one, or other heads,
  // which split the same tensors otherwise (that trained on without a word).
  auto weights = cli(with({"train", "--steps", "1", "--init-from", dir}, tiny));
  CATCH_CHECK(weights.code == 0);
  auto shallow = cli({"train", "--steps", "1", "--init-from", dir + "/step-00000006", "--layers", "2", "--hidden", "32",
                      "--heads", "2", "--seq-len", "16", "--vocab", "64", "--microbatches", "4", "--microbatch-size", "2"});
  CATCH_CHECK(shallow.code == 2);
  CATCH_CHECK_THAT(shallow.err, Contains("--init-from " + dir + "/step-00000006: the checkpoint's gpt has --layers 4, this "
                                         "run --layers 2"));
  auto other_heads = cli({"train", "--steps", "1", "--init-from", dir, "--layers", "4", "--hidden", "32", "--heads", "4",
                    "--seq-len", "16", "--vocab", "64", "--microbatches", "4", "--microbatch-size", "2"});
  CATCH_CHECK(other_heads.code == 2);
  CATCH_CHECK_THAT(other_heads.err, Contains("--init-from " + dir + ": its newest valid checkpoint " + dir +
                                       "/step-00000006: the checkpoint's gpt has --heads 2, this run --heads 4"));
  // A damaged newest one is passed over with a warning (it was silent).
  std::ofstream(dir + "/step-00000006/manifest.json", std::ios::app) << "x";
  const std::string init_log = temp_path(".init.log");
  auto older = cli(with({"train", "--steps", "1", "--init-from", dir, "--log-file", init_log}, tiny));
  CATCH_CHECK(older.code == 0);
  std::stringstream init_logged;
  init_logged << std::ifstream(init_log).rdbuf();
  CATCH_CHECK_THAT(init_logged.str(), Contains(" warning: not initialising from a damaged checkpoint: "));
  CATCH_CHECK_THAT(init_logged.str(), Contains("initialised the parameters from " + dir + "/step-00000004"));
  std::filesystem::remove_all(dir);
  std::remove(straight.c_str());
  std::remove(resumed.c_str());
}

CATCH_TEST_CASE("train --init-from starts from saved weights, and a model they do not fit is one error naming them",
                "[apps][train][checkpoint]") {
  const std::string weights = temp_path(".safetensors"), again = temp_path(".safetensors");
  CATCH_REQUIRE(cli(with({"train", "--steps", "2", "--save-final", weights}, tiny)).code == 0);
  // One step at a learning rate too small to move a float32: the weights come back unchanged,
  // byte for byte, so they were loaded whole (on 2 stages x 2 chunks, another layout).
  auto tuned = cli(with({"train", "--steps", "1", "--lr", "1e-30", "--schedule", "interleaved", "--chunks", "2",
                         "--init-from", weights, "--save-final", again},
                        tiny));
  CATCH_REQUIRE(tuned.code == 0);
  CATCH_CHECK(read_bytes(again) == read_bytes(weights));
  // The reference of a fine-tuning run: --no-pipeline from the same weights trains as one stage
  // does, bit for bit (and not as from the seed's weights).
  const std::string reference = temp_path(".safetensors"), one_stage = temp_path(".safetensors"),
                    from_seed = temp_path(".safetensors");
  CATCH_REQUIRE(cli(with({"train", "--steps", "2", "--no-pipeline", "--init-from", weights, "--save-final", reference},
                         tiny)).code == 0);
  CATCH_REQUIRE(cli(with({"train", "--steps", "2", "--stages", "1", "--init-from", weights, "--save-final", one_stage},
                         tiny)).code == 0);
  CATCH_REQUIRE(cli(with({"train", "--steps", "2", "--no-pipeline", "--save-final", from_seed}, tiny)).code == 0);
  CATCH_CHECK(read_bytes(reference) == read_bytes(one_stage));
  CATCH_CHECK(read_bytes(reference) != read_bytes(from_seed));
  for (const auto& f : {reference, one_stage, from_seed}) std::remove(f.c_str());
  auto wrong = cli({"train", "--steps", "1", "--init-from", weights, "--layers", "4", "--hidden", "64", "--heads", "2",
                    "--seq-len", "16", "--vocab", "64", "--microbatches", "4", "--microbatch-size", "2"});
  CATCH_CHECK(wrong.code != 0);
  CATCH_CHECK_THAT(wrong.err, Contains("--init-from " + weights + ": the parameters do not fit the model:"));
  CATCH_CHECK_THAT(wrong.err, Contains("of another shape: "));
  // Another vocabulary: the tied embedding, held by the first stage and copied on the last, is
  // named once.
  auto vocab = cli({"train", "--steps", "1", "--init-from", weights, "--layers", "4", "--hidden", "32", "--heads", "2",
                    "--seq-len", "16", "--vocab", "128", "--microbatches", "4", "--microbatch-size", "2"});
  CATCH_CHECK(vocab.err == "actorpipe train: error: --init-from " + weights + ": the parameters do not fit the model: " +
                               "1 of another shape: tok_emb.weight (has [128, 32], given [64, 32])\n");
  auto both = cli(with({"train", "--steps", "1", "--init-from", weights, "--resume", "/tmp"}, tiny));
  CATCH_CHECK_THAT(both.err, Contains("give --init-from (weights only) or --resume (the whole state), not both"));
  // Weights that are no weights: NaN (the first step's loss was NaN, blamed on --lr), whole
  // numbers (cast, they trained from integers), one tensor under two names (one was dropped).
  const auto saved = load_safetensors(weights);
  const auto changed = [&](const std::function<void(std::vector<std::pair<std::string, tensor_box>>&)>& change) {
    std::vector<std::pair<std::string, tensor_box>> t;
    for (const auto& [name, box] : saved) {  // copies: the loaded boxes may share the file's pages
      tensor_box copy = tensor_box::empty(box.dtype(), box.shape());
      std::memcpy(copy.data(), box.data(), box.nbytes());
      t.emplace_back(name, copy);
    }
    change(t);
    const std::string file = temp_path(".safetensors");
    save_safetensors(file, t);
    return file;
  };
  const std::string nan_file = changed([](auto& t) { static_cast<float*>(t.at(0).second.data())[3] = std::nanf(""); });
  auto nan_run = cli(with({"train", "--steps", "1", "--init-from", nan_file}, tiny));
  CATCH_CHECK(nan_run.code == 2);
  CATCH_CHECK_THAT(nan_run.err, Contains("--init-from " + nan_file + ": '" + saved.at(0).first + "' holds 1 of its "));
  CATCH_CHECK_THAT(nan_run.err, Contains(" values that are not finite (NaN or infinite)"));
  const std::string int_file = changed([](auto& t) {
    const tensor_box f = t.at(0).second;
    tensor_box i = tensor_box::empty(tensor_dtype::i32, f.shape());
    for (std::size_t k = 0; k < f.nbytes() / sizeof(float); ++k) static_cast<std::int32_t*>(i.data())[k] = 1;
    t.at(0).second = i;
  });
  auto int_run = cli(with({"train", "--steps", "1", "--init-from", int_file}, tiny));
  CATCH_CHECK(int_run.code == 2);
  CATCH_CHECK_THAT(int_run.err, Contains("the parameters do not fit the model: 1 of another type: " + saved.at(0).first +
                                         " (has Float, given Int)"));
  // A float64 value past a float's range: finite in the file, infinite in the model (the first
  // step's loss was NaN, exit 1 blaming --lr); within it, float64 weights load as floats.
  const auto as_f64 = [&](double at_1) {
    return changed([at_1](auto& t) {
      const tensor_box f = t.at(0).second;
      tensor_box d = tensor_box::empty(tensor_dtype::f64, f.shape());
      for (std::size_t k = 0; k < f.nbytes() / sizeof(float); ++k)
        static_cast<double*>(d.data())[k] = static_cast<const float*>(f.data())[k];
      static_cast<double*>(d.data())[1] = at_1;
      t.at(0).second = d;
    });
  };
  const std::string huge_file = as_f64(1e300), fine_file = as_f64(0.5);
  auto huge_run = cli(with({"train", "--steps", "1", "--init-from", huge_file}, tiny));
  CATCH_CHECK(huge_run.code == 2);
  CATCH_CHECK_THAT(huge_run.err, Contains("--init-from " + huge_file + ": '" + saved.at(0).first + "' holds 1 of its ") &&
                                     Contains(" values beyond the range of the model's Float parameters (infinite once converted)"));
  // Converted weights are said, and whether they were rounded (they loaded without a word).
  const std::string fine_log = temp_path(".log");
  CATCH_CHECK(cli(with({"train", "--steps", "1", "--init-from", fine_file, "--log-file", fine_log}, tiny)).code == 0);
  CATCH_CHECK_THAT(read_text(fine_log), Contains("read 1 tensor given as Double into the model's Float parameters "
                                                 "(rounded to the nearest Float): " + saved.at(0).first + "\n"));
  const std::string bf16_file = changed([](auto& t) {
    const tensor_box f = t.at(0).second;
    tensor_box h = tensor_box::empty(tensor_dtype::bf16, f.shape());
    for (std::size_t k = 0; k < f.nbytes() / sizeof(float); ++k) {  // a bfloat16 is a float's upper half
      std::uint32_t bits;
      std::memcpy(&bits, static_cast<const float*>(f.data()) + k, 4);
      static_cast<std::uint16_t*>(h.data())[k] = static_cast<std::uint16_t>(bits >> 16);
    }
    t.at(0).second = h;
  });
  const std::string bf16_log = temp_path(".log");
  CATCH_CHECK(cli(with({"train", "--steps", "1", "--init-from", bf16_file, "--log-file", bf16_log}, tiny)).code == 0);
  CATCH_CHECK_THAT(read_text(bf16_log), Contains("read 1 tensor given as BFloat16 into the model's Float parameters "
                                                 "(exactly): " + saved.at(0).first + "\n"));
  CATCH_CHECK_THAT(read_text(bf16_log), !Contains("given as Double"));
  std::string layer_norm;  // a LayerNorm weight, given again under its TensorFlow name
  for (const auto& [name, box] : saved)
    if (name.size() > 7 && name.compare(name.size() - 7, 7, ".weight") == 0 && box.shape().size() == 1) layer_norm = name;
  CATCH_REQUIRE(!layer_norm.empty());
  const std::string gamma = layer_norm.substr(0, layer_norm.size() - 7) + ".gamma";
  const std::string twice_file = changed([&](auto& t) {
    for (const auto& [name, box] : std::vector<std::pair<std::string, tensor_box>>(t))
      if (name == layer_norm) t.emplace_back(gamma, box);
  });
  auto twice = cli(with({"train", "--steps", "1", "--init-from", twice_file}, tiny));
  CATCH_CHECK(twice.code == 2);
  CATCH_CHECK_THAT(twice.err, Contains("the weights hold '" + layer_norm + "' twice (as '"));
  // A misspelt name is one missing and one the model lacks: both are said (only the missing one
  // was); and names under a prefix the model does not use are pointed out.
  const std::string first = saved.at(0).first;
  const std::string typo_file = changed([&](auto& t) { t.at(0).first = first + "x"; });
  auto typo = cli(with({"train", "--steps", "1", "--init-from", typo_file}, tiny));
  CATCH_CHECK(typo.code == 2);
  CATCH_CHECK_THAT(typo.err, Contains("the parameters do not fit the model: 1 missing: " + first + "; 1 not in the model: " +
                                      first + "x"));
  const std::string prefixed_file = changed([](auto& t) {
    for (auto& entry : t) entry.first = "model." + entry.first;
  });
  auto prefixed = cli(with({"train", "--steps", "1", "--init-from", prefixed_file}, tiny));
  CATCH_CHECK(prefixed.code == 2);
  CATCH_CHECK_THAT(prefixed.err, Contains("(the file's names are the model's with 'model.' before them)"));
  // A checkpoint whose part was altered: what is wrong with it, as one sentence (it read "'DIR'
  // is a directory with DIR/stage-1.safetensors: ...").
  const std::string ckpts = temp_path(".init-ck");
  CATCH_REQUIRE(cli(with({"train", "--steps", "1", "--save-dir", ckpts}, tiny)).code == 0);
  std::ofstream(ckpts + "/step-00000001/stage-1.safetensors", std::ios::app) << 'x';
  auto altered = cli(with({"train", "--steps", "1", "--init-from", ckpts + "/step-00000001"}, tiny));
  CATCH_CHECK(altered.code == 2);
  CATCH_CHECK_THAT(altered.err, Contains("'" + ckpts + "/step-00000001' is a directory whose checkpoint cannot be used: " +
                                         ckpts + "/step-00000001/stage-1.safetensors: "));
  std::filesystem::remove_all(ckpts);
  for (const auto& f : {nan_file, int_file, huge_file, fine_file, fine_log, bf16_file, bf16_log, twice_file, typo_file,
                        prefixed_file})
    std::remove(f.c_str());
  std::remove(weights.c_str());
  std::remove(again.c_str());
}

CATCH_TEST_CASE("train --schedule-file: the plan's own stages, chunks and microbatches, no generator's rules",
                "[apps][train]") {
  const std::string one = temp_path(".txt"), two_chunks = temp_path(".txt");
  std::ofstream(one) << "0: F0.0 B0.0\n1: F1.0 B1.0\n";  // one microbatch: 1f1b's rules refuse M < stages
  // simulate --schedule interleaved --stages 2 --microbatches 2 --print-plan
  std::ofstream(two_chunks) << "0: F0.0 F0.1 F2.0 F2.1 B2.0 B2.1 B0.0 B0.1\n1: F1.0 F1.1 F3.0 B3.0 F3.1 B3.1 B1.0 B1.1\n";
  const std::vector<std::string> model = {"--layers", "4", "--hidden", "32", "--heads", "2", "--seq-len", "16",
                                          "--vocab", "64", "--microbatch-size", "2", "--steps", "2"};
  auto m1 = cli(with({"train", "--schedule-file", one}, model));
  CATCH_CHECK(m1.err.find("error") == std::string::npos);
  CATCH_CHECK(m1.code == 0);
  CATCH_CHECK_THAT(m1.out, Contains("2 stages x 1 chunk; 1 microbatch x 2 sequences"));
  auto file = cli(with({"train", "--schedule-file", two_chunks}, model));
  CATCH_REQUIRE(file.code == 0);
  CATCH_CHECK_THAT(file.out, Contains("2 stages x 2 chunks; 2 microbatches x 2 sequences"));
  auto generated = cli(with({"train", "--schedule", "interleaved", "--microbatches", "2"}, model));
  CATCH_REQUIRE(generated.code == 0);
  const auto final_loss = [](const std::string& out) { return out.substr(out.rfind("final loss")); };
  CATCH_CHECK(final_loss(file.out) == final_loss(generated.out));  // the same plan, the same bits
  // Flags that are given must match the file.
  auto mismatch = cli(with({"train", "--schedule-file", two_chunks, "--microbatches", "4"}, model));
  CATCH_CHECK(mismatch.code == 2);
  CATCH_CHECK_THAT(mismatch.err, Contains("the run has 4 microbatches (--microbatches, or --batch-size over --microbatch-size) but schedule "
                                          "file '" + two_chunks + "' has 2"));
  CATCH_CHECK(mismatch.out.empty());  // refused before the run's header (it announced 4 microbatches)
  // A config's stages are named before its layer rule blames the layers.
  const std::string config = temp_path(".json");
  std::ofstream(config) << R"({"pp": 4, "chunks": 2, "num_microbatches": 8, "microbatch_size": 2, "layers": 2})";
  auto with_config = cli({"train", "--config", config, "--schedule-file", two_chunks});
  CATCH_CHECK(with_config.code == 2);
  CATCH_CHECK_THAT(with_config.err, Contains("the run has 4 stages (--stages, or pp in a config) but schedule file '" +
                                             two_chunks + "' has 2"));
  // Named before the rules on stages blame the layers ("layers=4 cannot be split over 8").
  auto stages = cli(with({"train", "--schedule-file", two_chunks, "--stages", "4"}, model));
  CATCH_CHECK(stages.code == 2);
  CATCH_CHECK_THAT(stages.err, Contains("the run has 4 stages (--stages) but schedule file '" + two_chunks + "' has 2"));
  // --no-pipeline is the reference of the plan's run: the plan's microbatches, not the default 8.
  auto reference = cli(with({"train", "--schedule-file", one, "--no-pipeline"}, model));
  CATCH_CHECK(reference.code == 0);
  CATCH_CHECK_THAT(reference.out, Contains("1 microbatch x 2 sequences"));
  CATCH_CHECK_THAT(reference.out, Contains("--schedule-file does not apply (but the plan's 1 microbatch does)\n"));
  // A plan through a pipe, as `--schedule-file <(actorpipe simulate ... --format plan)` gives
  // it: read once (a second read finds the pipe empty), the same run as from the file.
  int fds[2];
  CATCH_REQUIRE(::pipe(fds) == 0);
  std::string text;
  {
    std::ifstream f(two_chunks);
    text.assign(std::istreambuf_iterator<char>(f), {});
  }
  CATCH_REQUIRE(::write(fds[1], text.data(), text.size()) == static_cast<ssize_t>(text.size()));
  ::close(fds[1]);
  auto piped = cli(with({"train", "--schedule-file", "/dev/fd/" + std::to_string(fds[0])}, model));
  ::close(fds[0]);
  CATCH_CHECK(piped.err.find("error") == std::string::npos);
  CATCH_REQUIRE(piped.code == 0);
  CATCH_CHECK(final_loss(piped.out) == final_loss(file.out));
  // Not for a restart (launch --max-restarts), which would find the pipe read: named, at once.
  CATCH_REQUIRE(::pipe(fds) == 0);
  ::close(fds[1]);
  ::setenv("ACTORPIPE_RESTART_COUNT", "1", 1);
  auto restarted = cli(with({"train", "--schedule-file", "/dev/fd/" + std::to_string(fds[0])}, model));
  ::unsetenv("ACTORPIPE_RESTART_COUNT");
  ::close(fds[0]);
  CATCH_CHECK(restarted.code == 2);
  CATCH_CHECK_THAT(restarted.err, Contains("is not a regular file (a pipe?): a restart reads the plan again, and a pipe "
                                           "gives it once; write the plan to a file"));
  // Backwards out of microbatch order add the gradients up in another order: it trains, and says so.
  const std::string reversed = temp_path(".txt"), log = temp_path(".log");
  std::ofstream(reversed) << "0: F0.0 F0.1 B0.1 B0.0\n1: F1.0 F1.1 B1.1 B1.0\n";
  auto out_of_order = cli(with({"train", "--schedule-file", reversed, "--log-file", log}, model));
  CATCH_CHECK(out_of_order.code == 0);
  std::stringstream logged;
  logged << std::ifstream(log).rdbuf();
  CATCH_CHECK_THAT(logged.str(), Contains(" warning: schedule file '" + reversed + "': virtual stage 0 runs its B's (which "
                                          "add up gradients) for microbatches 1, 0 (and 1 more virtual stage or op out of "
                                          "order); gradients add up in that order, so the run's numbers differ (by "
                                          "rounding) from a plan's in microbatch order"));
  // The same plan from a user's generator, registered in code: said too (it trained silently).
  register_schedule("test-reversed", [](const schedule_request&) {
    return parse_plan("0: F0.0 F0.1 B0.1 B0.0\n1: F1.0 F1.1 B1.1 B1.0\n", "test-reversed");
  });
  std::remove(log.c_str());
  auto from_code = cli(with({"train", "--schedule", "test-reversed", "--microbatches", "2", "--log-file", log}, model));
  CATCH_CHECK(from_code.code == 0);
  std::stringstream logged_again;
  logged_again << std::ifstream(log).rdbuf();
  CATCH_CHECK_THAT(logged_again.str(), Contains(" warning: schedule 'test-reversed': virtual stage 0 runs its B's (which "
                                                "add up gradients) for microbatches 1, 0"));
  for (const auto& f : {one, two_chunks, reversed, log}) std::remove(f.c_str());
}

CATCH_TEST_CASE("train's output files: a folder that takes no files is refused first, a device is not replaced, "
                "a write that fails is named",
                "[apps][train][errors]") {
  // /proc takes no new file, even for root (whose permission bits say yes to everything).
  for (const char* flag : {"--save-final", "--trace", "--metrics"}) {
    auto r = cli(with({"train", "--steps", "1", flag, "/proc/actorpipe-x"}, tiny));
    CATCH_CHECK(r.code == 2);
    CATCH_CHECK_THAT(r.err, Contains(std::string(flag) + " '/proc/actorpipe-x': cannot write in the folder '/proc' ("));
    CATCH_CHECK(r.out.empty());
  }
  auto dir = cli(with({"train", "--steps", "1", "--save-dir", "/proc/actorpipe-x/ck"}, tiny));
  CATCH_CHECK(dir.code == 2);
  CATCH_CHECK_THAT(dir.err, Contains("--save-dir '/proc/actorpipe-x/ck': cannot write in '/proc' ("));
  // --save-final writes beside its file and renames: a pipe (or device) there would be replaced.
  const std::string fifo = temp_path(".fifo");
  CATCH_REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  auto pipe = cli(with({"train", "--steps", "1", "--save-final", fifo}, tiny));
  CATCH_CHECK(pipe.code == 2);
  CATCH_CHECK_THAT(pipe.err, Contains("--save-final '" + fifo + "' exists and is not a regular file"));
  CATCH_CHECK(std::filesystem::is_fifo(fifo));
  std::remove(fifo.c_str());
  // A metrics file on a full disk: the run goes on, says which line failed and why, does not
  // claim it wrote the metrics, and exits 1 naming it (at --log-level off it said nothing and
  // exited 0). (A process of its own: the log goes to its stderr.)
  const std::string log = temp_path(".log");
  const int quiet_code = wait_process(start_process(ACTORPIPE_BIN, with({"train", "--steps", "2", "--metrics", "/dev/full",
                                                                           "--log-level", "off"}, tiny), {}, log), 120);
  CATCH_CHECK(quiet_code == 1);
  CATCH_CHECK_THAT(read_text(log), Contains("actorpipe train: error: cannot write line 1 of --metrics file '/dev/full' (No "
                                            "space left on device); the run's other outputs are written"));
  const int code = wait_process(start_process(ACTORPIPE_BIN, with({"train", "--steps", "2", "--metrics", "/dev/full"}, tiny), {}, log), 120);
  const std::string text = read_text(log);
  CATCH_INFO(text);
  CATCH_CHECK(code == 1);
  CATCH_CHECK_THAT(text, Contains("actorpipe: error: cannot write line 1 of --metrics file '/dev/full' (No space left on "
                                  "device): training goes on without it"));
  CATCH_CHECK(text.find("wrote per-step metrics") == std::string::npos);
  CATCH_CHECK_THAT(text, Contains("final loss"));
  std::remove(log.c_str());
}

CATCH_TEST_CASE("a restart of a job stopped after its final save trains no more, and writes --save-final from it",
                "[apps][train][checkpoint]") {
  const std::string dir = temp_path(".ckpt"), first = temp_path(".safetensors"), again = temp_path(".safetensors");
  // Checkpoints before the last one (--save-every 1): the restart took step 2's, trained the
  // last step again and wrote step 3 anew.
  auto done = cli(with({"train", "--steps", "3", "--save-dir", dir, "--save-every", "1", "--save-final", first}, tiny));
  CATCH_REQUIRE(done.code == 0);
  // The job killed between the last checkpoint's rename and its `latest`: `latest` names the
  // one before, its replacement lies beside it. The restart left both so (exit 0).
  { std::ofstream(dir + "/latest") << "step-00000002\n"; }
  { std::ofstream(dir + "/.latest-0123456789ab") << "step-00000003\n"; }
  // As launch --max-restarts starts it (a process of its own: the restart count is in its environment).
  const std::string log = temp_path(".log");
  // ... and before the commit's pruning (--keep-last 2 here: the three steps' checkpoints stayed).
  const int code = wait_process(start_process(ACTORPIPE_BIN, with({"train", "--steps", "3", "--save-dir", dir,
                                                                     "--save-every", "1", "--save-final", again,
                                                                     "--keep-last", "2"}, tiny),
                                              {{"ACTORPIPE_RESTART_COUNT", "1"}}, log),
                                120);
  const std::string text = read_text(log);
  CATCH_INFO(text);
  CATCH_CHECK(code == 0);
  CATCH_CHECK_THAT(text, Contains("restart 1 of the job: " + dir + "/step-00000003 holds the last step (--steps 3): the "
                                  "training was done before the job stopped, and runs no more"));
  CATCH_CHECK(text.find("step 1/3") == std::string::npos);  // nothing trained
  CATCH_CHECK(read_bytes(again) == read_bytes(first));      // the same parameters, bit for bit
  CATCH_CHECK(read_text(dir + "/latest") == "step-00000003\n");
  CATCH_CHECK(!std::filesystem::exists(dir + "/.latest-0123456789ab"));
  CATCH_CHECK(!std::filesystem::exists(dir + "/step-00000001"));
  CATCH_CHECK(std::filesystem::exists(dir + "/step-00000002/manifest.json"));
  CATCH_CHECK_THAT(text, Contains("--save-dir " + dir + ": latest named step-00000002; it names step-00000003 now, the "
                                  "newest complete checkpoint"));
  std::filesystem::remove_all(dir);
  for (const auto& f : {first, again, log}) std::remove(f.c_str());
}

CATCH_TEST_CASE("train --batch-size alone is cut into 8 microbatches (or 4, 2, 1), a plan file's own, the same for the "
                "reference", "[apps][train]") {
  // It was refused for a pipeline ("pp=2 needs num_microbatches or microbatch_size") and taken
  // as one microbatch by --no-pipeline, so a run and its reference could not share the flags.
  const std::vector<std::string> model = {"train", "--layers", "4", "--hidden", "32", "--heads", "2", "--seq-len", "16",
                                          "--vocab", "64", "--steps", "1"};
  for (const auto& [batch, cut] : std::vector<std::pair<std::string, std::string>>{
           {"16", "8 microbatches x 2 sequences"}, {"12", "4 microbatches x 3 sequences"}, {"7", "1 microbatch x 7 sequences"}}) {
    CATCH_INFO("--batch-size " << batch);
    auto piped = cli(with(model, {"--batch-size", batch, "--schedule", "gpipe"}));
    CATCH_CHECK(piped.code == 0);
    CATCH_CHECK_THAT(piped.out, Contains(cut));
    auto reference = cli(with(model, {"--batch-size", batch, "--no-pipeline"}));
    CATCH_CHECK(reference.code == 0);
    CATCH_CHECK_THAT(reference.out, Contains(cut));
  }
  // Where the cut is too few for the schedule, the error says where its count came from.
  auto prime = cli(with(model, {"--batch-size", "7"}));
  CATCH_CHECK(prime.code == 2);
  CATCH_CHECK_THAT(prime.err, Contains("1f1b needs microbatches >= stages") &&
                                  Contains("(--batch-size 7 alone is cut into 1 microbatch, the largest of 8, 4, 2, 1 "
                                           "that divides it: give --microbatches)"));
  // Not on an error of another flag's (it read "steps=0 must be >= 1 (--batch-size 4 alone ...)").
  auto other = cli(with(model, {"--batch-size", "4", "--steps", "0"}));
  CATCH_CHECK(other.code == 2);
  CATCH_CHECK_THAT(other.err, Contains("steps") && !Contains("alone is cut into"));
  const std::string file = temp_path(".txt");
  std::ofstream(file) << "0: F0.0 F0.1 B0.0 B0.1\n1: F1.0 B1.0 F1.1 B1.1\n";  // 2 microbatches
  auto planned = cli(with(model, {"--batch-size", "6", "--schedule-file", file}));
  CATCH_CHECK(planned.code == 0);
  CATCH_CHECK_THAT(planned.out, Contains("2 microbatches x 3 sequences"));
  std::remove(file.c_str());
}

CATCH_TEST_CASE("train names the flags a run has no use for instead of dropping them", "[apps][train]") {
  const std::vector<std::string> run = with({"train", "--steps", "1", "--warmup-steps", "0"}, tiny);
  auto budget = cli(with(run, {"--budget", "3"}));
  CATCH_CHECK(budget.code == 0);
  CATCH_CHECK_THAT(budget.out, Contains("note: --budget 3 is for a dynamic policy (--schedule greedy): 1f1b has no budget, "
                                        "and runs without it\n"));
  // Checkpoint flags without a folder are an error, not a note: the run would save nothing
  // while its user believes it checkpoints.
  auto unsaved = cli(with(run, {"--save-every", "5", "--keep-last", "2"}));
  CATCH_CHECK(unsaved.code == 2);
  CATCH_CHECK(unsaved.err == "actorpipe train: error: --save-every 5 needs --save-dir (the folder to checkpoint into)\n");
  auto unkept = cli(with(run, {"--keep-last", "2"}));
  CATCH_CHECK(unkept.code == 2);
  CATCH_CHECK(unkept.err == "actorpipe train: error: --keep-last 2 needs --save-dir (the folder whose checkpoints it keeps)\n");
  // A refused run makes no --save-dir folder, and prints no note its error contradicts.
  const std::string nowhere = temp_path(".dangling");
  std::filesystem::create_symlink(temp_path(".nowhere"), nowhere);
  auto dangling = cli(with(run, {"--save-dir", nowhere}));
  CATCH_CHECK(dangling.code == 2);
  CATCH_CHECK_THAT(dangling.err, Contains("--save-dir '" + nowhere + "' is a symbolic link to '"));
  CATCH_CHECK_THAT(dangling.err, Contains("', which does not exist"));
  std::remove(nowhere.c_str());
  const std::string never = temp_path(".never-made");
  auto refused = cli(with(run, {"--save-dir", never, "--keep-last", "-1"}));
  CATCH_CHECK(refused.code == 2);
  CATCH_CHECK_FALSE(std::filesystem::exists(never));
  auto threads = cli(with(run, {"--threads-per-stage", "5000"}));
  CATCH_CHECK(threads.code == 2);
  CATCH_CHECK_THAT(threads.err, Contains("--threads-per-stage must be in [1, 1024]: got 5000"));
  CATCH_CHECK(threads.out.find("note:") == std::string::npos);
  auto greedy = cli(with(run, {"--budget", "3", "--schedule", "greedy"}));
  CATCH_CHECK(greedy.code == 0);
  CATCH_CHECK(greedy.out.find("note: --budget") == std::string::npos);
  auto reference = cli(with(run, {"--no-pipeline", "--stages", "3", "--schedule", "zbv"}));
  CATCH_CHECK(reference.code == 0);
  // And what does not apply is not checked either.
  auto uncut = cli(with(run, {"--no-pipeline", "--partition", "counts:1,1"}));
  CATCH_CHECK(uncut.code == 0);
  CATCH_CHECK_THAT(uncut.out, Contains("note: --no-pipeline trains the whole model as one rank: --partition does not apply\n"));
  CATCH_CHECK_THAT(reference.out,
                   Contains("note: --no-pipeline trains the whole model as one rank: --stages, --schedule do not apply\n"));
  // The same given by --set, and the pipeline's own switches (dropped without a word).
  auto set_reference = cli(with(run, {"--no-pipeline", "--set", "pp=3", "--set", "schedule=zbv", "--no-w-fill"}));
  CATCH_CHECK(set_reference.code == 0);
  CATCH_CHECK_THAT(set_reference.out, Contains("note: --no-pipeline trains the whole model as one rank: --set pp, "
                                               "--set schedule, --no-w-fill do not apply\n"));
  auto zero = cli(with(run, {"--zero", "1"}));
  CATCH_CHECK(zero.code == 0);
  CATCH_CHECK_THAT(zero.out, Contains("note: zero_stage=1 splits the optimizer state over data-parallel replicas, and "
                                      "--dp 1 has one: each rank keeps all of its own\n"));
}

CATCH_TEST_CASE("train with a partition other than the default cuts every layer: 7 stages for 4 blocks", "[apps][train]") {
  // The default gives each virtual stage a block; uniform cuts the embedding, blocks, ln_f and head.
  auto seven = cli(with({"train", "--steps", "1", "--stages", "7", "--schedule", "gpipe", "--partition", "uniform"}, tiny));
  CATCH_CHECK(seven.code == 0);
  CATCH_CHECK_THAT(seven.out, Contains("partition: uniform: 0: embed (1 layer) | 1: blocks.0 (1 layer) | "));
  CATCH_CHECK_THAT(seven.out, Contains("| 6: lm_head (1 layer)\n"));
}

// A config's batch_size and num_microbatches and a typed microbatch size apart: the config's rule
// (the count wins) dropped what was typed, with a note. Refused, each named as given.
CATCH_TEST_CASE("a typed batch key against a config's two is refused, not overridden", "[apps][train][errors]") {
  const std::string config = temp_path(".batch.json");
  std::ofstream(config) << R"({"pp": 2, "batch_size": 8, "num_microbatches": 2, "layers": 2, "hidden": 32, "heads": 2,
                               "seq_len": 16, "vocab": 64, "steps": 1})";
  auto typed = cli({"train", "--config", config, "--microbatch-size", "1"});
  CATCH_CHECK(typed.code == 2);
  CATCH_CHECK(typed.err == "actorpipe train: error: batch_size=8 (the config's) is not num_microbatches=2 (the config's) x "
                           "--microbatch-size 1 = 2: give two of the three\n");
  auto set = cli(with({"train", "--batch-size", "8", "--microbatches", "2", "--set", "microbatch_size=3"},
                      {"--layers", "2", "--hidden", "32", "--heads", "2", "--seq-len", "16", "--vocab", "64"}));
  CATCH_CHECK(set.code == 2);
  CATCH_CHECK_THAT(set.err, Contains("--batch-size 8 is not --microbatches 2 x --set microbatch_size=3 = 6: give two of the three"));
  // The config alone keeps its documented rule: the count wins, with a note.
  auto alone = cli({"train", "--config", config});
  CATCH_CHECK(alone.code == 0);
  CATCH_CHECK_THAT(alone.out, Contains("2 microbatches x 4 sequences"));
  std::remove(config.c_str());
}

CATCH_TEST_CASE("train: bad input is one clear error line and a non-zero exit", "[apps][train][errors]") {
  const std::string deadlock = temp_path(".txt"), short_bin = temp_path(".bin"), text = temp_path(".txt"),
                    big_token = temp_path(".bin");
  {
    std::ofstream f(deadlock);
    f << "0: F0.0 B0.0 F0.1 B0.1\n1: F1.1 F1.0 B1.0 B1.1\n";
    std::ofstream s(short_bin, std::ios::binary);
    for (int i = 0; i < 10; ++i) s.put(static_cast<char>(i)).put(0);
    std::ofstream x(text);
    x << "hello, pipeline\n";
    std::ofstream big(big_token, std::ios::binary);
    for (int i = 0; i < 40; ++i) big.put(static_cast<char>(i == 5 ? 300 % 256 : 1)).put(static_cast<char>(i == 5 ? 1 : 0));
  }
  struct bad_case {
    std::vector<std::string> args;
    std::string message;
  };
  const std::vector<std::string> tiny_model(tiny.begin(), tiny.begin() + 10);  // without the batch flags
  const std::string folder = std::filesystem::path(temp_path(".x")).parent_path().string();  // exists
  const std::string blocked = temp_path(".file");  // a file, where --save-dir would need a folder
  std::ofstream(blocked) << "x";
  std::string deep_folder = folder;  // parts of 200 bytes, 4000 bytes in all: never made
  while (deep_folder.size() < 4000) deep_folder += "/" + std::string(200, 'p');
  // Links that lead nowhere a file can be made, and a name past 255 bytes: the run trained, then
  // failed to write (exit 1, the weights lost).
  const std::string loop_a = temp_path(".loopa"), loop_b = temp_path(".loopb"), nowhere = temp_path(".nowhere");
  std::filesystem::create_symlink(loop_b, loop_a);
  std::filesystem::create_symlink(loop_a, loop_b);
  std::filesystem::create_symlink("no-such-folder/x.st", nowhere);
  const std::string long_name = folder + "/" + std::string(256, 'n') + ".st";
  const std::string link_folder = std::filesystem::weakly_canonical(std::filesystem::path(nowhere).parent_path()).string();
  const std::string unread = temp_path(".unread-fifo");  // a pipe nothing reads: the run hung at step 1
  CATCH_REQUIRE(::mkfifo(unread.c_str(), 0600) == 0);
  std::vector<bad_case> cases = {
      {with({"train", "--log-file", unread}, tiny),  // it waited for a reader, without a word
       "--log-file '" + unread + "' is a pipe that nothing reads"},
      {with({"train", "--metrics", unread}, tiny),
       "--metrics '" + unread + "' is a pipe that nothing reads: what is written there would wait for ever (start its "
       "reader first)"},
      {with({"train", "--save-final", loop_a}, tiny), "--save-final '" + loop_a + "' is a symbolic link in a loop of links"},
      {with({"train", "--metrics", nowhere}, tiny),
       "--metrics '" + nowhere + "' is a symbolic link leading to '" + link_folder + "/no-such-folder/x.st', whose folder '" +
           link_folder + "/no-such-folder' does not exist"},
      {with({"train", "--save-final", long_name}, tiny),
       "--save-final '" + long_name + "': the file name is 259 bytes, more than the 255 a name may have there"},
      {with({"train", "--schedule-file", deadlock, "--microbatches", "2"}, {}), "deadlock: no rank can proceed"},
      {with({"train", "--schedule", "nope"}, tiny), "unknown schedule 'nope'"},
      {with({"train", "--data-file", "/nonexistent/data.bin"}, tiny), "/nonexistent/data.bin"},
      {with({"train", "--data-file", short_bin}, tiny),
       "--data-file '" + short_bin + "' holds 10 uint16 tokens: one sample of --seq-len 16 needs 17"},
      {with({"train", "--data-file", "/dev/null"}, tiny), "--data-file '/dev/null' is not a regular file"},
      {with({"train", "--stage", "3"}, tiny), "unknown flag '--stage' (did you mean --stages?)"},
      {with({"train", "--batch-size", "12"}, tiny),  // tiny: --microbatches 4 --microbatch-size 2
       "--batch-size 12 is not --microbatches 4 x --microbatch-size 2 = 8: give two of the three"},
      {with({"train", "--data-file", big_token}, tiny),
       "--data-file: data file '" + big_token + "' token 300 at position 5 is >= vocab 64 (--vocab 64; a .bin file holds "
       "token ids below it)"},
      {with({"train", "--data-file", text}, tiny), "needs --vocab >= 256"},
      // What is wrong with the path comes before what its name implies.
      {with({"train", "--data-file", "/nonexistent/data.txt"}, tiny), "--data-file '/nonexistent/data.txt' does not exist"},
      {with({"train", "--data-file", folder}, tiny), "--data-file '" + folder + "' is a directory: give the file"},
      {with({"train", "--init-from", folder}, tiny), "--init-from " + folder + ": '" + folder +
                                                        "' is a directory with no valid checkpoint (none written) (give "
                                                        "a weights file, a checkpoint, or a folder of them)"},
      {with({"train", "--hidden", "30", "--heads", "4"}, {}), "hidden"},
      {with({"train", "--set", "tp=2"}, tiny), "tp=2: this build has no tensor parallelism"},
      {with({"train", "--dp", "2", "--zero", "2"}, tiny),
       "--zero must be 0 or 1: got 2 (ZeRO-2/3, which also shard gradients and parameters, are not implemented)"},
      {with({"train", "--stages", "1", "--dp", "2", "--zero", "3"}, tiny), "--zero must be 0 or 1: got 3"},
      {with({"train", "--zero", "-1"}, tiny), "--zero must be 0 or 1: got -1"},
      // A --dp typo past the memory: named with what to lower (it named the shape and --stages).
      {with({"train", "--stages", "2", "--dp", "1000000"}, tiny), "2000000 ranks in this process (stages x --dp 1000000 "
                                                                  "replicas)"},
      // From --set or a config, named by its key (it said --zero, never typed).
      {with({"train", "--stages", "1", "--dp", "2", "--set", "zero_stage=3"}, tiny),
       "zero_stage=3 is not implemented: give 0 or 1 (ZeRO-2/3, which also shard gradients and parameters, are not "
       "implemented)"},
      // Named as typed, not by the config's keys (grad_clip=-1).
      {with({"train", "--grad-clip", "-1"}, tiny), "--grad-clip must be a finite number >= 0 (0 = no clipping): got -1"},
      {with({"train", "--lr", "-1"}, tiny), "--lr must be a number > 0 within a float's normal range, 1.18e-38 to 3.4e38: got -1"},
      {with({"train", "--lr", "0"}, tiny), "--lr must be a number > 0 within a float's normal range, 1.18e-38 to 3.4e38: got 0"},
      // Below a float's normal range: the update was nothing (--lr 1e-310 trained at lr 0).
      {with({"train", "--lr", "1e-310"}, tiny), "--lr must be a number > 0 within a float's normal range, 1.18e-38 to 3.4e38: got 1e-310"},
      {with({"train", "--set", "lr=1e-40"}, tiny), "--lr must be a number > 0 within a float's normal range, 1.18e-38 to 3.4e38: got 1e-40"},
      // Past a float: the update made every weight infinite, and the run ended with exit 0.
      {with({"train", "--lr", "1e300"}, tiny), "--lr must be a number > 0 within a float's normal range, 1.18e-38 to 3.4e38: got 1e+300"},
      {with({"train", "--set", "lr=1e39"}, tiny), "--lr must be a number > 0 within a float's normal range, 1.18e-38 to 3.4e38: got 1e+39"},
      // Too small for a double: it read as 0, "no clipping".
      {with({"train", "--grad-clip", "1e-400"}, tiny), "--grad-clip: 1e-400 is out of a double's range (it reads as 0)"},
      {with({"train", "--lr", "1e400"}, tiny), "--lr: 1e400 is out of a double's range (it reads as inf)"},
      {with({"train", "--weight-decay", "-0.5"}, tiny), "--weight-decay must be a finite number >= 0: got -0.5"},
      {with({"train", "--adam-beta1", "1"}, tiny), "--adam-beta1 must be in [0, 1): got 1"},
      {with({"train", "--lr-decay-style", "cos"}, tiny), "--lr-decay-style must be linear, cosine or constant: got 'cos'"},
      // Megatron-LM's names, pointed to ours.
      {with({"train", "--min-lr", "1e-5"}, tiny),
       "unknown flag '--min-lr' (did you mean --min-lr-ratio (a fraction of --lr: Megatron's --min-lr is --lr x "
       "--min-lr-ratio)?)"},
      {with({"train", "--num-layers", "2"}, tiny), "unknown flag '--num-layers' (did you mean --layers?)"},
      {with({"train", "--adam-epsilon", "1e-8"}, tiny), "unknown flag '--adam-epsilon' (did you mean --adam-eps?)"},
      // Past the bound by less than six digits show: as it reads back (it said "got 1").
      {with({"train", "--min-lr-ratio", "1.0000001"}, tiny),
       "--min-lr-ratio must be in [0, 1] (a fraction of --lr): got 1.0000001"},
      {with({"train", "--adam-beta1", "1.0000001"}, tiny), "--adam-beta1 must be in [0, 1): got 1.0000001"},
      {with({"train", "--set", "adam_beta2=1.0000001"}, tiny), "adam_beta2=1.0000001 must be in [0, 1)"},
      {with({"train", "--set", "lr_decay_style=Linear"}, tiny),
       "lr_decay_style=\"Linear\" must be linear, cosine or constant"},
      {with({"train", "--adam-beta2", "-0.1"}, tiny), "--adam-beta2 must be in [0, 1): got -0.1"},
      {with({"train", "--adam-eps", "0"}, tiny),
       "--adam-eps must be a number > 0 within a float's normal range, 1.18e-38 to 3.4e38: got 0"},
      {with({"train", "--set", "adam_eps=1e-45"}, tiny),
       "adam_eps=1e-45 must be a number > 0 within a float's normal range, 1.18e-38 to 3.4e38"},
      {with({"train", "--min-lr-ratio", "1.5"}, tiny), "--min-lr-ratio must be in [0, 1] (a fraction of --lr): got 1.5"},
      {with({"train", "--set", "min_lr_ratio=-1"}, tiny), "min_lr_ratio=-1 must be in [0, 1] (a fraction of lr)"},
      {with({"train", "--adam-beta2", "0.99", "--set", "adam_beta2=0.999"}, tiny),
       "--adam-beta2 and --set adam_beta2 both give adam_beta2: give it once"},
      // Decay past 1 / lr flips the weights: the run diverged, blaming --lr or --grad-clip.
      {with({"train", "--weight-decay", "1e10", "--lr", "0.001"}, tiny),
       "--weight-decay 1e+10 with --lr 0.001: each step multiplies the weights by 1 - lr x weight_decay = "
       "-9999999, which must be > 0"},
      {with({"train", "--dp", "2", "--set", "world_size=6"}, tiny), "world_size=6 does not equal pp*dp*tp = 2*2*1 = 4"},
      {with({"train", "--dp", "4", "--set", "global_batch_size=10"}, tiny_model),
       "global_batch_size=10 is not a multiple of dp=4"},
      // A flag and --set of its key: the flag won, silently.
      {with({"train", "--set", "steps=3", "--steps", "2"}, tiny), "--steps and --set steps both give steps: give it once"},
      {with({"train", "--dp", "0"}, tiny), "--dp must be >= 1: got 0"},
      {with({"train", "--dp", "2", "--bucket-mb", "0"}, tiny), "--bucket-mb must be in [1/1024, 4096] (1 KiB to 4 GiB): got 0"},
      {with({"train", "--dp", "2", "--bucket-mb", "0.000001"}, tiny), "--bucket-mb must be in [1/1024, 4096] (1 KiB to 4 GiB): got 1e-06"},
      {with({"train", "--no-pipeline", "--dp", "2"}, tiny), "--no-pipeline trains one replica"},
      {with({"train", "--set", "precision=bf16"}, tiny), "precision=bf16 is not supported yet"},
      {with({"train", "--stages", "4", "--layers", "2"}, {"--hidden", "32", "--heads", "2"}),
       "layers=2 cannot be split over pp*chunks = 4*1 = 4 virtual stages (the default partition gives each a block; "
       "partition uniform cuts all 5 layers, embeddings and head included)"},
      {with({"train", "--stages", "6", "--layers", "2", "--partition", "uniform"}, {"--hidden", "32", "--heads", "2"}),
       "the model's 5 layers cannot be split over stages*chunks=6 virtual stages"},
      {with({"train", "--threads-per-stage", "0"}, tiny), "--threads-per-stage must be in [1, 1024]: got 0"},
      // One rule (it said >= 1 for 0, then >= 2 for 1).
      {with({"train", "--vocab", "1"}, {}), "--vocab must be >= 2: got 1"},
      {with({"train", "--vocab", "0"}, {}), "--vocab must be >= 2: got 0"},
      // By the flag's name, not the config key's ("pp=0 must be >= 1", "override lr=nan: ...").
      {{"train", "--stages", "0"}, "--stages must be >= 1: got 0"},
      {{"train", "--lr", "nan"}, "--lr must be a number > 0 within a float's normal range, 1.18e-38 to 3.4e38: got nan"},
      {{"train", "--weight-decay", "1e999"}, "--weight-decay: 1e999 is out of a double's range (it reads as inf)"},
      // Digits within 64 bits that an int flag cannot hold (CLI11 said "Could not convert").
      {{"train", "--stages", "9999999999"}, "--stages=9999999999 is out of range for this flag (at most 2147483647)"},
      {with({"train", "--threads-per-stage", "100000"}, tiny), "--threads-per-stage must be in [1, 1024]: got 100000"},
      // 1e308 s overflowed the clock, and step 0 "did not finish within 1e+308 s" at once.
      {with({"train", "--step-timeout", "1e308"}, tiny), "--step-timeout must be > 0 and at most 1e+09 seconds: got 1e+308"},
      {with({"train", "--join-timeout", "1e308"}, tiny), "--join-timeout=1e+308 must be > 0 and at most 1e+09 seconds"},
      {with({"train", "--heartbeat-timeout", "-1"}, tiny),
       "--heartbeat-timeout=-1 must be 0 (never) or from 1 to 1e+09 seconds"},
      {with({"train", "--heartbeat-timeout", "nan"}, tiny), "--heartbeat-timeout=nan must be 0 (never) or from 1 to 1e+09 seconds"},
      {with({"train", "--heartbeat-timeout", "0.001"}, tiny),
       "--heartbeat-timeout=0.001 must be 0 (never) or from 1 to 1e+09 seconds"},
      // A config's 0 means "derive it"; given as a flag it is refused, not read as the default.
      {with({"train", "--microbatches", "0"}, tiny_model), "--microbatches must be >= 1: got 0"},
      {with({"train", "-B", "0"}, tiny_model), "--microbatch-size must be >= 1: got 0"},
      {with({"train", "--batch-size", "-4"}, tiny_model), "--batch-size must be >= 1: got -4"},
      {with({"train", "--seed", "-1"}, tiny), "--seed: must be 0 or more, got '-1'"},  // not 2^64 - 1
      // Refused at once, not after minutes of building a plan or a data set that size.
      {with({"train", "--microbatches", "100000000", "-B", "1"}, tiny_model),
       "pp*chunks*num_microbatches = 2*1*100000000 = 200000000 forward passes in one step, more than a plan may hold "
       "(1048576)"},
      {with({"train", "--no-pipeline", "--microbatches", "2000000", "-B", "1"}, tiny_model),
       "pp*chunks*num_microbatches = 1*1*2000000"},
      {with({"train", "--no-pipeline", "--trace", "x.json"}, tiny), "--trace needs the pipeline"},
      {with({"train", "--metrics", "/nonexistent/dir/m.jsonl"}, tiny),
       "--metrics '/nonexistent/dir/m.jsonl': the folder '/nonexistent/dir' does not exist"},
      {with({"train", "--data", "imagenet"}, tiny), "--data"},
      // Values read as written (CLI11 took '' as the default, and 2^64 as 2^64 - 1).
      {with({"train", "--resume", ""}, tiny), "--resume: must not be empty (leave the flag out for its default)"},
      {with({"train", "--steps", ""}, tiny), "--steps: must not be empty"},
      {with({"train", "--lr", "0x1"}, tiny), "--lr: must be a decimal number, got '0x1'"},
      {with({"train", "--seed", "18446744073709551616"}, tiny),
       "--seed: 18446744073709551616 is out of range (0..18446744073709551615)"},
      // A model past any machine's memory is refused before anything is allocated.
      {{"train", "--layers", "1000000000", "--hidden", "32", "--heads", "2", "--stages", "2"},
       "the GPT of --layers 1000000000 --hidden 32 --vocab 256 --seq-len 64 (12704.00 billion parameters) on 2 stages, "
       "2 ranks in this process, microbatch size 4 needs at least 494848.0 GB (each rank's share of the values and "
       "gradients at 8 bytes a parameter"},
      // A microbatch size typo: what one microbatch keeps for its blocks' backward (it passed
      // a one-block bound and grew toward the OOM killer).
      {{"train", "--layers", "2", "--hidden", "64", "--microbatch-size", "100000000", "--steps", "1"},
       "microbatch size 100000000 needs at least 39321.6 GB (each rank's share of the values and gradients at 8 bytes a "
       "parameter, and what one microbatch keeps for the backward of its blocks"},
      // Files written at the end are checked before the job starts (below: it printed nothing).
      {with({"train", "--trace", "/nonexistent/dir/t.json"}, tiny),
       "--trace '/nonexistent/dir/t.json': the folder '/nonexistent/dir' does not exist"},
      {with({"train", "--save-final", "/nonexistent/dir/w.safetensors"}, tiny),
       "--save-final '/nonexistent/dir/w.safetensors': the folder '/nonexistent/dir' does not exist"},
      {with({"train", "--save-final", folder}, tiny), "--save-final '" + folder + "' is a directory: give a file name"},
      {with({"train", "--save-dir", blocked + "/ckpt"}, tiny),
       "--save-dir '" + blocked + "/ckpt': cannot be made: '" + blocked + "' is not a folder"},
      {with({"train", "--save-dir", blocked}, tiny), "--save-dir '" + blocked + "' is not a folder"},
      // A name past 255 bytes: exit 1 when the folder was made (launch restarted the run for it).
      {with({"train", "--save-dir", folder + "/" + std::string(300, 'a')}, tiny),
       "--save-dir '" + folder + "/" + std::string(300, 'a') + "': its part 'aaaaaaaaaaaaaaaaaaaaaaaa...' is 300 bytes, "
       "more than the 255 a name may have"},
      // A path whose checkpoints' names would pass PATH_MAX: it failed at the first checkpoint.
      {with({"train", "--save-dir", deep_folder}, tiny),
       "--save-dir '" + deep_folder + "' is " + std::to_string(deep_folder.size()) +
           " bytes as an absolute path: with its checkpoints' names below it (up to 128 more) it passes the system's "
           "limit of 4096 on a path"},
  };
  for (auto& c : cases) {
    auto r = cli(c.args);
    CATCH_CAPTURE(c.message, r.err);
    CATCH_CHECK(r.code == 2);
    CATCH_CHECK_THAT(r.err, Contains(c.message));
    CATCH_CHECK(std::count(r.err.begin(), r.err.end(), '\n') == 1);
    CATCH_CHECK(r.err.rfind("actorpipe train: error: ", 0) == 0);
    if (c.message.rfind("--trace", 0) == 0 || c.message.rfind("--save-", 0) == 0 || c.message.rfind("--metrics", 0) == 0 ||
        c.message.find("deadlock") != std::string::npos)
      CATCH_CHECK(r.out.find("actorpipe train: ") == std::string::npos);  // refused before the job started
  }
  CATCH_CHECK(std::filesystem::is_regular_file(blocked));
  std::remove(blocked.c_str());
  for (const auto& link : {loop_a, loop_b, nowhere, unread}) std::remove(link.c_str());
  // A run refused when the model is built leaves an earlier --metrics file as it was.
  // A run that fails once it has started exits 1, not 2: launch --max-restarts restarts that.
  const auto failed = cli(with({"train", "--steps", "2", "--step-timeout", "0.0001"}, tiny));
  CATCH_CHECK(failed.code == 1);
  // (Step 1 or 2: the deadline is checked by a timer, and a fast step 1 can end before it looks.)
  CATCH_CHECK_THAT(failed.err, Contains(" of 2 did not finish within 0.0001 s (--step-timeout)"));
  // --no-pipeline too (it waited for ever on a layer that never returns): the built binary
  // runs it, as its stuck thread is left to the process's exit.
  std::string tiny_flags;
  for (const auto& flag : tiny) tiny_flags += " " + flag;
  const auto reference = binary("train --no-pipeline --steps 2 --step-timeout 0.0001" + tiny_flags);
  CATCH_CHECK(reference.code == 1);
  CATCH_CHECK_THAT(reference.err, Contains("actorpipe train: error: step 1 of 2 did not finish within 0.0001 s "
                                           "(--step-timeout): the unpipelined run's one thread is still in the model's"));
  CATCH_CHECK(binary("train --no-pipeline --steps 2 --step-timeout 60" + tiny_flags).code == 0);
  // A reader that goes away (`| head -1`) ended the run by SIGPIPE, before --save-final was
  // written; the run goes on, writes its files and exits 1 naming the lost report.
  const std::string kept_final = temp_path(".piped.st"), piped_err = temp_path(".piped.err");
  const std::string piped = "bash -c '" + std::string(ACTORPIPE_BIN) + " train --steps 3 --save-final " + kept_final +
                            tiny_flags + " 2>" + piped_err + " | head -c 1 >/dev/null; exit ${PIPESTATUS[0]}'";
  const int piped_status = std::system(piped.c_str());
  CATCH_CHECK(WIFEXITED(piped_status));
  CATCH_CHECK(WEXITSTATUS(piped_status) == 1);
  CATCH_CHECK(std::filesystem::file_size(kept_final) > 0);
  CATCH_CHECK_THAT(read_text(piped_err), Contains("could not write the report to standard output (Broken pipe)"));
  const std::string kept = temp_path(".kept.jsonl");
  std::ofstream(kept) << "{\"step\":0}\n";
  const auto refused = cli(with({"train", "--no-pipeline", "--save-dir", temp_path(".ckpt"), "--metrics", kept}, tiny));
  CATCH_CHECK(refused.code == 2);
  CATCH_CHECK_THAT(refused.err, Contains("--no-pipeline trains the reference without checkpoints"));
  CATCH_CHECK(read_text(kept) == "{\"step\":0}\n");
  std::remove(kept.c_str());
  std::remove(deadlock.c_str());
  std::remove(short_bin.c_str());
  std::remove(big_token.c_str());
  std::remove(text.c_str());
}

// The binary picks its BLAS kernels at start-up (core/blas_kernels.hpp), so it is run as a
// process here, with the BLAS variables of this test process removed or replaced.
CATCH_TEST_CASE("train runs on the best BLAS kernels for the CPU and names them, a user's choice is kept",
                "[apps][train][blas]") {
  auto run = [](const std::vector<std::string>& env_args) {
    std::vector<std::string> args = env_args;
    args.insert(args.end(), {ACTORPIPE_BIN, "train", "--steps", "1"});
    args.insert(args.end(), tiny.begin(), tiny.end());
    const std::string log = temp_path(".log");
    const int code = wait_process(start_process("/usr/bin/env", args, {}, log), 120);
    const std::string text = read_text(log);
    CATCH_INFO(text);
    CATCH_REQUIRE(code == 0);
    return text;
  };
  const std::string chosen = run({"-u", "OPENBLAS_CORETYPE", "-u", blas_marker_variable});
  CATCH_CHECK_THAT(chosen, Contains("compute: LibTorch "));
  CATCH_CHECK_THAT(chosen, Contains("; own loops: " + actorpipe::describe_own_kernels() + "\n"));
  // Heads of 8: the attention runs on LibTorch's ops, and the line says so.
  if (actorpipe::causal_attention_kernel_isa() != nullptr) {
    auto eights = cli({"train", "--steps", "1", "--layers", "2", "--hidden", "32", "--heads", "4", "--seq-len", "16",
                       "--vocab", "64", "--microbatches", "2", "--microbatch-size", "2"});
    CATCH_REQUIRE(eights.code == 0);
    CATCH_CHECK_THAT(eights.out, Contains("; own loops: GELU and AdamW " + actorpipe::own_loops_isa() +
                                          ", attention LibTorch's ops (its loops take heads of a multiple of 16, this "
                                          "model's are 8)\n"));
  }
  CATCH_CHECK_THAT(chosen, Contains("BLAS: "));
  if (chosen.find("BLAS: not OpenBLAS") != std::string::npos) return;
  const auto at = chosen.find("; kernels ");
  CATCH_REQUIRE(at != std::string::npos);
  const std::string core = chosen.substr(at + 10, chosen.find(' ', at + 10) - (at + 10));
  CATCH_INFO("kernels " << core);
  CATCH_CHECK(openblas_core_level(core) >= cpu_simd_level());
  if (cpu_simd_level() > simd_level::sse && chosen.find("chosen by actorpipe") == std::string::npos)
    CATCH_CHECK_THAT(chosen, Contains("(detected by OpenBLAS)"));

  // Where OpenBLAS falls back to generic kernels (pretended here: this machine's OpenBLAS may
  // know its CPU), the binary switches it to the best core and says so: in place, or, as an
  // OpenBLAS that cannot switch needs (forced here), by restarting itself once.
  if (cpu_simd_level() > simd_level::sse) {
    const std::string best = "kernels " + best_openblas_core(cpu_simd_level()) + " (chosen by actorpipe for this CPU's " +
                             simd_level_name(cpu_simd_level()) + "; OpenBLAS alone picked Prescott)";
    const std::string switched =
        run({"-u", "OPENBLAS_CORETYPE", "-u", blas_marker_variable, std::string(blas_pretend_variable) + "=Prescott"});
    CATCH_CHECK_THAT(switched, Contains(best));
    CATCH_CHECK(switched.find("restarted") == std::string::npos);  // in place: one start
    const std::string restarted = run({"-u", "OPENBLAS_CORETYPE", "-u", blas_marker_variable,
                                       std::string(blas_pretend_variable) + "=Prescott", std::string(blas_restart_variable) + "=1"});
    CATCH_CHECK_THAT(restarted, Contains(best.substr(0, best.size() - 1) + "; the program restarted once to load them)"));
    // Started through the dynamic loader, /proc/self/exe is the loader: the restart ran it on
    // "train" ("cannot open shared object file", exit 127).
    const std::string loader = "/lib64/ld-linux-x86-64.so.2";
    CATCH_REQUIRE(std::filesystem::exists(loader));
    const std::string loaded = run({"-u", "OPENBLAS_CORETYPE", "-u", blas_marker_variable,
                                    std::string(blas_pretend_variable) + "=Prescott",
                                    std::string(blas_restart_variable) + "=1", loader});
    CATCH_CHECK_THAT(loaded, Contains(best.substr(0, best.size() - 1) + "; the program restarted once to load them)"));
  }

  // Even a slow choice of the user's stays.
  const std::string user = run({"-u", blas_marker_variable, std::string(blas_pretend_variable) + "=Prescott",
                                "OPENBLAS_CORETYPE=Prescott"});
  CATCH_CHECK_THAT(user, Contains("kernels Prescott (OPENBLAS_CORETYPE=Prescott set by the user)"));
  // One OpenBLAS does not know is ignored (it picks a core itself): not the user's choice, said.
  const std::string typo = run({"-u", blas_marker_variable, "OPENBLAS_CORETYPE=Skylakx"});
  CATCH_CHECK_THAT(typo, Contains("(OPENBLAS_CORETYPE=Skylakx set by the user, a core this OpenBLAS does not have (or cannot run "
                                  "here): it picked "));
}

// A newline in an output's name split the report's line (and under launch the second half was
// a line of its own): names are shown escaped, the files written where asked.
CATCH_TEST_CASE("train shows output paths with a newline escaped, and writes them where asked", "[apps][train]") {
  const std::string dir = temp_path(".nl");
  std::filesystem::create_directories(dir);
  const std::string final_path = dir + "/sp ace\nnl.st", metrics = dir + "/m\n.jsonl";
  auto r = cli(with({"train", "--steps", "1", "--save-final", final_path, "--metrics", metrics}, tiny));
  CATCH_REQUIRE(r.code == 0);
  CATCH_CHECK_THAT(r.out, Contains(" tensors to " + dir + "/sp ace\\x0anl.st\n"));
  CATCH_CHECK_THAT(r.out, Contains("wrote per-step metrics to " + dir + "/m\\x0a.jsonl\n"));
  CATCH_CHECK(std::filesystem::file_size(final_path) > 0);
  CATCH_CHECK(std::filesystem::file_size(metrics) > 0);
  std::filesystem::remove_all(dir);
}

CATCH_TEST_CASE("train takes the schedule's own chunk count when none is given", "[apps][train]") {
  auto r = cli(with({"train", "--schedule", "zbv", "--steps", "1"}, tiny));
  CATCH_REQUIRE(r.code == 0);
  CATCH_CHECK_THAT(r.out, Contains("actorpipe train: zbv, 2 stages x 2 chunks"));
  r = cli(with({"train", "--schedule", "interleaved", "--steps", "1", "--set", "chunks=1"}, tiny));
  CATCH_CHECK(r.code == 2);
  CATCH_CHECK_THAT(r.err, Contains("interleaved needs chunks >= 2"));
}

CATCH_TEST_CASE("train --log-level and --log-file: a bad level is one error, the file gets the debug lines",
                "[apps][train][log]") {
  auto bad = cli(with({"train", "--log-level", "verbose"}, tiny));
  CATCH_CHECK(bad.code == 2);
  CATCH_CHECK(bad.err == "actorpipe train: error: --log-level=verbose must be one of trace, debug, info, warn, error, off\n");
  CATCH_CHECK_THAT(cli({"train", "--help"}).out, Contains("--log-file"));

  const std::string file = temp_path(".train.log");
  auto r = cli(with({"train", "--steps", "2", "--log-level", "debug", "--log-file", file, "--partition", "profile"}, tiny));
  CATCH_REQUIRE(r.code == 0);
  // The progress and the summary are where they always are.
  CATCH_CHECK_THAT(r.err, Contains("step 2/2 [########################] loss "));
  CATCH_CHECK_THAT(r.out, Contains("final loss"));
  // The split it measured, as a job of several processes takes it (it said to copy a line it
  // did not print).
  CATCH_CHECK(std::regex_search(r.out, std::regex("partition: profile[^\n]*\\(as --partition counts:[0-9]+,[0-9]+\\)\n")));
  std::ifstream f(file);
  std::stringstream s;
  s << f.rdbuf();
  const std::string logged = s.str();
  CATCH_CAPTURE(logged);
  CATCH_CHECK_THAT(logged, Contains(" debug: rank 0: step 1 done, "));
  CATCH_CHECK_THAT(logged, Contains(" debug: rank 1: step 2 done, "));
  CATCH_CHECK_THAT(logged, Contains(" debug: step 2/2 done in "));
  // --partition profile shows what it measured, layer by layer.
  CATCH_CHECK_THAT(logged, Contains(" debug: partition profile: forward + backward per layer, one microbatch (ms): embed "));
  CATCH_CHECK_THAT(logged, Contains(", blocks.3 ") && Contains(", ln_f ") && Contains(", lm_head "));
  CATCH_CHECK(logged.find("[p") == std::string::npos);  // one process: no prefix
  std::remove(file.c_str());
}

CATCH_TEST_CASE("train --late-input-grad runs B as one block, to the same losses", "[apps][train]") {
  const std::string early_m = temp_path(".jsonl"), late_m = temp_path(".jsonl");
  auto early = cli(with({"train", "--steps", "2", "--metrics", early_m}, tiny));
  auto late = cli(with({"train", "--steps", "2", "--late-input-grad", "--metrics", late_m}, tiny));
  CATCH_REQUIRE(early.code == 0);
  CATCH_REQUIRE(late.code == 0);
  std::ifstream a(early_m), b(late_m);
  std::string la, lb;
  int lines = 0;
  while (std::getline(a, la) && std::getline(b, lb)) {
    CATCH_CHECK(nlohmann::json::parse(la)["loss"] == nlohmann::json::parse(lb)["loss"]);
    CATCH_CHECK(nlohmann::json::parse(la)["grad_norm"] == nlohmann::json::parse(lb)["grad_norm"]);
    ++lines;
  }
  CATCH_CHECK(lines == 2);
  std::remove(early_m.c_str());
  std::remove(late_m.c_str());
}

// A run resumed by hand with the same --metrics file adds to it, as a restart does: the lines
// of the run it continues were erased.
CATCH_TEST_CASE("train --resume appends to its --metrics file, and a new run starts it afresh", "[apps][checkpoint]") {
  const std::string dir = temp_path(".metrics-ckpt"), metrics = temp_path(".metrics.jsonl");
  const auto lines = [&] {
    std::ifstream f(metrics);
    int n = 0;
    for (std::string l; std::getline(f, l);) n += !l.empty();
    return n;
  };
  CATCH_REQUIRE(cli(with({"train", "--steps", "2", "--dp", "2", "--save-dir", dir, "--metrics", metrics}, tiny)).code == 0);
  CATCH_CHECK(lines() == 2);
  // A line cut by a full disk at the end (a stopped run's): the resumed run's first line was
  // glued to it; the cut line goes, every line left is JSON.
  std::ofstream(metrics, std::ios::app) << "{\"step\":2,\"loss\":4.1";
  const auto resumed =
      cli(with({"train", "--steps", "5", "--dp", "2", "--save-dir", dir, "--resume", dir, "--metrics", metrics}, tiny));
  CATCH_REQUIRE(resumed.code == 0);
  CATCH_CHECK(lines() == 5);
  {
    std::ifstream f(metrics);
    for (std::string l; std::getline(f, l);) CATCH_CHECK_NOTHROW(nlohmann::json::parse(l));
  }
  // The summary's lines number the steps as the run does (the sync line said "steps 2..3").
  CATCH_CHECK_THAT(resumed.out, Contains("busy per step, steps 4..5 "));
  CATCH_CHECK_THAT(resumed.out, Contains("after the pipeline's last action, steps 4..5\n"));
  // Going on from an older checkpoint (a restart after a crash past its last save) redoes the
  // steps after it: their earlier lines go, so each step is in the file once and in order.
  const auto again = cli(with({"train", "--steps", "5", "--dp", "2", "--resume", dir + "/step-00000002", "--metrics",
                               metrics}, tiny));
  CATCH_REQUIRE(again.code == 0);
  {
    std::ifstream f(metrics);
    std::vector<int> steps;
    for (std::string l; std::getline(f, l);) steps.push_back(nlohmann::json::parse(l)["step"].get<int>());
    CATCH_CHECK(steps == std::vector<int>{0, 1, 2, 3, 4});
  }
  CATCH_REQUIRE(cli(with({"train", "--steps", "1", "--metrics", metrics}, tiny)).code == 0);
  CATCH_CHECK(lines() == 1);
  std::filesystem::remove_all(dir);
  std::remove(metrics.c_str());
}

// Two outputs under one name kept one of them (the summary said both were written), and an
// output under an input's name replaced it: refused before training.
CATCH_TEST_CASE("train refuses an output that is an input or another output", "[apps][errors]") {
  const std::string same = temp_path(".same");
  auto twice = cli(with({"train", "--steps", "1", "--metrics", same, "--save-final", same}, tiny));
  CATCH_CHECK(twice.code == 2);
  CATCH_CHECK_THAT(twice.err, Contains("--metrics '" + same + "' is also --save-final ('" + same +
                                       "'): each output needs a file of its own"));
  // Through a link to a file not written yet: both went to it, the metrics lost under the trace.
  const std::string linked_trace = temp_path(".linked-trace.json"), link = temp_path(".linked-metrics.jsonl");
  std::filesystem::create_symlink(std::filesystem::path(linked_trace).filename(), link);
  auto linked = cli(with({"train", "--steps", "1", "--metrics", link, "--trace", linked_trace}, tiny));
  CATCH_CHECK(linked.code == 2);
  CATCH_CHECK_THAT(linked.err, Contains("--metrics '" + link + "' is also --trace ('" + linked_trace + "')"));
  CATCH_CHECK(!std::filesystem::exists(linked_trace));
  std::filesystem::remove(link);
  const std::string plan = temp_path(".plan.txt");
  std::ofstream(plan) << "0: F0.0 F0.1 F0.2 F0.3 B0.0 B0.1 B0.2 B0.3\n1: F1.0 B1.0 F1.1 B1.1 F1.2 B1.2 F1.3 B1.3\n";
  auto over_plan = cli(with({"train", "--steps", "1", "--schedule-file", plan, "--trace", plan}, tiny));
  CATCH_CHECK(over_plan.code == 2);
  CATCH_CHECK_THAT(over_plan.err, Contains("--trace '" + plan + "' is the --schedule-file this run reads"));
  CATCH_CHECK(std::filesystem::file_size(plan) > 0);
  // The log too: appended to a plan or data file, it spoilt it; over --metrics, both.
  const auto plan_bytes = std::filesystem::file_size(plan);
  auto log_over_plan = cli(with({"train", "--steps", "1", "--schedule-file", plan, "--log-file", plan}, tiny));
  CATCH_CHECK(log_over_plan.code == 2);
  CATCH_CHECK_THAT(log_over_plan.err, Contains("--log-file '" + plan + "' is the --schedule-file this run reads"));
  CATCH_CHECK(std::filesystem::file_size(plan) == plan_bytes);
  auto log_over_metrics = cli(with({"train", "--steps", "1", "--metrics", same, "--log-file", same}, tiny));
  CATCH_CHECK(log_over_metrics.code == 2);
  CATCH_CHECK_THAT(log_over_metrics.err, Contains("--metrics '" + same + "' is also --log-file ('" + same + "')"));
  // Beside the checkpoints: at `latest` a checkpoint replaced the log (exit 0); at --save-dir's
  // own path the log made a file where the folder was to be ("is not a folder").
  const std::string ckpts = temp_path(".log-ck");
  auto log_at_latest = cli(with({"train", "--steps", "1", "--save-dir", ckpts, "--log-file", ckpts + "/latest"}, tiny));
  CATCH_CHECK(log_at_latest.code == 2);
  CATCH_CHECK_THAT(log_at_latest.err, Contains("--log-file '" + ckpts + "/latest' is a name the checkpoints in --save-dir '" +
                                               ckpts + "' use"));
  auto log_is_dir = cli(with({"train", "--steps", "1", "--save-dir", ckpts, "--log-file", ckpts}, tiny));
  CATCH_CHECK(log_is_dir.code == 2);
  CATCH_CHECK_THAT(log_is_dir.err, Contains("--log-file '" + ckpts + "' is also --save-dir ('" + ckpts + "')"));
  CATCH_CHECK(!std::filesystem::exists(ckpts));
  std::ifstream kept(plan);
  std::string first;
  std::getline(kept, first);
  CATCH_CHECK(first == "0: F0.0 F0.1 F0.2 F0.3 B0.0 B0.1 B0.2 B0.3");
  // The trace of a plan file's run names the file, as the summary does (it said 1f1b).
  const std::string trace = temp_path(".plan-trace.json");
  auto traced = cli(with({"train", "--steps", "1", "--schedule-file", plan, "--trace", trace}, tiny));
  CATCH_REQUIRE(traced.code == 0);
  std::ifstream t(trace);
  const std::string text((std::istreambuf_iterator<char>(t)), std::istreambuf_iterator<char>());
  CATCH_CHECK_THAT(text, Contains("actorpipe train " + plan + ", the last step measured"));
  CATCH_CHECK_THAT(text, !Contains("1f1b"));
}

CATCH_TEST_CASE("on a terminal the progress line fits its width, and a dumb terminal gets no escapes", "[apps][train]") {
  if (std::system("command -v script >/dev/null 2>&1") != 0) {
    CATCH_WARN("script (util-linux) not found: skipped");
    return;
  }
  // `script` gives the run a terminal of 60 columns: "\r" goes back over one row only, so a
  // line that wrapped left a row behind at every step.
  const auto on_terminal = [](const std::string& term) {
    const std::string out = temp_path(".tty");
    const std::string run = std::string(ACTORPIPE_BIN) +
                            " train --layers 2 --hidden 32 --heads 2 --seq-len 16 --vocab 64 -M 2 -B 2 --steps 3";
    const std::string command = "script -qc \"stty cols 60; TERM=" + term + " " + run + "\" /dev/null > " + out + " 2>&1";
    CATCH_REQUIRE(std::system(command.c_str()) == 0);
    return read_text(out);
  };
  const std::string xterm = on_terminal("xterm");
  CATCH_CHECK(xterm.find("\r\033[Kstep 1/3") != std::string::npos);
  const std::string dumb = on_terminal("dumb");
  CATCH_CHECK(dumb.find("\033") == std::string::npos);
  CATCH_CHECK(dumb.find("\rstep 1/3") != std::string::npos);
  for (const std::string& text : {xterm, dumb}) {
    std::size_t at = 0;
    int lines = 0;
    while ((at = text.find("step ", at)) != std::string::npos) {
      if (text.compare(at, 7, "step 1/") == 0 || text.compare(at, 7, "step 2/") == 0 || text.compare(at, 7, "step 3/") == 0) {
        const std::size_t end = text.find_first_of("\r\n", at);
        CATCH_CHECK(end - at <= 59);
        ++lines;
      }
      ++at;
    }
    CATCH_CHECK(lines == 3);
  }
}

CATCH_TEST_CASE("a --log-file that cannot be written is exit 1 naming it, said once", "[apps][train]") {
  // spdlog said "[*** LOG ERROR #0001 ***] ..." again and again, and the run exited 0.
  const std::string err = temp_path(".err");
  const std::string command = std::string(ACTORPIPE_BIN) +
                              " train --layers 2 --hidden 32 --heads 2 --seq-len 16 --vocab 64 -M 2 -B 2 --steps 2 "
                              "--log-level debug --log-file /dev/full >/dev/null 2>" + err;
  const int status = std::system(command.c_str());
  CATCH_CHECK(WIFEXITED(status));
  CATCH_CHECK(WEXITSTATUS(status) == 1);
  const std::string text = read_text(err);
  CATCH_CHECK_THAT(text, Contains("actorpipe: error: cannot write --log-file '/dev/full' ("));
  CATCH_CHECK_THAT(text, Contains("actorpipe train: error: cannot write --log-file '/dev/full'"));
  CATCH_CHECK(text.find("LOG ERROR") == std::string::npos);
  std::remove(err.c_str());
}

// Standard output closed (cron's >&-): the log file took its descriptor and was refused as
// "this process's standard output"; the run trains, logs, and says where the report went.
// On a full disk the report's failure says why (it gave no reason but for a broken pipe).
CATCH_TEST_CASE("train with standard output closed or full trains, logs and says the report is lost, and why",
                "[apps][train][errors]") {
  const std::string log = temp_path(".closed.log"), err = temp_path(".closed.err");
  std::vector<std::string> args = {"-c", "exec \"$0\" \"$@\" >&-", ACTORPIPE_BIN, "train", "--steps", "1", "--log-file", log};
  args.insert(args.end(), tiny.begin(), tiny.end());
  CATCH_CHECK(wait_process(start_process("/bin/sh", args, {}, err), 120) == 1);
  CATCH_CHECK_THAT(read_text(err), Contains("could not write the report to standard output: it is closed"));
  CATCH_CHECK_THAT(read_text(log), Contains("could not write the report to standard output: it is closed"));
  CATCH_CHECK_THAT(read_text(err), !Contains("is this process's standard output"));
  args[1] = "exec \"$0\" \"$@\" >/dev/full";
  CATCH_CHECK(wait_process(start_process("/bin/sh", args, {}, err), 120) == 1);
  CATCH_CHECK_THAT(read_text(err), Contains("could not write the report to standard output (No space left on device)"));
  std::remove(log.c_str());
  std::remove(err.c_str());
}

CATCH_TEST_CASE("an output that is the process's own standard output, a file, is refused", "[apps][train][errors]") {
  // Written apart at their own offsets, the metrics lines and the report overwrote each other.
  const std::string report = temp_path(".out"), err = temp_path(".err");
  for (const std::string flag : {"--metrics", "--log-file"}) {
    CATCH_INFO(flag);
    const std::string command = std::string(ACTORPIPE_BIN) +
                                " train --layers 2 --hidden 32 --heads 2 --seq-len 16 --vocab 64 -M 2 -B 2 --steps 1 " +
                                flag + " /dev/stdout >" + report + " 2>" + err;
    const int status = std::system(command.c_str());
    CATCH_CHECK(WEXITSTATUS(status) == 2);
    CATCH_CHECK_THAT(read_text(err), Contains("/dev/stdout") && Contains(" is this process's standard output, a file: "
                                                                          "written apart, each would overwrite the other"));
  }
  for (const auto& f : {report, err}) std::remove(f.c_str());
}

CATCH_TEST_CASE("a user's model refuses a --data-file it does not read and names the model flags it may ignore",
                "[apps][train][model_api]") {
  // The tests' MLP makes its own data and reads none of the GPT's shape flags: it trained on
  // its synthetic data with a --data-file given, and took --hidden 999 without a word.
  const std::string models = TEST_MODELS_BIN, log = temp_path(".flags.log"), text = temp_path(".flags.txt");
  std::ofstream(text) << "some text to train on, long enough for a window or two of it\n";
  const std::vector<std::string> base = {"train", "--model", "test-mlp-bn", "--stages", "2", "--steps", "1",
                                         "--microbatches", "2", "--microbatch-size", "4", "--step-timeout", "60"};
  auto with = [&](std::vector<std::string> extra) {
    std::vector<std::string> args = base;
    args.insert(args.end(), extra.begin(), extra.end());
    return args;
  };
  CATCH_CHECK(wait_process(start_process(models, with({"--data-file", text}), {}, log), 120) == 2);
  CATCH_CHECK_THAT(read_text(log), Contains("--data-file " + text + ": model 'test-mlp-bn' does not read a data file "
                                            "(model_definition::flags_followed); its data: "));
  // Nor evaluation data: the GPT's and bert's eval flags name what a model of one's own gives.
  CATCH_CHECK(wait_process(start_process(models, with({"--eval-file", text}), {}, log), 120) == 2);
  CATCH_CHECK_THAT(read_text(log), Contains("--eval-file " + text + ": model 'test-mlp-bn' does not read it "
                                            "(model_definition::flags_followed); a model of yours gives its eval set as "
                                            "model_definition::eval_data"));
  CATCH_CHECK(wait_process(start_process(models, with({"--eval-split", "0.1"}), {}, log), 120) == 2);
  CATCH_CHECK_THAT(read_text(log), Contains("--eval-split 0.1: model 'test-mlp-bn' does not read it "
                                            "(model_definition::flags_followed)"));
  CATCH_CHECK(wait_process(start_process(models, with({"--eval-microbatches", "2"}), {}, log), 120) == 2);
  CATCH_CHECK_THAT(read_text(log), Contains("--eval-microbatches=2 needs evaluation data (--eval-file: ") &&
                                       Contains("and model 'test-mlp-bn' has none"));
  CATCH_CHECK(wait_process(start_process(models, with({"--hidden", "999", "--set", "seq_len=7"}), {}, log), 120) == 0);
  CATCH_CHECK_THAT(read_text(log), Contains("--hidden, --seq-len are given, and model 'test-mlp-bn' does not say it "
                                            "follows them (model_definition::flags_followed): they may do nothing"));
  // The GPT follows them all: no such note.
  const int gpt = wait_process(start_process(ACTORPIPE_BIN, {"train", "--layers", "2", "--hidden", "32", "--heads", "2",
                                                             "--seq-len", "16", "--vocab", "256", "-M", "2", "-B", "2",
                                                             "--steps", "1", "--data-file", text},
                                             {}, log),
                               120);
  CATCH_INFO(read_text(log));
  CATCH_CHECK(gpt == 0);
  CATCH_CHECK(read_text(log).find("may do nothing") == std::string::npos);
  for (const auto& f : {log, text}) std::remove(f.c_str());
}

CATCH_TEST_CASE("train evaluates the gpt on a held-out file: progress lines, the summary, metrics", "[apps][train][eval]") {
  const std::string train = temp_path(".gpt_train.txt"), val = temp_path(".gpt_val.txt"), metrics = temp_path(".eval.jsonl");
  {
    std::ofstream t(train), v(val);
    for (int i = 0; i < 200; ++i) t << "the quick brown fox jumps over the lazy dog " << i % 7 << "\n";
    v << std::string(4 * 16 + 1, 'a') << "bcd";  // 4 windows of 16 bytes (+3 that make no window)
  }
  auto r = cli({"train", "--layers", "2", "--hidden", "32", "--heads", "2", "--seq-len", "16", "--microbatches", "2",
                "--microbatch-size", "3", "--steps", "2", "--data-file", train, "--eval-file", val, "--eval-every", "1",
                "--metrics", metrics});
  CATCH_INFO(r.err);
  CATCH_REQUIRE(r.code == 0);
  CATCH_CHECK_THAT(r.err, Contains("eval after step 1: loss "));
  CATCH_CHECK_THAT(r.out, Contains("; eval: text file read as bytes '" + val + "' (68 tokens, vocab 256), 4 consecutive "
                                   "windows of 16 tokens (its last 3 tokens make no window)\n"));
  CATCH_CHECK_THAT(r.out, Contains("final eval after step 2: loss ") && Contains("  perplexity "));
  int passes = 0;
  std::istringstream in(read_text(metrics));
  for (std::string line; std::getline(in, line);) {
    const auto j = nlohmann::json::parse(line);
    if (!j.contains("eval_after_step")) continue;
    ++passes;
    CATCH_CHECK(std::abs(j["perplexity"].get<double>() - std::exp(j["eval_loss"].get<double>())) <=
                1e-9 * j["perplexity"].get<double>());
  }
  CATCH_CHECK(passes == 2);
  // Two microbatches of 3 hold the 4 windows; a third would be all padding.
  auto over = cli({"train", "--layers", "2", "--hidden", "32", "--heads", "2", "--seq-len", "16", "--microbatches", "2",
                   "--microbatch-size", "3", "--steps", "1", "--data-file", train, "--eval-file", val,
                   "--eval-microbatches", "3"});
  CATCH_CHECK(over.code == 2);
  CATCH_CHECK_THAT(over.err, Contains("--eval-microbatches=3 is more than --eval-file '" + val + "' holds: 4 windows of "
                                      "--seq-len 16 tokens make 2 microbatches of 3"));
  // Token ids scored against bytes: refused, whichever way round.
  const std::string ids = temp_path(".ids.bin");
  std::ofstream(ids) << std::string(200, 'x');
  auto mixed = cli({"train", "--layers", "2", "--hidden", "32", "--heads", "2", "--seq-len", "16", "--steps", "1",
                    "--data-file", train, "--eval-file", ids});
  CATCH_CHECK(mixed.code == 2);
  CATCH_CHECK_THAT(mixed.err, Contains("--eval-file '" + ids + "' is read as token ids and --data-file '" + train +
                                       "' as UTF-8 bytes: evaluate on a file of the training file's kind"));
  // One file, its tail held out (the training file's 9200 bytes: 460 held out, 28 windows).
  auto split = cli({"train", "--layers", "2", "--hidden", "32", "--heads", "2", "--seq-len", "16", "--microbatches", "2",
                    "--microbatch-size", "3", "--steps", "2", "--data-file", train, "--eval-split", "0.05"});
  CATCH_INFO(split.err);
  CATCH_REQUIRE(split.code == 0);
  CATCH_CHECK_THAT(split.out, Contains("(9200 tokens, vocab 256; training reads its first 8740, its last 460 are held out); "
                                       "eval: the last 460 tokens of --data-file (--eval-split 0.05), 28 consecutive "
                                       "windows of 16 tokens (its last 11 tokens make no window)\n"));
  CATCH_CHECK_THAT(split.out, Contains("final eval after step 2: loss "));
  auto both = cli({"train", "--layers", "2", "--hidden", "32", "--heads", "2", "--seq-len", "16", "--steps", "1",
                   "--data-file", train, "--eval-file", val, "--eval-split", "0.05"});
  CATCH_CHECK(both.code == 2);
  CATCH_CHECK_THAT(both.err, Contains("--eval-split and --eval-file both give the eval set: give one"));
  auto whole = cli({"train", "--steps", "1", "--data-file", train, "--eval-split", "1"});
  CATCH_CHECK(whole.code == 2);
  CATCH_CHECK_THAT(whole.err, Contains("--eval-split=1 must be >= 0 and below 1"));
  auto bert = cli({"train", "--model", "bert", "--steps", "1", "--data-file", train, "--eval-split", "0.1"});
  CATCH_CHECK(bert.code == 2);
  CATCH_CHECK_THAT(bert.err, Contains("--eval-split is for --model gpt, not --model bert (give bert its dev TSV: --eval-file)"));
  for (const auto& f : {train, val, metrics, ids}) std::remove(f.c_str());
}

CATCH_TEST_CASE("keep-last leaves a checkpoint that holds a folder not its own", "[apps][train][checkpoint]") {
  // A folder in a checkpoint (another run's save folder, made there before that was refused)
  // went with the checkpoint when --keep-last pruned it.
  const std::string dir = temp_path(".keep");
  auto first = cli(with({"train", "--steps", "2", "--save-dir", dir + "//", "--save-every", "1"}, tiny));
  CATCH_REQUIRE(first.code == 0);
  CATCH_CHECK_THAT(first.out, Contains("the newest " + dir + "/step-00000002 ("));  // not dir//step-...
  std::filesystem::create_directories(dir + "/step-00000001/mine");
  auto next = cli(with({"train", "--steps", "3", "--resume", dir, "--save-dir", dir, "--save-every", "1", "--keep-last",
                        "1"},
                       tiny));
  CATCH_REQUIRE(next.code == 0);
  CATCH_CHECK(std::filesystem::exists(dir + "/step-00000001/mine"));
  CATCH_CHECK(!std::filesystem::exists(dir + "/step-00000002"));
  CATCH_CHECK(std::filesystem::exists(dir + "/step-00000003/manifest.json"));
}

CATCH_TEST_CASE("a config file's job that its rules refuse is named with the file, and flags over it are said",
                "[apps][train][config]") {
  const std::string job = temp_path(".rules.json");
  std::ofstream(job) << R"({"pp": 2, "num_microbatches": 3, "microbatch_size": 4, "global_batch_size": 10, "tp": 1})";
  auto alone = cli({"train", "--config", job});
  CATCH_CHECK(alone.code == 2);
  CATCH_CHECK(alone.err == "actorpipe train: error: global_batch_size=10 is not a multiple of num_microbatches=3 (config "
                           "file '" + job + "')\n");
  auto reference = cli({"train", "--config", job, "--no-pipeline"});  // it sets the stages
  CATCH_CHECK(reference.code == 2);
  CATCH_CHECK_THAT(reference.err, Contains("(config file '" + job + "', with the flags and --set given over it)"));
  auto over = cli({"train", "--config", job, "--set", "global_batch_size=12", "--microbatches", "5"});
  CATCH_CHECK(over.code == 2);
  CATCH_CHECK_THAT(over.err, Contains("global_batch_size=12 is not a multiple of num_microbatches=5 (config file '" + job +
                                      "', with the flags and --set given over it)"));
  std::ofstream(job) << R"({"pp": 2, "num_microbatches": 4, "microbatch_size": 2, "tp": 2})";
  auto tp = cli({"train", "--config", job});
  CATCH_CHECK(tp.code == 2);
  CATCH_CHECK_THAT(tp.err, Contains("tp=2: this build has no tensor parallelism (tp = 1) (config file '" + job + "')"));
  // Without a config file, as before.
  auto flags = cli({"train", "--set", "tp=2"});
  CATCH_CHECK(flags.err == "actorpipe train: error: tp=2: this build has no tensor parallelism (tp = 1)\n");
  std::remove(job.c_str());
}

CATCH_TEST_CASE("a global batch size alone is cut per replica, and data-parallel flags without replicas are noted",
                "[apps][train][dp]") {
  const std::vector<std::string> model = {"--layers", "2", "--hidden", "32", "--heads", "2", "--seq-len", "16",
                                          "--vocab", "64", "--steps", "1"};
  // It was refused: "pp=2 needs num_microbatches or microbatch_size".
  auto global = cli(with({"train", "--dp", "2", "--set", "global_batch_size=16"}, model));
  CATCH_CHECK(global.code == 0);
  CATCH_CHECK_THAT(global.out, Contains("8 microbatches per replica x 1 sequence of 16 tokens"));
  auto one = cli(with({"train", "--no-pipeline", "--batch-size", "1"}, model));
  CATCH_CHECK(one.code == 0);
  CATCH_CHECK_THAT(one.out, Contains("; 1 microbatch x 1 sequence of 16 tokens"));
  auto reference = cli(with({"train", "--no-pipeline", "--zero", "1", "--bucket-mb", "8"}, model));
  CATCH_CHECK(reference.code == 0);
  CATCH_CHECK_THAT(reference.out, Contains("note: --zero, --bucket-mb are for data parallelism (--dp), and --no-pipeline "
                                           "trains one replica: they do not apply"));
  auto buckets = cli(with({"train", "--bucket-mb", "8"}, model));
  CATCH_CHECK(buckets.code == 0);
  CATCH_CHECK_THAT(buckets.out, Contains("note: --bucket-mb sizes the data-parallel gradient buckets, and --dp 1 has none "
                                         "to sync: it does not apply"));
}

// A file-size limit (ulimit -f) killed train with SIGXFSZ (exit 153, no word, every output
// lost): the write past it fails instead, named, and the run exits 1 as for a full disk.
CATCH_TEST_CASE("a file-size limit fails the write that passes it, named, instead of killing train", "[apps][errors]") {
  const std::string final_path = temp_path(".fsz.st"), err = temp_path(".fsz.err");
  std::string flags;
  for (const auto& f : tiny) flags += " " + f;
  const std::string cmd = "bash -c 'ulimit -f 4; exec " + std::string(ACTORPIPE_BIN) + " train --steps 1 --save-final " +
                          final_path + flags + " >/dev/null 2>" + err + "'";
  const int status = std::system(cmd.c_str());
  CATCH_INFO(read_text(err));
  CATCH_REQUIRE(WIFEXITED(status));
  CATCH_CHECK(WEXITSTATUS(status) == 1);
  CATCH_CHECK_THAT(read_text(err), Contains("File too large"));
  std::remove(final_path.c_str());
}

CATCH_TEST_CASE("a seed of -0 is seed 0 as a flag and in an override (both were refused where a config read it as 0)", "[apps][cli]") {
  const std::vector<std::string> small = {"--layers", "2", "--hidden", "16", "--heads", "2", "--seq-len", "8",
                                          "--steps", "2", "--microbatches", "2", "--microbatch-size", "2"};
  const auto final_loss = [](const std::string& out) { return out.substr(out.rfind("final loss")); };
  const auto zero = cli(with({"train", "--seed", "0"}, small));
  CATCH_REQUIRE(zero.code == 0);
  const auto seeded = cli(with({"train"}, small));  // seed 1234: another loss, so the check can fail
  CATCH_CHECK(final_loss(seeded.out) != final_loss(zero.out));
  for (const std::vector<std::string>& minus : {std::vector<std::string>{"--seed", "-0"}, {"--set", "seed=-000"}}) {
    const auto r = cli(with(with({"train"}, minus), small));
    CATCH_INFO(r.err);
    CATCH_REQUIRE(r.code == 0);
    CATCH_CHECK(final_loss(r.out) == final_loss(zero.out));
  }
}

CATCH_TEST_CASE("the reference's header names its threads (it said one thread where --threads-per-stage 2 ran)",
                "[apps][cli]") {
  const std::vector<std::string> small = {"--layers", "2", "--hidden", "16", "--heads", "2", "--seq-len", "8",
                                          "--steps", "1", "--microbatches", "2", "--microbatch-size", "2", "--no-pipeline"};
  auto two = cli(with({"train", "--threads-per-stage", "2"}, small));
  CATCH_CHECK(two.code == 0);
  CATCH_CHECK_THAT(two.out, Contains("reference (--no-pipeline: 2 threads, unpartitioned)"));
  auto one = cli(with({"train"}, small));
  CATCH_CHECK_THAT(one.out, Contains("reference (--no-pipeline: one thread, unpartitioned)"));
}

CATCH_TEST_CASE("a --metrics file another run is writing is refused at the start", "[apps][cli]") {
  // Two runs on one metrics file wrote over each other's lines (NUL bytes between), exit 0.
  const std::string metrics = temp_path(".held.jsonl");
  std::ofstream(metrics) << "{\"step\":0}\n";
  const int fd = ::open(metrics.c_str(), O_RDONLY);
  CATCH_REQUIRE(::flock(fd, LOCK_EX) == 0);  // as the writing run holds it
  const std::vector<std::string> small = {"--layers", "2", "--hidden", "16", "--heads", "2", "--seq-len", "8",
                                          "--steps", "1", "--microbatches", "2", "--microbatch-size", "2"};
  auto r = cli(with({"train", "--metrics", metrics}, small));
  CATCH_CHECK(r.code == 2);
  CATCH_CHECK_THAT(r.err, Contains("--metrics '" + metrics + "' is being written by a run going on now: give this run a "
                                   "file of its own"));
  ::close(fd);  // that run ended: the file is this run's
  r = cli(with({"train", "--metrics", metrics}, small));
  CATCH_CHECK(r.code == 0);
  CATCH_CHECK(read_text(metrics) != "{\"step\":0}\n");  // this run's line, not the other's
  CATCH_CHECK_THAT(read_text(metrics), Contains("\"loss\":"));
  std::remove(metrics.c_str());
}
