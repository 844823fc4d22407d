// The GPT's evaluation on held-out data: a token file's consecutive windows (the last
// microbatch padded) or the synthetic source's held-out stream, each target's loss computed on
// the last stage. The pass's loss is checked against the final parameters run by hand over the
// file's windows, every schedule's against the others' (same bits) and the reference's.
#include <torch/torch.h>

#include "actors/pipeline_runtime.hpp"
#include "core/model/layer_model.hpp"
#include "core/model/tensor_box_torch.hpp"
#include "core/train/reference_trainer.hpp"
#include "tests/apps/cli_runner.hpp"
#include "tests/apps/process_runner.hpp"
#include "tests/support/megatron_files.hpp"
#include "tests/support/train_results.hpp"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <csignal>
#include <cstdint>
#include <filesystem>
#include <cstdio>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include <unistd.h>

#include <catch2/catch.hpp>

using namespace actorpipe;
using Catch::Contains;
using actorpipe::testing::cli;
using actorpipe::testing::read_text;

namespace {

// A uint16 token file under /tmp, removed when the test ends.
struct token_file {
  std::string path;
  std::vector<std::int64_t> tokens;
  token_file(const std::string& name, std::size_t n, int vocab, std::uint32_t seed)
      : path("/tmp/actorpipe_gpt_eval_" + std::to_string(::getpid()) + "_" + name + ".bin") {
    std::uint32_t x = seed;
    std::ofstream f(path, std::ios::binary | std::ios::trunc);
    for (std::size_t i = 0; i < n; ++i) {
      x = x * 1664525u + 1013904223u;
      // A learnable file: mostly the token after the last, sometimes a jump.
      const std::int64_t t = i == 0 || (x >> 28) == 0 ? (x >> 8) % vocab : (tokens.back() + 1) % vocab;
      tokens.push_back(t);
      const unsigned char b[2] = {static_cast<unsigned char>(t & 0xff), static_cast<unsigned char>(t >> 8)};
      f.write(reinterpret_cast<const char*>(b), 2);
    }
  }
  // A file of these tokens.
  token_file(const std::string& name, std::vector<std::int64_t> given)
      : path("/tmp/actorpipe_gpt_eval_" + std::to_string(::getpid()) + "_" + name + ".bin"), tokens(std::move(given)) {
    std::ofstream f(path, std::ios::binary | std::ios::trunc);
    for (const std::int64_t t : tokens) {
      const unsigned char b[2] = {static_cast<unsigned char>(t & 0xff), static_cast<unsigned char>(t >> 8)};
      f.write(reinterpret_cast<const char*>(b), 2);
    }
  }
  ~token_file() { std::remove(path.c_str()); }
};

constexpr int vocab = 64, seq_len = 16;

// A small GPT of `layers` blocks on the synthetic corpus: 4 microbatches of 2 sequences.
train_options tiny_gpt(int layers, int steps) {
  train_options o;
  o.model.layers = layers;
  o.model.hidden = 32;
  o.model.heads = 2;
  o.model.seq_len = seq_len;
  o.model.vocab = vocab;
  o.microbatches = 4;
  o.microbatch_size = 2;
  o.steps = steps;
  o.lr = 3e-3;
  return o;
}

train_options eval_options(const std::string& train_path, const std::string& eval_path) {
  train_options o = tiny_gpt(4, 3);
  o.data = "file";
  o.data_file = train_path;
  o.text.eval_file = eval_path;
  o.eval_every = 2;
  return o;
}

// The mean loss of the model with `parameters` over every consecutive window of `tokens`,
// computed here layer by layer on the whole model (no pipeline, no eval pieces).
double loss_by_hand(const train_options& o, const std::vector<std::pair<std::string, tensor_box>>& parameters,
                    const std::vector<std::int64_t>& tokens) {
  const model_definition m = make_model(o);
  built_layers built = build_all_layers(m);
  std::map<std::string, at::Tensor> given;
  for (const auto& [name, value] : parameters) given[name] = unbox(value);
  torch::NoGradGuard no_grad;
  for (std::size_t i = 0; i < m.layers.size(); ++i)
    for (const auto& p : built.modules[i].ptr()->named_parameters()) {
      const auto it = given.find(m.layers[i].prefix() + p.key());
      if (it != given.end()) p.value().copy_(it->second);
    }
  const std::int64_t windows = (static_cast<std::int64_t>(tokens.size()) - 1) / seq_len;
  const at::Tensor all = torch::tensor(tokens, at::kLong);
  std::vector<at::Tensor> xs, ys;
  for (std::int64_t w = 0; w < windows; ++w) {
    xs.push_back(all.slice(0, w * seq_len, w * seq_len + seq_len));
    ys.push_back(all.slice(0, w * seq_len + 1, w * seq_len + seq_len + 1));
  }
  at::Tensor h = torch::stack(xs);
  for (std::size_t i = 0; i < m.layers.size(); ++i)
    h = m.layers[i].forward ? m.layers[i].forward(built.modules[i], h) : built.modules[i].forward(h);
  return torch::nn::functional::cross_entropy(h.reshape({-1, vocab}), torch::stack(ys).reshape({-1})).item<double>();
}

}  // namespace

