// The GPT on a blend of data files (--data-file W1 A W2 B, as Megatron-LM's --data-path): a
// blend of copies of one file trains that file's bits; different files train in the pipeline
// as in the reference; --eval-split holds out each file's tail, evaluated file by file; what a
// blend refuses, by message, through the library and the command line.
#include <torch/torch.h>

#include "actors/pipeline_runtime.hpp"
#include "core/train/reference_trainer.hpp"
#include "tests/apps/cli_runner.hpp"
#include "tests/support/train_results.hpp"

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <unistd.h>

#include <catch2/catch.hpp>

using namespace actorpipe;
using Catch::Contains;
using actorpipe::testing::cli;

namespace {

constexpr int vocab = 64;  // testing::tiny_gpt's

// A learnable uint16 token file under /tmp (mostly the token after the last), removed with the object.
struct token_file {
  std::string path;
  token_file(const std::string& name, std::size_t n, std::uint32_t seed, const std::string& ext = ".bin")
      : path("/tmp/actorpipe_blend_" + std::to_string(::getpid()) + "_" + name + ext) {
    std::uint32_t x = seed;
    std::int64_t last = 0;
    std::ofstream f(path, std::ios::binary | std::ios::trunc);
    for (std::size_t i = 0; i < n; ++i) {
      x = x * 1664525u + 1013904223u;
      const std::int64_t t = i == 0 || (x >> 28) == 0 ? (x >> 8) % vocab : (last + 1) % vocab;
      last = t;
      const unsigned char b[2] = {static_cast<unsigned char>(t & 0xff), static_cast<unsigned char>(t >> 8)};
      f.write(reinterpret_cast<const char*>(b), 2);
    }
  }
  ~token_file() { std::remove(path.c_str()); }
};

// The tests' small GPT (vocab 64, sequences of 16: the files' tokens fit) on these files.
train_options on_files(const std::vector<data_file_part>& parts) {
  train_options o = actorpipe::testing::tiny_gpt("1f1b", 2, 1, 3);
  o.data = "file";
  for (const auto& p : parts)
    o.data_file += (o.data_file.empty() ? "" : " ") + (p.weight > 0 ? std::to_string(p.weight) + " " : "") + p.path;
  if (parts.size() > 1)
    o.data_blend = parts;
  else
    o.data_file = parts.front().path;
  return o;
}

}  // namespace

CATCH_TEST_CASE("the GPT on a blend of copies of one file trains and evaluates as on that file", "[actors][runtime][data]") {
  const token_file a("copy", 3000, 11);
  const std::string copy = a.path + ".copy.bin";
  std::filesystem::copy_file(a.path, copy, std::filesystem::copy_options::overwrite_existing);
  train_options one = on_files({{1, a.path}}), blend = on_files({{0.4, a.path}, {0.6, copy}});
  one.eval_split = blend.eval_split = 0.05;
  one.eval_every = blend.eval_every = 2;
  const train_result x = run_pipeline(one), y = run_pipeline(blend);
  CATCH_REQUIRE(x.steps.size() == 3);
  CATCH_CHECK(actorpipe::testing::bit_identical(x, y));
  // Its eval set is each copy's tail, one after the other: the same windows twice.
  CATCH_REQUIRE(x.evals.size() == 2);
  CATCH_REQUIRE(y.evals.size() == 2);
  for (std::size_t i = 0; i < 2; ++i) CATCH_CHECK(std::abs(y.evals[i].loss - x.evals[i].loss) <= 1e-6 * x.evals[i].loss);
  CATCH_CHECK_THAT(y.data_description,
                   Contains("a blend of 2 sources, each sample drawn by weight: 0.4 (40% of samples) uint16 token file '" +
                            a.path + "' (3000 tokens, vocab 64; training reads its first 2850, its last 150 are held out); "
                            "0.6 (60% of samples) uint16 token file '" + copy + "'") &&
                       Contains("eval: the last 0.05 of each of --data-file's 2 files, 300 tokens (--eval-split), file by "
                                "file, 18 consecutive windows of 16 tokens (the files' last 10 tokens make no window)"));
  std::remove(copy.c_str());
}

