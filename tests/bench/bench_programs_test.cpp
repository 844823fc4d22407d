// The benchmark programs as a user runs them: --help, bad arguments refused before anything
// runs (exit 2), and checkpoint_throughput leaving the folder it is given as it was.
#include <catch2/catch.hpp>

#include <sys/wait.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "tests/apps/cli_runner.hpp"
#include "tests/apps/process_runner.hpp"

using Catch::Contains;
using namespace actorpipe::testing;

namespace {

struct ran {
  int code = -1;
  std::string out;  // stdout and stderr together
};

ran run_bench(const std::string& command) {
  const std::string log = temp_path(".bench.log");
  const int status = std::system((std::string("cd ") + std::filesystem::temp_directory_path().string() + " && " + BENCH_DIR +
                                  "/" + command + " > " + log + " 2>&1")
                                     .c_str());
  ran r;
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  r.out = read_text(log);
  std::remove(log.c_str());
  return r;
}

}  // namespace

CATCH_TEST_CASE("benchmark programs take --help and refuse what they cannot use, before running", "[bench]") {
  for (const char* program : {"checkpoint_throughput", "gpt_turns", "ucx_bandwidth", "pipeline_overhead"}) {
    CATCH_CAPTURE(program);
    const ran help = run_bench(std::string(program) + " --help");
    CATCH_CHECK(help.code == 0);
    CATCH_CHECK_THAT(help.out, Contains("usage: "));
  }
  CATCH_CHECK_THAT(run_bench("checkpoint_throughput --help").out, Contains("--dir, --save-every"));
  // atoi read these as 0 (a crash on an empty median) or 1 (a full run of ucx_bandwidth).
  const ran rounds = run_bench(std::string("process_layout_throughput ") + ACTORPIPE_BIN + " abc");
  CATCH_CHECK(rounds.code == 2);
  CATCH_CHECK_THAT(rounds.out, Contains("rounds must be a whole number from 1 to 1000, got 'abc'"));
  const ran extra = run_bench(std::string("process_layout_throughput ") + ACTORPIPE_BIN + " 1 3 31900 extra");
  CATCH_CHECK(extra.code == 2);
  CATCH_CHECK_THAT(extra.out, Contains("at most 4 arguments (the program, rounds, steps, port)"));
  const ran reps = run_bench("ucx_bandwidth 0");
  CATCH_CHECK(reps.code == 2);
  CATCH_CHECK_THAT(reps.out, Contains("reps must be a whole number from 1 to 1000"));
  // A trace folder that is not there: said before the runs (it ran them all, then exit 0).
  const ran traces = run_bench("pipeline_overhead --quick --only zbv --trace-dir /nonexistent-actorpipe-dir");
  CATCH_CHECK(traces.code == 2);
  CATCH_CHECK_THAT(traces.out, Contains("--trace-dir '/nonexistent-actorpipe-dir' is not a folder"));
  const ran schedule = run_bench("gpt_turns --schedule nope");
  CATCH_CHECK(schedule.code == 2);
  CATCH_CHECK_THAT(schedule.out, Contains("--schedule: unknown schedule 'nope'"));
  CATCH_CHECK(schedule.out.find("GPT ") == std::string::npos);  // nothing ran
  // A schedule's own rule: said after the reference's turns (77 s), exit 1.
  const ran pair = run_bench("gpt_turns --chunks 3 --schedule zbv");
  CATCH_CHECK(pair.code == 2);
  CATCH_CHECK_THAT(pair.out, Contains("zbv needs chunks == 2"));
  CATCH_CHECK(pair.out.find("GPT ") == std::string::npos);
  // --save-every 0 and 1 said two rules ("from 1" and "at least 2"): one now.
  for (const char* value : {"0", "1"}) {
    const ran every = run_bench(std::string("checkpoint_throughput --save-every ") + value);
    CATCH_CHECK(every.code == 2);
    CATCH_CHECK_THAT(every.out, Contains(std::string("--save-every needs a whole number from 2 to 1000000, got '") +
                                         value + "'"));
  }
  const ran few = run_bench("checkpoint_throughput --save-every 3 --steps 4");
  CATCH_CHECK(few.code == 2);
  CATCH_CHECK_THAT(few.out, Contains("--save-every 3 with --steps 4 leaves no step after a save to compare"));
}

