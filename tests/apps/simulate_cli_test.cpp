// `actorpipe simulate` end to end: in-process through cli_main, and the real binary for exit
// codes and the one-line error contract.
#include <catch2/catch.hpp>

#include <array>
#include <csignal>
#include <cstdio>
#include <fstream>
#include <thread>

#include <sys/stat.h>
#include <sstream>
#include <filesystem>
#include <sys/wait.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "core/version.hpp"

#include "core/schedule/schedule_registry.hpp"
#include "core/sim/chrome_trace.hpp"
#include "core/sim/plan_choice.hpp"
#include "core/sim/simulator.hpp"
#include "tests/apps/cli_runner.hpp"
#include "tests/apps/process_runner.hpp"

using namespace actorpipe;
using Catch::Contains;
using namespace actorpipe::testing;

CATCH_TEST_CASE("simulate with no flags runs 1f1b on 4 stages and 8 microbatches", "[apps][simulate]") {
  auto r = cli({"simulate"});
  CATCH_REQUIRE(r.code == 0);
  CATCH_CHECK(r.err.empty());
  CATCH_CHECK_THAT(r.out, Contains("schedule 1f1b: stages=4, chunks=1, microbatches=8"));
  CATCH_CHECK_THAT(r.out, Contains("rank 0 |F0 F1 F2 F3 "));
  CATCH_CHECK_THAT(r.out, Contains("makespan      33\n"));
  CATCH_CHECK_THAT(r.out, Contains("ideal time    24"));
  CATCH_CHECK_THAT(r.out, Contains("bubble ratio  27.27%"));
  CATCH_CHECK_THAT(r.out, Contains("0     24          9           4\n"));
  CATCH_CHECK_THAT(r.out, Contains("3     24          9           1\n"));
}

// cli_main in a caller's process: SIGPIPE and SIGXFSZ ignored while a command writes, and put
// back (help, --version, simulate and doctor left SIGPIPE ignored in the caller's process).
CATCH_TEST_CASE("cli_main puts back the caller's SIGPIPE and SIGXFSZ", "[apps][simulate]") {
  struct sigaction pipe_before {}, size_before {}, now {};
  sigaction(SIGPIPE, nullptr, &pipe_before);
  sigaction(SIGXFSZ, nullptr, &size_before);
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"--help"}, {"--version"}, {"simulate", "--stages", "2"}, {"simulate", "--bogus"}}) {
    CATCH_INFO(args.front());
    cli(args);
    sigaction(SIGPIPE, nullptr, &now);
    CATCH_CHECK(now.sa_handler == pipe_before.sa_handler);
    sigaction(SIGXFSZ, nullptr, &now);
    CATCH_CHECK(now.sa_handler == size_before.sa_handler);
  }
}

CATCH_TEST_CASE("every flag's value is read as written: empty, hex and octal-looking texts", "[apps][simulate][errors]") {
  struct bad_case {
    std::vector<std::string> args;
    std::string message;
  };
  const std::vector<bad_case> cases = {
      // CLI11 took an empty value as the flag's default.
      {{"simulate", "--stages", ""}, "actorpipe simulate: error: --stages: must not be empty (leave the flag out for its default)"},
      {{"simulate", "--svg", ""}, "--svg: must not be empty"},
      {{"simulate", "--set", ""}, "--set: must not be empty"},
      // A value left out took the next flag as its value (a file named --print-plan).
      {{"simulate", "--svg", "--print-plan"},
       "--svg: needs a value, and got the flag '--print-plan' (a file of that name: write ./--print-plan)"},
      {{"doctor", "--master-port", ""}, "actorpipe doctor: error: --master-port: must not be empty"},
      {{"launch", "--nproc-per-node", "", "--", "simulate"}, "--nproc-per-node: must not be empty"},
      // Integers were read with base 0, reals took hex.
      {{"simulate", "--stages", "0x2"}, "--stages: must be a whole number in decimal digits, got '0x2'"},
      {{"simulate", "--microbatches", " 8"}, "--microbatches: must be a whole number in decimal digits, got ' 8'"},
      {{"simulate", "--stages", "2.0"}, "--stages: must be a whole number in decimal digits, got '2.0'"},
      {{"simulate", "--latency", "0x10"}, "--latency: must be a decimal number, got '0x10'"},
      {{"simulate", "--stages", "99999999999999999999"}, "--stages: 99999999999999999999 is out of range (64-bit)"},
  };
  for (const auto& c : cases) {
    auto r = cli(c.args);
    CATCH_INFO(c.args[1] + " '" + c.args[2] + "'");
    CATCH_CHECK(r.code == 2);
    CATCH_CHECK_THAT(r.err, Contains(c.message));
    CATCH_CHECK(r.out.empty());
  }
  // A flag given twice is named as such (CLI11: "At Most 1 required but received 2").
  auto twice = cli({"simulate", "-P", "2", "--stages", "3"});
  CATCH_CHECK(twice.code == 2);
  CATCH_CHECK(twice.err == "actorpipe simulate: error: --stages is given 2 times: give it once\n");
  // A leading zero is a decimal digit: "010" is ten stages, as written (base 0 read it as 8).
  auto ten = cli({"simulate", "--stages", "010", "--microbatches", "+010"});
  CATCH_REQUIRE(ten.code == 0);
  CATCH_CHECK_THAT(ten.out, Contains("stages=10, chunks=1, microbatches=10"));
}

CATCH_TEST_CASE("simulate --early-input-grad models B as train runs it", "[apps][simulate]") {
  // Each of 3 backward hand-offs leaves after I (1), not B (2): 33 -> 30.
  auto r = cli({"simulate", "--early-input-grad"});
  CATCH_REQUIRE(r.code == 0);
  CATCH_CHECK_THAT(r.out, Contains("send latency 0; B sends its input gradient after I\n"));
  CATCH_CHECK_THAT(r.out, Contains("makespan      30\n"));
  // I=0 (which costs read as "not measured") simulated the late hand-off without a word.
  r = cli({"simulate", "--early-input-grad", "--cost", "1,2,0,2"});
  CATCH_CHECK(r.code == 2);
  CATCH_CHECK_THAT(r.err, Contains("--early-input-grad with --cost 1,2,0,2: I=0 says when B sends its input gradient"));
}