CATCH_TEST_CASE("the GPT's evaluation on a held-out token file: every window once, the loss of the trained model",
                "[actors][runtime][eval]") {
  const token_file train("train", 4000, vocab, 7);
  // 5 windows of 16 tokens (and 3 tokens past the last): microbatches of 2 rows, the third
  // padded with a row of -100 targets.
  const token_file val("val", 5 * seq_len + 1 + 3, vocab, 99);
  train_options o = eval_options(train.path, val.path);

  const train_result ran = run_pipeline(o);
  CATCH_REQUIRE(ran.evals.size() == 2);  // after step 2, and after the last (3)
  CATCH_CHECK(ran.evals[0].step == 2);
  CATCH_CHECK(ran.evals[1].step == 3);
  const eval_record& last = ran.evals.back();
  // Kept: each target's loss, [rows, seq_len], and the targets in window order.
  CATCH_REQUIRE(last.output_shape == std::vector<std::int64_t>{6, seq_len});
  CATCH_REQUIRE(last.targets.size() == 6u * seq_len);
  for (int w = 0; w < 5; ++w)
    for (int t = 0; t < seq_len; ++t) CATCH_REQUIRE(last.targets[w * seq_len + t] == val.tokens[w * seq_len + t + 1]);
  for (int t = 0; t < seq_len; ++t) CATCH_REQUIRE(last.targets[5 * seq_len + t] == -100);
  // The loss: of the final parameters, over the 80 targets, as computed by hand.
  const std::vector<std::int64_t> covered(val.tokens.begin(), val.tokens.begin() + 5 * seq_len + 1);
  const double by_hand = loss_by_hand(o, ran.parameters, covered);
  CATCH_CHECK(std::abs(last.loss - by_hand) <= 1e-5 * by_hand);
  CATCH_REQUIRE(last.metrics.size() == 1);
  CATCH_CHECK(last.metrics[0].first == "perplexity");
  CATCH_CHECK(std::abs(last.metrics[0].second - std::exp(last.loss)) <= 1e-9 * std::exp(last.loss));
  // Trained on a file of the same kind, the model does better on it after 3 steps than after 2.
  CATCH_CHECK(last.loss < ran.evals[0].loss);

  // The same bits on every schedule and partition; the reference within rounding.
  for (const auto& [schedule, stages, chunks] : {std::tuple<const char*, int, int>{"zbv", 2, 2}, {"interleaved", 2, 2},
                                                 {"gpipe", 4, 1}}) {
    CATCH_INFO(schedule << ", " << stages << " stages x " << chunks);
    train_options other = o;
    other.schedule = schedule;
    other.stages = stages;
    other.chunks = chunks;
    const train_result r = run_pipeline(other);
    CATCH_REQUIRE(r.evals.size() == 2);
    CATCH_CHECK(r.evals[0].loss == ran.evals[0].loss);
    CATCH_CHECK(r.evals[1].loss == last.loss);
    CATCH_CHECK(r.evals[1].outputs == last.outputs);
  }
  train_options alone = o;
  alone.no_pipeline = true;
  const train_result reference = run_reference(alone);
  CATCH_REQUIRE(reference.evals.size() == 2);
  CATCH_CHECK(std::abs(reference.evals[1].loss - last.loss) <= 1e-5 * last.loss);

  // The first N microbatches only; no more than the file holds.
  train_options first = o;
  first.eval_microbatches = 2;
  const train_result two = run_pipeline(first);
  CATCH_REQUIRE(two.evals.back().output_shape == std::vector<std::int64_t>{4, seq_len});
  const std::vector<std::int64_t> four(val.tokens.begin(), val.tokens.begin() + 4 * seq_len + 1);
  CATCH_CHECK(std::abs(two.evals.back().loss - loss_by_hand(o, two.parameters, four)) <= 1e-5 * two.evals.back().loss);
  first.eval_microbatches = 4;
  CATCH_CHECK_THROWS_WITH(run_pipeline(first),
                          "--eval-microbatches=4 is more than --eval-file '" + val.path + "' holds: 5 windows of --seq-len 16 "
                          "tokens make 3 microbatches of 2");
}