// process_layout_throughput's "median" of an even number of rounds was the upper one (0.547
// and 1.270 made 1.270, a target met); a program that wrote no metrics printed a ratio of NaN
// and exit 0; a port the last round could not have was refused by a rule it did not say.
CATCH_TEST_CASE("process_layout_throughput refuses what gives no ratio and ports past the last round's", "[bench]") {
  const ran none = run_bench("process_layout_throughput /bin/true 1 3 31990");
  CATCH_CHECK(none.code == 1);
  CATCH_CHECK_THAT(none.out, Contains("the one-process run wrote no metrics of steps after the second to "));
  CATCH_CHECK(none.out.find("nan") == std::string::npos);
  const ran high = run_bench("process_layout_throughput /bin/true 3 3 65534");
  CATCH_CHECK(high.code == 2);
  CATCH_CHECK_THAT(high.out, Contains("port must be a whole number from 1024 to 65533 (with 3 rounds on ports "
                                      "port..port+2), got '65534'"));
}

CATCH_TEST_CASE("checkpoint_throughput --dir writes in a folder of its own there, and leaves the rest", "[bench]") {
  // It removed DIR with everything in it, before and after its run.
  const std::string dir = temp_path(".bench-dir");
  std::filesystem::create_directories(dir + "/sub");
  std::ofstream(dir + "/thesis.txt") << "mine";
  const ran r = run_bench("checkpoint_throughput --dir " + dir +
                          " --layers 2 --hidden 32 --seq-len 8 --microbatch-size 1 --microbatches 2 --steps 4 "
                          "--save-every 2");
  CATCH_INFO(r.out);
  CATCH_CHECK(r.code == 0);
  CATCH_CHECK(read_text(dir + "/thesis.txt") == "mine");
  CATCH_CHECK(std::filesystem::is_directory(dir + "/sub"));
  std::size_t entries = 0;
  for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator(dir)) ++entries;
  CATCH_CHECK(entries == 2);  // its own folder is gone again
  std::filesystem::remove_all(dir);
}

CATCH_TEST_CASE("checkpoint_throughput that can write no checkpoint says so and leaves the folder as it was", "[bench]") {
  // It crashed (an integer division by the zero checkpoints, SIGFPE) and left its folder.
  const std::string dir = temp_path(".bench-full");
  std::filesystem::create_directories(dir);
  std::ofstream(dir + "/keep.txt") << "mine";
  const ran r = run_bench("checkpoint_throughput --dir " + dir + " --layers 2 --hidden 64 --seq-len 32 --microbatches 2 "
                          "--steps 4 --save-every 2");
  CATCH_REQUIRE(r.code == 0);  // the same run with room for its files
  const std::string log = temp_path(".bench-full.log");
  const int status = std::system(("bash -c \"trap '' XFSZ; ulimit -f 400; cd /tmp && exec " + std::string(BENCH_DIR) +
                                  "/checkpoint_throughput --dir " + dir +
                                  " --layers 2 --hidden 64 --seq-len 32 --microbatches 2 --steps 4 --save-every 2\" > " +
                                  log + " 2>&1")
                                     .c_str());
  const std::string text = read_text(log);
  CATCH_INFO(text);
  CATCH_CHECK(WIFEXITED(status));
  CATCH_CHECK((WIFEXITED(status) ? WEXITSTATUS(status) : -1) == 1);
  CATCH_CHECK_THAT(text, Contains("checkpoint_throughput: no checkpoint was written ("));
  std::size_t entries = 0;
  for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator(dir)) ++entries;
  CATCH_CHECK(entries == 1);  // keep.txt alone
  std::filesystem::remove_all(dir);
  std::remove(log.c_str());
}