CATCH_TEST_CASE("simulate --format json has the documented keys", "[apps][simulate]") {
  auto r = cli({"simulate", "--schedule", "interleaved", "--stages", "4", "--microbatches", "8", "--chunks", "2",
                "--format", "json"});
  CATCH_REQUIRE(r.code == 0);
  auto j = nlohmann::json::parse(r.out);
  CATCH_CHECK(j["schedule"] == "interleaved");
  CATCH_CHECK(j["stages"] == 4);
  CATCH_CHECK(j["chunks"] == 2);
  CATCH_CHECK(j["microbatches"] == 8);
  CATCH_CHECK(j["makespan"].get<double>() == 57);
  CATCH_CHECK(j["bubble_ratio"].get<double>() == Approx(3.0 / 19));
  CATCH_REQUIRE(j["per_rank"].size() == 4);
  for (auto& rank : j["per_rank"]) {
    CATCH_CHECK(rank["busy"].get<double>() == 48);
    CATCH_CHECK(rank["idle"].get<double>() == 9);
    CATCH_CHECK(rank.contains("peak_activations"));
  }
  CATCH_CHECK(j["per_rank"][0]["peak_activations"] == 11);
  // Chunks default to the schedule's own default: 2 for interleaved, zbv and dualpipev.
  for (const char* name : {"zbv", "dualpipev"}) {
    auto d = cli({"simulate", "--schedule", name, "--format", "json"});
    CATCH_REQUIRE(d.code == 0);
    CATCH_CHECK(nlohmann::json::parse(d.out)["chunks"] == 2);
  }
}

CATCH_TEST_CASE("simulate writes a Chrome trace and an SVG", "[apps][simulate]") {
  std::string trace = temp_path(".json"), svg = temp_path(".svg");
  auto r = cli({"simulate", "--schedule", "zb-h1", "--stages", "3", "--microbatches", "6", "--trace", trace, "--svg", svg});
  CATCH_REQUIRE(r.code == 0);
  std::ifstream t(trace), s(svg);
  CATCH_REQUIRE(t.good());
  CATCH_REQUIRE(s.good());
  auto j = nlohmann::json::parse(t);
  CATCH_CHECK(j["otherData"]["schedule"] == "zb-h1");
  std::stringstream ss;
  ss << s.rdbuf();
  CATCH_CHECK_THAT(ss.str(), Contains("<svg"));
  CATCH_CHECK_THAT(r.out, Contains("wrote Chrome trace " + trace));
  std::remove(trace.c_str());
  std::remove(svg.c_str());
}

CATCH_TEST_CASE("simulate --costs-from takes a trace's per-stage medians and chooses the plan as train does", "[apps][simulate]") {
  // A trace of zbv on 2 ranks where virtual stages 0 and 3 (rank 0) cost 1.4x: a rank that ran
  // slow, as a train --trace of a noisy step shows.
  const std::string slow = temp_path(".json");
  {
    cost_model c;
    c.forward = {1.4, 1, 1, 1.4};
    c.input_grad = {1.4, 1, 1, 1.4};
    c.weight_grad = {1.05, 0.75, 0.75, 1.05};
    c.backward = {2.45, 1.75, 1.75, 2.45};
    std::ofstream(slow) << render_chrome_trace(simulate(make_schedule("zbv", {2, 8, 2}), c));
  }
  auto r = cli({"simulate", "--schedule", "zbv", "--stages", "2", "--microbatches", "8", "--costs-from", slow});
  CATCH_REQUIRE(r.code == 0);
  CATCH_CHECK_THAT(r.out, Contains("cost F=1.4/1/1/1.4 B=2.45/1.75/1.75/2.45 I=1.4/1/1/1.4 W=1.05/0.75/0.75/1.05"));
  CATCH_CHECK_THAT(r.out, Contains("costs from " + slow + ": the median of each op on each virtual stage over 96 traced actions"));  // 2 x 2 x 8 x (F, I, W)
  CATCH_CHECK_THAT(r.out, Contains("plan chosen for these costs as train chooses after a measured step: "));
  // The plan printed is the one choose_plan picks for these costs against the unit-cost plan.
  auto j = cli({"simulate", "--schedule", "zbv", "--stages", "2", "--microbatches", "8", "--costs-from", slow,
                "--format", "json", "--print-plan"});
  CATCH_REQUIRE(j.code == 0);
  {
    cost_model c = median_costs(read_chrome_trace(std::string(std::istreambuf_iterator<char>(std::ifstream(slow).rdbuf()), {})), 4);
    const auto unit = std::make_shared<const plan>(make_schedule("zbv", {2, 8, 2}));
    const plan_choice want = choose_plan("zbv", 2, 8, unit->place, c, unit);
    const auto doc = nlohmann::json::parse(j.out);
    CATCH_CHECK(doc["plan"] == format_plan(*want.use));
    CATCH_CHECK(doc["makespan"].get<double>() == Approx(want.on_measured.makespan));
  }
  // The trace's 4 virtual stages against a schedule with 2.
  auto bad = cli({"simulate", "--schedule", "1f1b", "--stages", "2", "--costs-from", slow});
  CATCH_CHECK(bad.code != 0);
  CATCH_CHECK_THAT(bad.err, Contains("--costs-from '" + slow + "' has costs for 4 virtual stages, but the schedule has 2 "
                                     "(stages 2 x chunks 1)"));
  auto both = cli({"simulate", "--costs-from", slow, "--cost", "1,2"});
  CATCH_CHECK_THAT(both.err, Contains("--cost excludes --costs-from"));
  auto missing = cli({"simulate", "--costs-from", slow + ".missing"});
  CATCH_CHECK(missing.code == 2);
  CATCH_CHECK(missing.err == "actorpipe simulate: error: --costs-from: cannot read '" + slow + ".missing': no such file\n");
  // A trace of a plan without I and W (1f1b, B of 2 and 3 whole) for zb-h1: I and W half of
  // B each, as --cost F,B takes them (they were 0: the backwards cost nothing).
  {
    cost_model c;
    c.forward = {1, 1}, c.backward = {2, 3}, c.input_grad = {1, 1}, c.weight_grad = {1, 1};
    std::ofstream(slow) << render_chrome_trace(simulate(make_schedule("1f1b", {2, 4, 1}), c));
  }
  auto whole = cli({"simulate", "--schedule", "zb-h1", "--stages", "2", "--microbatches", "4", "--costs-from", slow});
  CATCH_REQUIRE(whole.code == 0);
  CATCH_CHECK_THAT(whole.out, Contains("I=1/1.5 W=1/1.5"));
  CATCH_CHECK_THAT(whole.out, Contains("the trace times the backward of virtual stage 0, 1 only whole (B): I and W are "
                                       "taken as half of it each, as --cost F,B takes them"));
  // A trace without virtual stage 1's backward (a partial or edited trace): one error naming it.
  {
    const plan p = make_schedule("1f1b", {2, 2, 1});
    sim_result partial = simulate(p, cost_model::uniform(1, 2, 1, 1));
    partial.events.erase(std::remove_if(partial.events.begin(), partial.events.end(),
                                        [](const timeline_event& e) {
                                          return e.act.virtual_stage == 1 && e.act.op == op_kind::backward;
                                        }),
                         partial.events.end());
    std::ofstream(slow) << render_chrome_trace(partial);
  }
  auto holes = cli({"simulate", "--stages", "2", "--microbatches", "2", "--costs-from", slow});
  CATCH_CHECK(holes.code == 2);
  CATCH_CHECK_THAT(holes.err, Contains("--costs-from '" + slow + "': virtual stage 1 has no backward time (a trace of a "
                                       "whole step times every op on every virtual stage)"));
  // Timed at 0 is not missing ("has no forward time", it said).
  {
    sim_result zero = simulate(make_schedule("1f1b", {2, 2, 1}), cost_model::uniform(1, 2, 1, 1));
    for (auto& e : zero.events)
      if (e.act.virtual_stage == 0 && e.act.op == op_kind::forward) e.end = e.start;
    std::ofstream(slow) << render_chrome_trace(zero);
  }
  auto zero_dur = cli({"simulate", "--stages", "2", "--microbatches", "2", "--costs-from", slow});
  CATCH_CHECK(zero_dur.code == 2);
  CATCH_CHECK_THAT(zero_dur.err, Contains("--costs-from '" + slow + "': virtual stage 0's forward takes 0 (the median of "
                                          "its \"dur\"): a plan needs every op's cost > 0"));
  // A split backward's W dropped from the trace (W3's): it was read as free.
  {
    sim_result no_w = simulate(make_schedule("zbv", {2, 4, 2}), cost_model::uniform(1, 2, 1, 1));
    no_w.events.erase(std::remove_if(no_w.events.begin(), no_w.events.end(),
                                     [](const timeline_event& e) {
                                       return e.act.virtual_stage == 3 && e.act.op == op_kind::weight_grad;
                                     }),
                      no_w.events.end());
    std::ofstream(slow) << render_chrome_trace(no_w);
  }
  auto no_w = cli({"simulate", "--schedule", "zbv", "--stages", "2", "--microbatches", "4", "--costs-from", slow});
  CATCH_CHECK(no_w.code == 2);
  CATCH_CHECK_THAT(no_w.err, Contains("--costs-from '" + slow + "': virtual stage 3 has I times but no W time (a trace "
                                      "of a whole step times both halves of every split backward)"));
  // Not a trace, and endless: refused at 256 MiB (it read until memory ran out).
  auto endless = cli({"simulate", "--costs-from", "/dev/zero"});
  CATCH_CHECK(endless.code == 2);
  CATCH_CHECK_THAT(endless.err, Contains("--costs-from '/dev/zero' holds more than 256 MiB, more than it reads"));
  // One event a million times longer than the others: refused as --cost refuses such costs.
  {
    sim_result odd = simulate(make_schedule("1f1b", {2, 4, 1}), cost_model::uniform(1, 2, 1, 1));
    for (auto& e : odd.events)
      if (e.act.op == op_kind::forward && e.act.virtual_stage == 0) e.end = e.start + 1e9;
    std::ofstream(slow) << render_chrome_trace(odd);
  }
  auto far = cli({"simulate", "--stages", "2", "--microbatches", "4", "--costs-from", slow});
  CATCH_CHECK(far.code == 2);
  CATCH_CHECK_THAT(far.err, Contains("--costs-from '" + slow + "': its median costs run from 1 to 1000000000, more than "
                                     "1000000 times apart"));
  // A --set key twice: which one was meant is a guess (the last won).
  auto twice = cli({"simulate", "--set", "pp=3", "--set", "pp=4"});
  CATCH_CHECK(twice.code == 2);
  CATCH_CHECK_THAT(twice.err, Contains("--set pp is given 2 times: give it once"));
  std::remove(slow.c_str());
}