CATCH_TEST_CASE("the GPT's eval split: one file trains as a file of its head and evaluates as an eval file of its tail",
                "[actors][runtime][eval]") {
  const token_file all("split_all", 3000, vocab, 11);
  // 5% of 3000: the last 150 tokens, 9 windows of 16 and 5 tokens past the last.
  const token_file head("split_head", std::vector<std::int64_t>(all.tokens.begin(), all.tokens.end() - 150));
  const token_file tail("split_tail", std::vector<std::int64_t>(all.tokens.end() - 150, all.tokens.end()));
  train_options split = eval_options(all.path, "");
  split.eval_split = 0.05;
  const train_result a = run_pipeline(split), b = run_pipeline(eval_options(head.path, tail.path));
  CATCH_REQUIRE(a.steps.size() == 3);
  CATCH_REQUIRE(b.steps.size() == 3);
  for (std::size_t i = 0; i < 3; ++i) CATCH_CHECK(a.steps[i].loss == b.steps[i].loss);
  CATCH_CHECK(actorpipe::testing::bit_identical(a, b));
  CATCH_REQUIRE(a.evals.size() == 2);
  CATCH_REQUIRE(b.evals.size() == 2);
  for (std::size_t i = 0; i < 2; ++i) {
    CATCH_CHECK(a.evals[i].loss == b.evals[i].loss);
    CATCH_CHECK(a.evals[i].outputs == b.evals[i].outputs);
    CATCH_CHECK(a.evals[i].targets == b.evals[i].targets);
  }
  CATCH_CHECK_THAT(a.data_description, Contains("3000 tokens, vocab 64; training reads its first 2850, its last 150 are held "
                                                "out") &&
                                           Contains("eval: the last 150 tokens of --data-file (--eval-split 0.05), 9 "
                                                    "consecutive windows of 16 tokens (its last 5 tokens make no window)"));
  // The reference the same way.
  train_options alone = split;
  alone.no_pipeline = true;
  const train_result reference = run_reference(alone);
  CATCH_REQUIRE(reference.evals.size() == 2);
  CATCH_CHECK(std::abs(reference.evals[1].loss - a.evals[1].loss) <= 1e-5 * a.evals[1].loss);

  // What it refuses, naming the flag: a share out of range, too little on either side, two
  // eval sets, no file to split, more microbatches than the tail holds.
  train_options bad = split;
  bad.eval_split = 1;
  CATCH_CHECK_THROWS_WITH(run_pipeline(bad), "--eval-split=1 must be >= 0 and below 1: the share of --data-file's tokens "
                                             "held out for evaluation (0: none)");
  bad.eval_split = -0.1;
  CATCH_CHECK_THROWS_WITH(run_pipeline(bad), Contains("--eval-split=-0.1 must be >= 0 and below 1"));
  bad.eval_split = 0.005;
  CATCH_CHECK_THROWS_WITH(run_pipeline(bad), "--eval-split 0.005 holds out 15 of the 3000 uint16 tokens of --data-file '" +
                                                 all.path + "': an evaluation window of --seq-len 16 needs 17");
  bad.eval_split = 0.995;
  CATCH_CHECK_THROWS_WITH(run_pipeline(bad), "--eval-split 0.995 leaves 15 of the 3000 uint16 tokens of --data-file '" +
                                                 all.path + "' to train on: one sample of --seq-len 16 needs 17");
  bad = eval_options(all.path, tail.path);
  bad.eval_split = 0.05;
  CATCH_CHECK_THROWS_WITH(run_pipeline(bad), "--eval-split and --eval-file both give the eval set: give one (--eval-file '" +
                                                 tail.path + "', --eval-split 0.05)");
  bad = tiny_gpt(2, 2);
  bad.eval_split = 0.05;
  CATCH_CHECK_THROWS_WITH(run_pipeline(bad), Contains("--eval-split holds out the end of --data-file, and this run trains "
                                                      "on the synthetic corpus"));
  bad = split;
  bad.eval_microbatches = 6;
  CATCH_CHECK_THROWS_WITH(run_pipeline(bad), "--eval-microbatches=6 is more than --eval-split 0.05 of --data-file '" +
                                                 all.path + "' holds: 9 windows of --seq-len 16 tokens make 5 microbatches "
                                                 "of 2");
}

