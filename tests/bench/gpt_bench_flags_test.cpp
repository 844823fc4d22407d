// The GPT benchmarks' flags: each benchmark takes the flags it uses, and anything else is one
// line naming the flag (and, for an unknown one, the flags it does take).
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "bench/gpt_bench.hpp"

using namespace actorpipe;

namespace {

std::string parse(std::vector<std::string> args, train_options& o, const bench::bench_flags& accepts) {
  args.insert(args.begin(), "bench");
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  return bench::gpt_bench_flag_error(static_cast<int>(argv.size()), argv.data(), o, accepts);
}

}  // namespace

CATCH_TEST_CASE("bench flags: each benchmark takes its own, the rest is one error naming the flag", "[bench]") {
  int repeat = 1;
  const bench::bench_flags throughput{true, false, &repeat}, single_pass{false, false, &repeat},
      data_parallel{true, true, nullptr};

  train_options o = bench::gpt_bench_options();
  CATCH_CHECK(parse({"--layers", "4", "--microbatches", "8", "--steps", "5", "--repeat", "3"}, o, throughput).empty());
  CATCH_CHECK(o.model.layers == 4);
  CATCH_CHECK(o.microbatches == 8);
  CATCH_CHECK(o.steps == 5);
  CATCH_CHECK(repeat == 3);
  CATCH_CHECK(o.model.hidden == 256);  // untouched

  // split_costs times single passes: --microbatches and --steps would be silently ignored.
  o = bench::gpt_bench_options();
  CATCH_CHECK(parse({"--microbatches", "8"}, o, single_pass) ==
              "unknown flag --microbatches (it takes --layers, --hidden, --seq-len, --microbatch-size, --repeat)");
  CATCH_CHECK(parse({"--steps", "2"}, o, single_pass).rfind("unknown flag --steps (", 0) == 0);
  CATCH_CHECK(o.microbatches == 16);

  // rank_replay replays one step: --microbatches, but no --steps.
  std::string schedule;
  const bench::bench_flags one_step{true, false, &repeat, &schedule, nullptr, false};
  o = bench::gpt_bench_options();
  CATCH_CHECK(parse({"--microbatches", "8", "--schedule", "1f1b,zbv"}, o, one_step).empty());
  CATCH_CHECK(o.microbatches == 8);
  CATCH_CHECK(schedule == "1f1b,zbv");
  CATCH_CHECK(parse({"--steps", "2"}, o, one_step) ==
              "unknown flag --steps (it takes --layers, --hidden, --seq-len, --microbatch-size, --microbatches, "
              "--repeat, --schedule)");

  CATCH_CHECK(parse({"--repeat", "2"}, o, data_parallel) ==
              "unknown flag --repeat (it takes --layers, --hidden, --seq-len, --microbatch-size, --microbatches, "
              "--steps, --bucket-mb)");
  CATCH_CHECK(parse({"--bucket-mb", "0.5"}, o, data_parallel).empty());
  CATCH_CHECK(o.bucket_mb == 0.5);
  CATCH_CHECK(parse({"--bucket-mb", "-1"}, o, data_parallel) == "--bucket-mb needs a positive number, got '-1'");
  CATCH_CHECK(parse({"--repeat", "0"}, o, throughput) == "--repeat needs a whole number from 1 to 1000000, got '0'");
  CATCH_CHECK(parse({"--layers", "4x"}, o, throughput) == "--layers needs a whole number from 1 to 1000000, got '4x'");
  CATCH_CHECK(parse({"--layers", "4", "--hidden"}, o, throughput) == "--hidden needs a value");
}