CATCH_TEST_CASE("simulate reads a schedule file and checks flags against it", "[apps][simulate]") {
  std::string path = temp_path(".txt");
  {
    std::ofstream f(path);
    f << "# hand-written 2-stage 1F1B\n0: F0.0 F0.1 B0.0 B0.1\n1: F1.0 B1.0 F1.1 B1.1\n";
  }
  auto r = cli({"simulate", "--schedule-file", path, "--print-plan"});
  CATCH_REQUIRE(r.code == 0);
  CATCH_CHECK_THAT(r.out, Contains("stages=2, chunks=1, microbatches=2"));
  CATCH_CHECK_THAT(r.out, Contains("0: F0.0 F0.1 B0.0 B0.1\n1: F1.0 B1.0 F1.1 B1.1\n"));
  auto bad = cli({"simulate", "--schedule-file", path, "--stages", "4"});
  CATCH_CHECK(bad.code == 2);
  CATCH_CHECK(bad.err == "actorpipe simulate: error: --stages=4 but schedule file '" + path + "' has 2\n");
  {
    std::ofstream f(path);
    f << "0: F0.0 B0.0 F0.1 B0.1\n1: F1.1 F1.0 B1.0 B1.1\n";  // deadlocks
  }
  auto dead = cli({"simulate", "--schedule-file", path});
  CATCH_CHECK(dead.code == 2);
  CATCH_CHECK_THAT(dead.err, Contains("deadlock: no rank can proceed"));
  // --format plan writes a file --schedule-file reads back: every schedule, and greedy's order.
  for (const char* name : {"1f1b", "zbv", "greedy"}) {
    CATCH_CAPTURE(name);
    auto plan_text = cli({"simulate", "--schedule", name, "--stages", "2", "--microbatches", "4", "--format", "plan"});
    CATCH_REQUIRE(plan_text.code == 0);
    CATCH_CHECK(plan_text.out.rfind(std::string("# ") + name + ": stages=2, chunks=", 0) == 0);
    std::ofstream(path) << plan_text.out;
    auto back = cli({"simulate", "--schedule-file", path, "--format", "plan"});
    CATCH_REQUIRE(back.code == 0);
    CATCH_CHECK(back.out.substr(back.out.find('\n')) == plan_text.out.substr(plan_text.out.find('\n')));
  }
  // A file name with a line break keeps the comment one line: the plan reads back.
  const std::string odd = path + "\nline.txt", odd_back = path + ".back";
  std::ofstream(odd) << "0: F0.0 F0.1 B0.0 B0.1\n1: F1.0 B1.0 F1.1 B1.1\n";
  auto printed = cli({"simulate", "--schedule-file", odd, "--format", "plan"});
  CATCH_REQUIRE(printed.code == 0);
  std::ofstream(odd_back) << printed.out;
  CATCH_CHECK(cli({"simulate", "--schedule-file", odd_back}).code == 0);
  std::remove(odd.c_str());
  std::remove(odd_back.c_str());
  std::remove(path.c_str());
}