namespace {

// A Megatron-LM dataset of `tokens` (`prefix`.bin and .idx, int32 tokens, one document a
// sequence of `doc` tokens, the last shorter), removed when the test ends.
struct megatron_files {
  std::string bin, idx;
  megatron_files(const std::string& prefix, const std::vector<std::int64_t>& tokens, std::size_t doc)
      : bin(prefix + ".bin"), idx(prefix + ".idx") {
    std::vector<std::int64_t> lengths;
    for (std::size_t at = 0; at < tokens.size(); at += doc)
      lengths.push_back(static_cast<std::int64_t>(std::min(doc, tokens.size() - at)));
    testing::write_bytes(bin, testing::token_bytes(tokens, 4));
    testing::write_bytes(idx, testing::megatron_index(4, lengths, testing::end_to_end(lengths, 4), lengths.size() + 1));
  }
  ~megatron_files() {
    std::remove(bin.c_str());
    std::remove(idx.c_str());
  }
};

}  // namespace

CATCH_TEST_CASE("the GPT trains and evaluates on a Megatron dataset as on a flat file of its tokens",
                "[actors][runtime][eval]") {
  const token_file flat("megatron_flat", 3000, vocab, 23);
  const std::string prefix = "/tmp/actorpipe_gpt_eval_" + std::to_string(::getpid()) + "_megatron";
  const megatron_files dataset(prefix, flat.tokens, 400);
  train_options o = eval_options(flat.path, "");
  o.eval_split = 0.05;
  const train_result a = run_pipeline(o);
  o.data_file = dataset.bin;
  const train_result b = run_pipeline(o);
  CATCH_REQUIRE(a.steps.size() == 3);
  CATCH_REQUIRE(b.steps.size() == 3);
  for (std::size_t i = 0; i < 3; ++i) CATCH_CHECK(a.steps[i].loss == b.steps[i].loss);
  CATCH_CHECK(actorpipe::testing::bit_identical(a, b));
  CATCH_REQUIRE(b.evals.size() == 2);
  for (std::size_t i = 0; i < 2; ++i) CATCH_CHECK(a.evals[i].loss == b.evals[i].loss);
  CATCH_CHECK_THAT(b.data_description, Contains("Megatron dataset '" + dataset.bin + "' (int32 tokens, 8 sequences in 8 "
                                                "documents by its index '" + dataset.idx + "'; 3000 tokens, vocab 64; "
                                                "training reads its first 2850, its last 150 are held out)"));
  // The flags' own words name the tokens' type; Megatron's prefix is pointed to its .bin.
  o.eval_split = 0.005;
  CATCH_CHECK_THROWS_WITH(run_pipeline(o), "--eval-split 0.005 holds out 15 of the 3000 int32 tokens of --data-file '" +
                                               dataset.bin + "': an evaluation window of --seq-len 16 needs 17");
  o.eval_split = 0;
  o.data_file = prefix;
  CATCH_CHECK_THROWS_WITH(run_pipeline(o), "--data-file '" + prefix + "' does not exist; '" + prefix + ".bin' and '" +
                                               prefix + ".idx' do (a Megatron dataset, named by its prefix as --data-path "
                                               "names it): give --data-file '" + prefix + ".bin' (its index beside it is "
                                               "read)");
  o.data_file = dataset.idx;
  CATCH_CHECK_THROWS_WITH(run_pipeline(o), "--data-file '" + dataset.idx + "' is a Megatron dataset's index: give its .bin, "
                                           "--data-file '" + dataset.bin + "'");
  o.data_file = dataset.bin;
  o.model.vocab = 32;  // the file's ids reach 63
  CATCH_CHECK_THROWS_WITH(run_pipeline(o), Contains("--data-file: data file '" + dataset.bin + "' token ") &&
                                               Contains(" is >= vocab 32 (--vocab 32; a .bin file holds token ids below "
                                                        "it)"));
  o.model.vocab = vocab;
  o.text.eval_file = dataset.bin;  // an eval file may be a dataset too
  o.data_file = flat.path;
  const train_result c = run_pipeline(o);
  CATCH_REQUIRE(c.evals.size() == 2);
  { std::ofstream broken(dataset.idx, std::ios::binary | std::ios::trunc); broken << "not an index"; }
  CATCH_CHECK_THROWS_WITH(run_pipeline(o), "--eval-file: '" + dataset.idx + "' is beside data file '" + dataset.bin +
                                               "' and is not a Megatron index (it does not begin with MMIDIDX), so the "
                                               ".bin's token type is not known: move it away to read the .bin as flat "
                                               "uint16 tokens");
}