CATCH_TEST_CASE("the GPT on a blend of two files: the pipeline as the reference, each file read", "[actors][runtime][data]") {
  const token_file a("a", 3000, 3), b("b", 2000, 5);
  train_options blend = on_files({{0.5, a.path}, {0.5, b.path}});
  const train_result piped = run_pipeline(blend);
  train_options alone = blend;
  alone.no_pipeline = true;
  const train_result reference = run_reference(alone);
  CATCH_REQUIRE(piped.steps.size() == 3);
  CATCH_REQUIRE(reference.steps.size() == 3);
  for (std::size_t i = 0; i < 3; ++i)
    CATCH_CHECK(std::abs(piped.steps[i].loss - reference.steps[i].loss) <= 1e-5 * reference.steps[i].loss);
  // Neither file alone: the blend reads both.
  const train_result only_a = run_pipeline(on_files({{1, a.path}})), only_b = run_pipeline(on_files({{1, b.path}}));
  CATCH_CHECK(piped.steps[0].loss != only_a.steps[0].loss);
  CATCH_CHECK(piped.steps[0].loss != only_b.steps[0].loss);
  // Without weights, each file by the tokens it trains on.
  const train_result by_size = run_pipeline(on_files({{0, a.path}, {0, b.path}}));
  CATCH_CHECK_THAT(by_size.data_description, Contains("a blend of 2 sources, each sample drawn by weight: 3000 (60% of "
                                                      "samples) uint16 token file '" + a.path + "'") &&
                                                 Contains("; 2000 (40% of samples) uint16 token file '" + b.path + "'"));
}

CATCH_TEST_CASE("a blend of data files refuses what it cannot read, naming --data-file", "[actors][runtime][data][errors]") {
  const token_file a("err_a", 3000, 3), text("err_text", 3000, 5, ".txt");
  train_options mixed = on_files({{0.5, a.path}, {0.5, text.path}});
  mixed.model.vocab = 256;
  CATCH_CHECK_THROWS_WITH(run_pipeline(mixed), "--data-file '" + mixed.data_file + "' blends a token file, '" + a.path +
                                                   "', and a text file, '" + text.path +
                                                   "': the files of a blend are read alike (.bin for tokens, any other "
                                                   "name for text)");
  train_options missing = on_files({{0.5, a.path}, {0.5, "/nonexistent/b.bin"}});
  CATCH_CHECK_THROWS_WITH(run_pipeline(missing), "--data-file '/nonexistent/b.bin' does not exist");
  train_options bert = on_files({{0.5, a.path}, {0.5, a.path}});
  bert.model_name = "bert";
  CATCH_CHECK_THROWS_WITH(run_pipeline(bert), "--data-file '" + bert.data_file +
                                                  "' blends 2 files: a blend is read by --model gpt; --model bert reads "
                                                  "one file");
  CATCH_CHECK_THROWS_WITH(run_reference(bert), Contains("a blend is read by --model gpt"));
}

CATCH_TEST_CASE("train --data-file takes a blend as Megatron's --data-path lists one", "[actors][cli][data]") {
  const token_file a("cli_a", 3000, 3), b("cli_b", 2000, 5);
  const std::vector<std::string> tiny = {"train", "--layers", "2", "--hidden", "32", "--heads", "2", "--seq-len", "16",
                                         "--vocab", "64", "--microbatches", "4", "--microbatch-size", "2", "--steps", "2"};
  const auto with = [&](std::vector<std::string> more) {
    std::vector<std::string> args = tiny;
    args.insert(args.end(), more.begin(), more.end());
    return cli(args);
  };
  const auto run = with({"--data-file", "0.3", a.path, "0.7", b.path});
  CATCH_INFO(run.err);
  CATCH_REQUIRE(run.code == 0);
  CATCH_CHECK_THAT(run.out, Contains("a blend of 2 sources, each sample drawn by weight: 0.3 (30% of samples) "
                                            "uint16 token file '" + a.path + "'"));
  // One weighted file is that file.
  CATCH_CHECK(with({"--data-file", "0.3", a.path}).code == 0);
  const auto odd = with({"--data-file", "0.3", a.path, b.path});
  CATCH_CHECK(odd.code == 2);
  CATCH_CHECK_THAT(odd.err, Contains("--data-file '0.3 " + a.path + " " + b.path +
                                     "': 3 values with weights among them do not pair up"));
  const auto zero = with({"--data-file", "0", a.path, "1", b.path});
  CATCH_CHECK(zero.code == 2);
  CATCH_CHECK_THAT(zero.err, Contains("weight '0' of '" + a.path + "' must be a finite number > 0"));
  const auto output = with({"--data-file", "1", a.path, "1", b.path, "--save-final", b.path});
  CATCH_CHECK(output.code == 2);
  CATCH_CHECK_THAT(output.err, Contains("--save-final '" + b.path + "' is the --data-file this run reads"));
  // Megatron's flag points here.
  CATCH_CHECK_THAT(with({"--data-path", "0.3", a.path}).err, Contains("a blend: --data-file W1 A.bin W2 B.bin"));
}