// One request, one answer: a config's batch alone was cut into 8 microbatches by simulate and
// refused by train (with pp > 1 the rules need a microbatch count or size); a microbatch size
// alone, the reverse (train takes 8 of them).
CATCH_TEST_CASE("simulate and train take or refuse a config's batch keys alike", "[apps][simulate][config]") {
  const std::string batch_only = temp_path(".batch.json"), size_only = temp_path(".size.json");
  std::ofstream(batch_only) << R"({"pp": 2, "batch_size": 32})";
  std::ofstream(size_only) << R"({"pp": 2, "microbatch_size": 2})";
  auto refused = cli({"simulate", "--config", batch_only});
  CATCH_CHECK(refused.code == 2);
  CATCH_CHECK(refused.err == "actorpipe simulate: error: pp=2 needs num_microbatches or microbatch_size (config file '" +
                                 batch_only + "')\n");
  auto sized = cli({"simulate", "--config", size_only});
  CATCH_REQUIRE(sized.code == 0);
  CATCH_CHECK_THAT(sized.out, Contains("schedule 1f1b: stages=2, chunks=1, microbatches=8;"));
  CATCH_CHECK_THAT(sized.out, Contains("batch_size=16 = num_microbatches 8 x microbatch_size 2"));
  auto set_size = cli({"simulate", "--stages", "2", "--set", "microbatch_size=3"});
  CATCH_REQUIRE(set_size.code == 0);
  CATCH_CHECK_THAT(set_size.out, Contains("microbatches=8;"));
  // A key typed against the config's other two: refused as train refuses it (it was dropped
  // with a note, and the plan had the config's count).
  const std::string three = temp_path(".three.json");
  std::ofstream(three) << R"({"pp": 2, "batch_size": 8, "num_microbatches": 4, "microbatch_size": 2})";
  auto typed = cli({"simulate", "--config", three, "--set", "microbatch_size=4"});
  CATCH_CHECK(typed.code == 2);
  CATCH_CHECK(typed.err == "actorpipe simulate: error: batch_size=8 (the config's) is not num_microbatches=4 (the config's) x "
                           "--set microbatch_size=4 = 16: give two of the three\n");
  auto flag = cli({"simulate", "--config", three, "--microbatches", "2"});
  CATCH_CHECK(flag.code == 2);
  CATCH_CHECK_THAT(flag.err, Contains("batch_size=8 (the config's) is not --microbatches 2 x microbatch_size=2 (the "
                                      "config's) = 4: give two of the three"));
  CATCH_CHECK(cli({"simulate", "--config", three}).code == 0);  // the config alone keeps its rule
  std::remove(three.c_str());
  std::remove(batch_only.c_str());
  std::remove(size_only.c_str());
  // Through a pipe (--config <(...)): read once, though the request is resolved twice (the
  // second read found it drained, "is empty: a pipe gives its text to one reader").
  const std::string fifo = temp_path(".fifo");
  CATCH_REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  std::thread writer([&] { std::ofstream(fifo) << R"({"pp": 2, "num_microbatches": 2})"; });
  auto piped = cli({"simulate", "--config", fifo});
  writer.join();
  CATCH_CHECK(piped.code == 0);
  CATCH_CHECK_THAT(piped.out, Contains("schedule 1f1b: stages=2, chunks=1, microbatches=2;"));
  std::remove(fifo.c_str());
}

CATCH_TEST_CASE("simulate takes its schedule from a job config, with overrides", "[apps][simulate][config]") {
  const std::string job = std::string(ACTORPIPE_SOURCE_DIR) + "/examples/job.json";
  auto r = cli({"simulate", "--config", job});
  CATCH_REQUIRE(r.code == 0);
  CATCH_CHECK_THAT(r.out, Contains("schedule interleaved: stages=4, chunks=2, microbatches=8"));
  CATCH_CHECK_THAT(r.out, Contains("batch_size=32 = num_microbatches 8 x microbatch_size 4, global_batch_size=32"));
  CATCH_CHECK_THAT(r.out, Contains("bubble ratio  15.79%"));

  // --set and the schedule flags override the file; the batch rules are re-checked.
  auto o = cli({"simulate", "--config", job, "--set", "num_microbatches=16", "--schedule", "zbv", "--format", "json"});
  CATCH_REQUIRE(o.code == 0);
  auto j = nlohmann::json::parse(o.out);
  CATCH_CHECK(j["schedule"] == "zbv");
  CATCH_CHECK(j["microbatches"] == 16);
  CATCH_CHECK_THAT(j["config"][0].get<std::string>(), Contains("num_microbatches 16 x microbatch_size 2"));

  // Both num_microbatches and microbatch_size in a config: num_microbatches wins, and the user
  // is told; one typed against the config's other two must agree (as train takes it).
  const std::string all_three = temp_path(".all-three.json");
  std::ofstream(all_three) << R"({"pp": 4, "batch_size": 32, "num_microbatches": 8, "microbatch_size": 2})";
  auto n = cli({"simulate", "--config", all_three});
  CATCH_REQUIRE(n.code == 0);
  CATCH_CHECK_THAT(n.out, Contains("note: microbatch_size=2 overridden"));
  std::remove(all_three.c_str());
  auto typed = cli({"simulate", "--config", job, "--set", "microbatch_size=2"});
  CATCH_CHECK(typed.code == 2);
  CATCH_CHECK_THAT(typed.err, Contains("batch_size=32 (the config's) is not num_microbatches=8 (the config's) x --set "
                                       "microbatch_size=2 = 16: give two of the three"));

  auto bad = cli({"simulate", "--config", job, "--set", "num_microbatches=12"});
  CATCH_CHECK(bad.code == 2);
  CATCH_CHECK(bad.err == "actorpipe simulate: error: batch_size=32 is not a multiple of num_microbatches=12 (config file '" +
                             job + "', with the flags and --set given over it)\n");
  auto typo = cli({"simulate", "--set", "num_microbatch=4"});
  CATCH_CHECK(typo.code == 2);
  CATCH_CHECK_THAT(typo.err, Contains("unknown config key 'num_microbatch' (did you mean 'num_microbatches'?)"));
  auto sched = cli({"simulate", "--config", job, "--stages", "3"});
  CATCH_CHECK(sched.code == 2);
  CATCH_CHECK_THAT(sched.err, Contains("interleaved needs microbatches to be a multiple of stages: got stages=3"));
}