CATCH_TEST_CASE("the GPT on synthetic data evaluates on held-out sequences of its source", "[actors][runtime][eval]") {
  train_options o = tiny_gpt(2, 4);
  o.eval_every = 2;  // alone, it turns evaluation on: --microbatches (4) microbatches
  const train_result r = run_pipeline(o);
  CATCH_REQUIRE(r.evals.size() == 2);
  CATCH_CHECK(r.evals[0].output_shape == std::vector<std::int64_t>{8, seq_len});
  // Held out: none of its sequences is a training sample's (the first 4 steps' 32).
  const model_definition m = make_model(o);
  std::vector<at::Tensor> trained;
  for (int step = 0; step < 4; ++step)
    for (int mb = 0; mb < 4; ++mb) trained.push_back(unbox(m.data(step, mb).targets));
  const at::Tensor held = unbox(m.eval_data(0, 0).targets);
  int same = 0;
  for (const at::Tensor& t : trained)
    for (int row = 0; row < 2; ++row)
      for (int other = 0; other < 2; ++other) same += torch::equal(held[row], t[other]);
  CATCH_CHECK(same == 0);
  // Each pass reads the same sequences.
  CATCH_CHECK(torch::equal(unbox(m.eval_data(0, 1).inputs), unbox(make_model(o).eval_data(7, 1).inputs)));
  CATCH_CHECK(r.evals[1].loss < r.evals[0].loss);
  CATCH_CHECK(r.evals[1].loss < std::log(static_cast<double>(vocab)));

  train_options sized = o;
  sized.eval_every = 0;
  sized.eval_microbatches = 3;  // alone too: after the last step
  const train_result three = run_pipeline(sized);
  CATCH_REQUIRE(three.evals.size() == 1);
  CATCH_CHECK(three.evals[0].step == 4);
  CATCH_CHECK(three.evals[0].output_shape == std::vector<std::int64_t>{6, seq_len});
  // Neither number: no evaluation, as before.
  sized.eval_microbatches = 0;
  CATCH_CHECK(run_pipeline(sized).evals.empty());
}