CATCH_TEST_CASE("simulate --budget shows a dynamic policy's budget, and greedy's default suits several chunks", "[apps][simulate]") {
  auto makespan = [](const std::vector<std::string>& args) {
    auto r = cli(args);
    CATCH_REQUIRE(r.code == 0);
    return nlohmann::json::parse(r.out)["makespan"].get<double>();
  };
  const std::vector<std::string> greedy = {"simulate", "--schedule", "greedy", "-P", "4", "-M", "8", "-V", "2", "--format", "json"};
  auto with_budget = [&](const char* b) {
    auto a = greedy;
    a.insert(a.end(), {"--budget", b});
    return a;
  };
  // stages - rank alone (its old default) let rank 3 hold one microbatch on its first chunk:
  // makespan 143 against interleaved's 57. The default now adds a stage's worth per chunk.
  CATCH_CHECK(makespan(with_budget("1")) == 192);
  CATCH_CHECK(makespan(greedy) == 64);
  CATCH_CHECK(makespan({"simulate", "--schedule", "greedy", "-P", "4", "-M", "8", "--format", "json"}) == 33);  // 1F1B's
  auto refused = cli({"simulate", "--schedule", "1f1b", "--budget", "3"});
  CATCH_CHECK(refused.code == 2);
  CATCH_CHECK_THAT(refused.err, Contains("--budget 3 is for a dynamic policy (--schedule greedy): 1f1b has no budget"));
  CATCH_CHECK_THAT(cli({"simulate", "--schedule", "greedy", "--budget", "-1"}).err,
                   Contains("--budget must be >= 0 (0 = the policy's default): got -1"));
}

CATCH_TEST_CASE("simulate runs the greedy policy and prints the order it chose", "[apps][simulate]") {
  auto r = cli({"simulate", "--schedule", "greedy", "--stages", "4", "--microbatches", "8", "--print-plan"});
  CATCH_REQUIRE(r.code == 0);
  CATCH_CHECK_THAT(r.out, Contains("schedule greedy: stages=4, chunks=1, microbatches=8"));
  // With a 1F1B budget on unit costs, greedy runs 1F1B's order.
  CATCH_CHECK_THAT(r.out, Contains("0: F0.0 F0.1 F0.2 F0.3 B0.0 F0.4 B0.1"));
  CATCH_CHECK_THAT(r.out, Contains("bubble ratio  27.27%"));
}

CATCH_TEST_CASE("simulate --list names every registered schedule", "[apps][simulate]") {
  auto r = cli({"simulate", "--list"});
  CATCH_REQUIRE(r.code == 0);
  for (const char* name : {"gpipe ", "1f1b ", "interleaved ", "zb-h1 ", "zbv ", "dualpipev "}) CATCH_CHECK_THAT(r.out, Contains(name));
}

CATCH_TEST_CASE("bad requests exit non-zero with one clear line on stderr", "[apps][simulate]") {
  struct bad_case {
    std::vector<std::string> args;
    std::string message;
  };
  std::vector<bad_case> cases = {
      {{"simulate", "--schedule", "nope"}, "unknown schedule 'nope'"},
      {{"simulate", "--schedule", "1f1b", "--stages", "4", "--microbatches", "2"},
       "1f1b needs microbatches >= stages: got stages=4, microbatches=2, chunks=1"},
      {{"simulate", "--schedule", "interleaved", "--microbatches", "6"},
       "interleaved needs microbatches to be a multiple of stages"},
      {{"simulate", "--stages", "0"}, "--stages must be >= 1: got 0"},
      {{"simulate", "--chunks", "0"}, "--chunks must be >= 1: got 0"},
      {{"simulate", "--stages", "100000", "--microbatches", "100000"},
       "schedule '1f1b': stages x chunks x microbatches = 100000 x 1 x 100000 = 10000000000 forward passes"},
      {{"simulate", "--schedule", "greedy", "--stages", "4096", "--microbatches", "4096"},
       "policy 'greedy': stages x chunks x microbatches = 4096 x 1 x 4096"},
      {{"simulate", "--cost", "1,2,3"}, "--cost '1,2,3': needs 2 or 4"},
      {{"simulate", "--format", "xml"}, "--format must be text, json or plan, got 'xml'"},
      {{"simulate", "--latency", "-1"}, "--latency must be a number in [0, 1e+100], got -1"},
      {{"simulate", "--latency", "1e200"}, "--latency must be a number in [0, 1e+100], got 1e+200"},
      {{"simulate", "--cost", "1e308,1e308"},
       "--cost '1e308,1e308': F must be a decimal number in (0, 1e+100], got '1e308'"},
      {{"simulate", "--schedule-file", "/nonexistent.txt"}, "cannot read schedule file '/nonexistent.txt'"},
      // Checked before the simulation (a large one's result was lost to a typo in a path).
      {{"simulate", "--trace", "/tmp"}, "--trace '/tmp' is a directory: give a file name"},
      {{"simulate", "--svg", "/nonexistent/dir/x.svg"}, "--svg '/nonexistent/dir/x.svg': the folder '/nonexistent/dir' does not exist"},
      {{"simulate", "--stages", "four"}, "--stages"},
      {{"simulate", "--schedule", "1f1b", "--schedule-file", "x"}, "excludes"},
      {{"simulate", "--bogus"}, "--bogus"},
      {{"frobnicate"}, "unknown command 'frobnicate' (commands: simulate"},
      {{}, "missing command"},
  };
  for (auto& c : cases) {
    auto r = cli(c.args);
    CATCH_CAPTURE(c.message, r.err);
    CATCH_CHECK(r.code == 2);  // refused: bad input, not a failure while running
    CATCH_CHECK_THAT(r.err, Contains(c.message));
    CATCH_CHECK(std::count(r.err.begin(), r.err.end(), '\n') == 1);
    CATCH_CHECK(r.err.rfind("actorpipe", 0) == 0);
  }
}

CATCH_TEST_CASE("the actorpipe binary: help, success and failure exit codes", "[apps][simulate][binary]") {
  auto help = binary("--help");
  CATCH_CHECK(help.code == 0);
  CATCH_CHECK_THAT(help.out, Contains("simulate"));
  auto version = binary("--version");  // it said "missing command"
  CATCH_CHECK(version.code == 0);
  CATCH_CHECK(version.out == "actorpipe " ACTORPIPE_VERSION_STRING "\n");  // core/version.hpp's
  CATCH_CHECK_THAT(version.out, Catch::Matches("actorpipe [0-9]+\\.[0-9]+\\.[0-9]+\n"));
  auto sub_help = binary("simulate --help");
  CATCH_CHECK(sub_help.code == 0);
  CATCH_CHECK_THAT(sub_help.out, Contains("--schedule-file"));
  CATCH_CHECK_THAT(sub_help.out, Contains("Examples:"));
  auto ok = binary("simulate --schedule zbv --stages 2 --microbatches 4");
  CATCH_CHECK(ok.code == 0);
  CATCH_CHECK_THAT(ok.out, Contains("bubble ratio"));
  auto bad = binary("simulate --schedule zbv --chunks 3");
  CATCH_CHECK(bad.code == 2);
  CATCH_CHECK(bad.out.empty());
  CATCH_CHECK(bad.err == "actorpipe simulate: error: zbv needs chunks == 2 (V-shape placement): got stages=4, "
                         "microbatches=8, chunks=3\n");
  // A picture that cannot be written is a failure too, with its reason (exit 2 without one).
  auto no_room = binary("simulate --schedule zbv --stages 2 --microbatches 4 --svg /dev/full");
  CATCH_CHECK(no_room.code == 1);
  CATCH_CHECK(no_room.err == "actorpipe simulate: error: cannot write the SVG timeline to '/dev/full': No space left on "
                             "device\n");
  // A report that cannot be written is a failure, not a silent exit 0.
  auto full = binary("simulate --schedule zbv --stages 2 --microbatches 4 > /dev/full");
  CATCH_CHECK(full.code == 1);
  CATCH_CHECK(full.err == "actorpipe simulate: error: could not write the report to standard output (No space left on "
                          "device)\n");
}

CATCH_TEST_CASE("simulate --cost builds zero-bubble plans for those costs and shows the unit-cost plan beside",
                "[apps][simulate][costs]") {
  auto r = cli({"simulate", "--schedule", "zbv", "--stages", "2", "--microbatches", "8", "--cost", "6,,6,1.5"});
  CATCH_REQUIRE(r.code == 0);
  CATCH_CHECK_THAT(r.out, Contains("plan built for these costs: makespan 222, bubble 2.70% (the unit-cost plan on these "
                                   "costs: makespan 261, bubble 17.24%)"));
  CATCH_CHECK_THAT(r.out, Contains("makespan      222\n"));
  // Unit costs keep the plan of the paper's setting, with nothing to compare.
  auto u = cli({"simulate", "--schedule", "zbv", "--stages", "2", "--microbatches", "8"});
  CATCH_REQUIRE(u.code == 0);
  CATCH_CHECK(u.out.find("plan built for these costs") == std::string::npos);
  // 1f1b does not order by cost: the same plan, nothing to compare.
  auto o = cli({"simulate", "--schedule", "1f1b", "--stages", "2", "--microbatches", "8", "--cost", "6,,6,1.5"});
  CATCH_REQUIRE(o.code == 0);
  CATCH_CHECK(o.out.find("plan built for these costs") == std::string::npos);
}

CATCH_TEST_CASE("simulate --latency is refused where the costs would round away next to it", "[apps][simulate][costs]") {
  // 1e18 + 1 == 1e18: the probe's run exited 0 with rank 1 busy 0 and one F and one B drawn.
  auto huge = cli({"simulate", "--latency", "1e18"});
  CATCH_CHECK(huge.code == 2);
  CATCH_CHECK(huge.out.empty());
  CATCH_CHECK(huge.err == "actorpipe simulate: error: --latency 1e+18 is more than 1000000 times the smallest cost (1): "
                          "the costs would round away next to it; give at most 1000000\n");
  // The limit follows the costs: with every cost 2 or more, 2e6 is allowed, 3e6 is not.
  auto scaled = cli({"simulate", "--cost", "2,4", "--latency", "3e6"});
  CATCH_CHECK(scaled.code == 2);
  CATCH_CHECK_THAT(scaled.err, Contains("--latency 3000000 is more than 1000000 times the smallest cost (2)") &&
                                   Contains("give at most 2000000"));
  CATCH_CHECK(cli({"simulate", "--cost", "2,4", "--latency", "2e6"}).code == 0);
  // The same for a dynamic policy, and for costs from a trace (its smallest median).
  auto greedy = cli({"simulate", "--schedule", "greedy", "--latency", "1e18"});
  CATCH_CHECK(greedy.code == 2);
  CATCH_CHECK_THAT(greedy.err, Contains("--latency 1e+18 is more than 1000000 times the smallest cost (1)"));

  // At the limit every cost still counts: 1f1b on 2 ranks and 2 microbatches, worked out by
  // hand with L = 1e6: rank 1 runs F1.0 [1+L, 2+L] B1.0 [2+L, 4+L] F1.1 [4+L, 5+L] B1.1 [5+L, 7+L],
  // rank 0's B0.0 [4+2L, 6+2L] and B0.1 [7+2L, 9+2L].
  auto edge = cli({"simulate", "--stages", "2", "--microbatches", "2", "--latency", "1e6", "--format", "json"});
  CATCH_REQUIRE(edge.code == 0);
  const auto j = nlohmann::json::parse(edge.out);
  CATCH_CHECK(j["makespan"].get<double>() == 2000009);
  CATCH_CHECK(j["ideal_time"].get<double>() == 6);
  for (const auto& rank : j["per_rank"]) CATCH_CHECK(rank["busy"].get<double>() == 6);
  auto text = cli({"simulate", "--stages", "2", "--microbatches", "2", "--latency", "1e6"});
  CATCH_REQUIRE(text.code == 0);
  CATCH_CHECK_THAT(text.out, Contains("makespan      2000009\n"));  // whole numbers in full
  // Actions of 1 and 2 in a row 2e6 long share columns; the chart says so.
  CATCH_CHECK_THAT(text.out, Contains(" actions are hidden under others: one column is 10471.3 time units here; the SVG "
                                      "and the Chrome trace draw every one)\n"));
  CATCH_CHECK_THAT(text.out, Contains("0     6           2000003"));
  CATCH_CHECK_THAT(text.out, Contains("1     6           2000003"));
}