CATCH_TEST_CASE("the GPT's evaluation refuses what it cannot read, naming the flag", "[actors][runtime][eval][errors]") {
  const token_file train("train_errors", 2000, vocab, 3);
  train_options o = eval_options(train.path, "/nonexistent/val.bin");
  CATCH_CHECK_THROWS_WITH(run_pipeline(o), "--eval-file '/nonexistent/val.bin' does not exist");
  const token_file short_file("short", seq_len, vocab, 4);  // one token short of a window
  o.text.eval_file = short_file.path;
  CATCH_CHECK_THROWS_WITH(run_pipeline(o), "--eval-file '" + short_file.path + "' holds 16 uint16 tokens: one sample of "
                                           "--seq-len 16 needs 17");
  const token_file wide("wide", 100, 1000, 5);  // token ids past --vocab 64
  o.text.eval_file = wide.path;
  CATCH_CHECK_THROWS_WITH(run_pipeline(o), Contains("--eval-file: data file '" + wide.path + "' token ") &&
                                               Contains("(--vocab 64; a .bin file holds token ids below it)"));
  o.text.eval_file.clear();
  CATCH_CHECK_THROWS_WITH(run_pipeline(o), "--eval-every with --data-file needs --eval-file, a held-out token file (e.g. "
                                           "nanoGPT's val.bin), or --eval-split F, the file's last F held out");
  o.eval_every = 0;
  o.eval_microbatches = -1;
  CATCH_CHECK_THROWS_WITH(run_pipeline(o), "--eval-microbatches=-1 must be >= 0");
}

// A run stopped before the pass due after its step skips it (its checkpoint says so); a resume
// makes it up first. Where the resumed run's evaluation data differ from the stopped run's, or
// it has none, it says so instead of making it up on other data or dropping it unsaid.
CATCH_TEST_CASE("a resumed gpt run says when the pass its checkpoint skipped runs on other data, or not at all",
                "[actors][runtime][eval][checkpoint]") {
  const std::string dir = std::filesystem::temp_directory_path().string() + "/actorpipe-gpt-eval-pending-" +
                          std::to_string(::getpid()),
                    log = dir + ".log";
  std::filesystem::remove_all(dir);
  train_options o = tiny_gpt(2, 4);
  o.eval_every = 2;
  o.save_dir = dir;
  std::atomic<int> stop{0};
  o.stop_signal = &stop;
  const train_result stopped = run_pipeline(o, [&stop](const step_metrics& m) {
    if (m.step == 1) stop.store(SIGTERM);  // during step 2, before its pass
  });
  CATCH_REQUIRE(stopped.checkpoints.size() == 1);
  CATCH_REQUIRE(stopped.evals.empty());

  const std::vector<std::string> job = {"train", "--layers", "2", "--hidden", "32", "--heads", "2", "--seq-len", "16",
                                        "--vocab", "64", "--microbatches", "4", "--microbatch-size", "2", "--steps", "4",
                                        "--lr", "0.003", "--warmup-steps", "0", "--resume", dir, "--log-file", log};
  auto resume = [&](std::vector<std::string> more) {
    std::vector<std::string> args = job;
    args.insert(args.end(), more.begin(), more.end());
    std::filesystem::remove(log);
    const auto r = cli(args);
    CATCH_INFO(r.err);
    CATCH_REQUIRE(r.code == 0);
    return read_text(log);
  };
  const std::string skipped = "the evaluation due after step 2 did not run before the checkpoint's run stopped";
  const std::string same = resume({"--eval-every", "2"});
  CATCH_CHECK_THAT(same, Contains(skipped + ": it runs first"));
  CATCH_CHECK(same.find("warning") == std::string::npos);
  CATCH_CHECK_THAT(resume({"--eval-every", "2", "--eval-microbatches", "3"}),
                   Contains(skipped + ": it runs first, on other evaluation data than the interrupted run's (--eval-file, "
                                      "--eval-microbatches, --eval-split): its numbers are not the ones that run would have "
                                      "had"));
  CATCH_CHECK_THAT(resume({}), Contains(skipped + ", and this run has no evaluation data (--eval-file or --eval-split): it "
                                                  "does not run"));
  CATCH_CHECK_THAT(resume({"--eval-every", "3"}),
                   Contains(skipped + ", and this run evaluates at other steps (--eval-every 3): it does not run"));
  CATCH_CHECK_THAT(resume({"--eval-microbatches", "4"}),
                   Contains(skipped + ", and this run evaluates after its last step only (--eval-every 0): it does not run"));
  std::filesystem::remove_all(dir);
  std::filesystem::remove(log);
}