CATCH_TEST_CASE("simulate --cost takes decimal numbers only, and I and W as parts of B", "[apps][simulate][costs]") {
  // strtod read 0x10 as 16.
  auto hex = cli({"simulate", "--cost", "0x10,1,1,1"});
  CATCH_CHECK(hex.code == 2);
  CATCH_CHECK(hex.err == "actorpipe simulate: error: --cost '0x10,1,1,1': F must be a decimal number in (0, 1e+100], "
                         "got '0x10' (expected F,B,I,W e.g. 1,2,1,1; or F,,I,W; or F,B)\n");
  auto nan = cli({"simulate", "--cost", "1,nan"});
  CATCH_CHECK(nan.code == 2);
  CATCH_CHECK_THAT(nan.err, Contains("--cost '1,nan': B must be a decimal number in (0, 1e+100], got 'nan'"));
  // I and W longer than the B they are parts of: refused, naming them.
  auto parts = cli({"simulate", "--cost", "1,1,2,2"});
  CATCH_CHECK(parts.code == 2);
  CATCH_CHECK(parts.err == "actorpipe simulate: error: --cost '1,1,2,2': I=2 is more than B=1, but I is a part of the "
                           "split B (B is the whole backward; leave B out, F,,I,W, for B = I+W) (expected F,B,I,W e.g. "
                           "1,2,1,1; or F,,I,W; or F,B)\n");
  // Costs too far apart for one simulation.
  auto spread = cli({"simulate", "--cost", "1e18,2,1,1"});
  CATCH_CHECK(spread.code == 2);
  CATCH_CHECK_THAT(spread.err, Contains("F=1e+18 is more than 1000000 times I=1: the smaller costs would round away"));
  // A B other than I + W (a fused backward cheaper than its halves) is simulated, and said.
  auto fused = cli({"simulate", "--stages", "2", "--microbatches", "2", "--cost", "1,1.5,1,1"});
  CATCH_REQUIRE(fused.code == 0);
  CATCH_CHECK(fused.err.empty());
  CATCH_CHECK_THAT(fused.out, Contains("cost F=1 B=1.5 I=1 W=1, send latency 0\nnote: --cost B=1.5 is not I+W = 1+1 = 2: "
                                       "plans that run whole backwards (B) take 1.5 for each, plans that split them "
                                       "(I, W) take 2\n"));
  // Rank 1: F1.0 [1, 2] B1.0 [2, 3.5] F1.1 [3.5, 4.5] B1.1 [4.5, 6]; rank 0's B0.1 [6, 7.5].
  CATCH_CHECK_THAT(fused.out, Contains("makespan      7.5\n"));
  auto json = cli({"simulate", "--cost", "1,1.5,1,1", "--format", "json"});
  CATCH_REQUIRE(json.code == 0);
  CATCH_CHECK_THAT(nlohmann::json::parse(json.out)["config"][0].get<std::string>(), Contains("--cost B=1.5 is not I+W"));
  // B = I + W, given or derived: no note.
  for (const char* same : {"1,2,1,1", "1,,1,1", "1,2"}) {
    auto r = cli({"simulate", "--cost", same});
    CATCH_CAPTURE(same);
    CATCH_CHECK(r.code == 0);
    CATCH_CHECK(r.out.find("note:") == std::string::npos);
  }
}

CATCH_TEST_CASE("simulate --set needs no batch size, and names an unknown schedule first", "[apps][simulate][config]") {
  // simulate has no batch flags: a config without a batch size is a plan request.
  // --set alone starts from what the flags default to (4 stages, 8 microbatches, the
  // schedule's chunks), as train does: it started from pp=1, chunks=1, and a key that has
  // nothing to do with the plan (lr) broke `--schedule zbv --stages 2 -M 4`.
  auto gpipe = cli({"simulate", "--set", "schedule=gpipe"});
  CATCH_REQUIRE(gpipe.code == 0);
  CATCH_CHECK(gpipe.err.empty());
  CATCH_CHECK_THAT(gpipe.out, Contains("schedule gpipe: stages=4, chunks=1, microbatches=8;"));
  CATCH_CHECK_THAT(gpipe.out, Contains("config: pp=4 dp=1 tp=1 (world_size=4), num_microbatches=8 (no batch size given)\n"));
  auto zbv = cli({"simulate", "--schedule", "zbv", "--stages", "2", "-M", "4", "--set", "lr=1e-3"});
  CATCH_REQUIRE(zbv.code == 0);
  CATCH_CHECK_THAT(zbv.out, Contains("schedule zbv: stages=2, chunks=2, microbatches=4;"));
  // A batch size alone is cut as train cuts it (8 microbatches, or the largest of 4, 2, 1).
  auto batch_alone = cli({"simulate", "--set", "batch_size=12"});
  CATCH_REQUIRE(batch_alone.code == 0);
  CATCH_CHECK_THAT(batch_alone.out, Contains("schedule 1f1b: stages=4, chunks=1, microbatches=4;"));
  auto interleaved = cli({"simulate", "--schedule", "interleaved", "--set", "num_microbatches=4"});
  CATCH_REQUIRE(interleaved.code == 0);
  CATCH_CHECK_THAT(interleaved.out, Contains("schedule interleaved: stages=4, chunks=2, microbatches=4;"));
  auto pp3 = cli({"simulate", "--set", "pp=3", "-M", "8"});
  CATCH_REQUIRE(pp3.code == 0);
  CATCH_CHECK_THAT(pp3.out, Contains("schedule 1f1b: stages=3, chunks=1, microbatches=8;"));
  CATCH_CHECK_THAT(pp3.out, Contains("config: pp=3 dp=1 tp=1 (world_size=3), num_microbatches=8 (no batch size given)\n"));
  // --set and the flags are the same keys.
  auto same = cli({"simulate", "--set", "pp=3", "--set", "num_microbatches=8"});
  CATCH_REQUIRE(same.code == 0);
  CATCH_CHECK_THAT(same.out, Contains("schedule 1f1b: stages=3, chunks=1, microbatches=8;"));
  auto greedy = cli({"simulate", "--set", "schedule=greedy", "--set", "pp=2", "-M", "4"});
  CATCH_REQUIRE(greedy.code == 0);
  CATCH_CHECK_THAT(greedy.out, Contains("schedule greedy: stages=2, chunks=1, microbatches=4;"));

  // A config file without a batch: 8 microbatches, as train takes it (it was refused: "pp=3
  // needs num_microbatches"); and a plan has no model to cut (16 stages of the default GPT's 8
  // layers were refused).
  const std::string no_count = temp_path(".pp3.json");
  std::ofstream(no_count) << "{\"pp\": 3}";
  auto none = cli({"simulate", "--config", no_count});
  CATCH_CHECK(none.code == 0);
  CATCH_CHECK_THAT(none.out, Contains("schedule 1f1b: stages=3, chunks=1, microbatches=8;"));
  auto deep = cli({"simulate", "--set", "pp=16", "--set", "num_microbatches=16"});
  CATCH_CHECK(deep.code == 0);
  CATCH_CHECK_THAT(deep.out, Contains("schedule 1f1b: stages=16, chunks=1, microbatches=16;"));
  // An unknown schedule is the error, not a batch rule.
  for (const std::vector<std::string>& args : {std::vector<std::string>{"simulate", "--set", "schedule=zzz"},
                                               {"simulate", "--set", "schedule=zzz", "--set", "pp=3"},
                                               {"simulate", "--schedule", "zzz", "--set", "pp=3", "-M", "8"}}) {
    auto r = cli(args);
    CATCH_CHECK(r.code == 2);
    CATCH_CHECK_THAT(r.err, Catch::StartsWith("actorpipe simulate: error: schedule: unknown schedule 'zzz' (known: "));
    CATCH_CHECK(std::count(r.err.begin(), r.err.end(), '\n') == 1);
  }
  // A batch size given gets the batch rules, as train would.
  auto batch = cli({"simulate", "--set", "pp=3", "--set", "batch_size=12", "-M", "8"});
  CATCH_CHECK(batch.code == 2);
  CATCH_CHECK(batch.err == "actorpipe simulate: error: batch_size=12 is not a multiple of num_microbatches=8\n");
  auto sized = cli({"simulate", "--set", "pp=3", "--set", "batch_size=24", "-M", "8"});
  CATCH_REQUIRE(sized.code == 0);
  CATCH_CHECK_THAT(sized.out, Contains("batch_size=24 = num_microbatches 8 x microbatch_size 3, global_batch_size=24"));
}

CATCH_TEST_CASE("simulate names a directory or a missing file given for a file", "[apps][simulate]") {
  const std::string dir = temp_path(".d");
  std::filesystem::create_directories(dir);
  auto from_dir = cli({"simulate", "--costs-from", dir});
  CATCH_CHECK(from_dir.code == 2);
  CATCH_CHECK(from_dir.err == "actorpipe simulate: error: --costs-from '" + dir +
                                  "' is a directory: give the trace file (train --trace)\n");
  auto missing = cli({"simulate", "--costs-from", dir + "/none.json"});
  CATCH_CHECK(missing.code == 2);
  CATCH_CHECK(missing.err == "actorpipe simulate: error: --costs-from: cannot read '" + dir + "/none.json': no such file\n");
  std::filesystem::remove_all(dir);
}

CATCH_TEST_CASE("simulate --config refuses a key given twice", "[apps][simulate][config]") {
  const std::string path = temp_path(".json");
  std::ofstream(path) << "{\"pp\": 2, \"num_microbatches\": 4, \"pp\": 3}";
  auto r = cli({"simulate", "--config", path});
  CATCH_CHECK(r.code == 2);
  CATCH_CHECK(r.out.empty());
  CATCH_CHECK(r.err == "actorpipe simulate: error: config file '" + path + "': key 'pp' is given twice (give each key once)\n");
  // A config's text with control bytes: a NUL cut the error line (and the list of known
  // schedules after it), an ESC reached the terminal. Refused as such, quoted as JSON.
  std::ofstream(path) << "{\"schedule\": \"zbv\\u0000x\\u001b[2J\"}";
  auto control = cli({"simulate", "--config", path});
  CATCH_CHECK(control.code == 2);
  CATCH_CHECK(control.err == "actorpipe simulate: error: config file '" + path +
                                 "': config key 'schedule' must be a string without control characters, got "
                                 "\"zbv\\u0000x\\u001b[2J\"\n");
  CATCH_CHECK(control.err.find('\0') == std::string::npos);
  CATCH_CHECK(control.err.find('\x1b') == std::string::npos);
  std::ofstream(path) << "{\"pp\": 2, \"num_microbatches\": 4}";
  auto ok = cli({"simulate", "--config", path});
  CATCH_REQUIRE(ok.code == 0);
  CATCH_CHECK_THAT(ok.out, Contains("schedule 1f1b: stages=2, chunks=1, microbatches=4;"));
  std::remove(path.c_str());
}

// An output under an input's name replaced what the user wrote, and two outputs under one name
// kept one of them; both are refused before anything runs.
CATCH_TEST_CASE("simulate refuses an output that is an input or another output", "[apps][simulate][errors]") {
  const std::string plan = temp_path(".plan.txt");
  std::ofstream(plan) << "0: F0.0 B0.0\n";
  auto over_input = cli({"simulate", "--schedule-file", plan, "--trace", plan});
  CATCH_CHECK(over_input.code == 2);
  CATCH_CHECK_THAT(over_input.err, Contains("--trace '" + plan + "' is the --schedule-file this run reads ('" + plan +
                                            "'): writing it would replace it; give the output another name"));
  std::ifstream kept(plan);
  CATCH_CHECK(std::string(std::istreambuf_iterator<char>(kept), {}) == "0: F0.0 B0.0\n");
  const std::string out = temp_path(".out");
  auto twice = cli({"simulate", "--trace", out, "--svg", out});
  CATCH_CHECK(twice.code == 2);
  CATCH_CHECK_THAT(twice.err, Contains("--trace '" + out + "' is also --svg ('" + out + "'): each output needs a file of its own"));
  CATCH_CHECK(cli({"simulate", "--trace", "/dev/null", "--svg", "/dev/null"}).code == 0);  // a device, twice
  std::remove(plan.c_str());
}

CATCH_TEST_CASE("cli_main without a program name is one error, exit 2", "[apps][errors]") {
  // A library caller (or an exec with an empty argv): CLI11 threw std::length_error.
  std::ostringstream out, err;
  const char* const none[] = {nullptr};
  CATCH_CHECK(actorpipe::cli_main(0, none, out, err) == 2);
  CATCH_CHECK(err.str() == "actorpipe: error: no program name (argv[0]) to parse the command line from\n");
  CATCH_CHECK(out.str().empty());
}

CATCH_TEST_CASE("simulate, help and a flag before the command: a lost report or an unknown flag is said", "[apps][errors]") {
  // A reader that went away killed simulate by SIGPIPE (141, no word); help on /dev/full exited 0.
  const std::string err = temp_path(".err");
  const std::string piped = "bash -c '" + std::string(ACTORPIPE_BIN) + " simulate -P 32 -M 256 --format plan 2>" + err +
                            " | head -c 10 >/dev/null; exit ${PIPESTATUS[0]}'";
  const int status = std::system(piped.c_str());
  CATCH_CHECK(WEXITSTATUS(status) == 1);
  CATCH_CHECK_THAT(read_text(err), Contains("actorpipe simulate: error: could not write the report to standard output"));
  const int help = std::system((std::string(ACTORPIPE_BIN) + " --help >/dev/full 2>" + err).c_str());
  CATCH_CHECK(WEXITSTATUS(help) == 1);
  CATCH_CHECK_THAT(read_text(err), Contains("actorpipe: error: could not write to standard output"));
  auto flag = cli({"-V"});
  CATCH_CHECK(flag.code == 2);
  CATCH_CHECK_THAT(flag.err, Contains("unknown flag '-V' (actorpipe's own are --help and --version"));
  std::remove(err.c_str());
}
