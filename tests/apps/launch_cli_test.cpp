// `actorpipe launch`: the one-line errors through cli_main, the real binary starting simulate
// processes, and run_launch with /bin/sh as the program to see each process's environment and
// to drive the failure, grace, SIGTERM/SIGKILL and signal-forwarding paths.
#include <catch2/catch.hpp>

#include <algorithm>
#include <array>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <fcntl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <sys/wait.h>
#include <unistd.h>

#include "apps/launch_command.hpp"
#include "core/signal_name.hpp"
#include "tests/apps/cli_runner.hpp"
#include "tests/apps/process_runner.hpp"

using namespace actorpipe;
using Catch::Contains;
using namespace actorpipe::testing;

namespace {

// Sets (or, with nullptr, unsets) an environment variable for one test and restores it after.
class env_var {
 public:
  env_var(std::string name, const char* value) : name_(std::move(name)) {
    if (const char* old = std::getenv(name_.c_str())) old_ = old;
    if (value)
      setenv(name_.c_str(), value, 1);
    else
      unsetenv(name_.c_str());
  }
  ~env_var() {
    if (old_)
      setenv(name_.c_str(), old_->c_str(), 1);
    else
      unsetenv(name_.c_str());
  }

 private:
  std::string name_;
  std::optional<std::string> old_;
};

// A run_launch request whose processes run `sh -c script` (script sees $LOCAL_RANK etc.).
launch_options shell_job(int nproc, const std::string& script) {
  launch_options o;
  o.nproc_per_node = nproc;
  o.program = "/bin/sh";
  o.command = {"-c", script};
  return o;
}

std::map<std::string, std::string> read_env_file(const std::string& path) {
  std::ifstream f(path);
  CATCH_REQUIRE(f.good());
  std::map<std::string, std::string> env;
  for (std::string line; std::getline(f, line);) {
    const auto eq = line.find('=');
    if (eq != std::string::npos) env[line.substr(0, eq)] = line.substr(eq + 1);
  }
  return env;
}

bool has_hex_run(const std::string& s, size_t length) {
  size_t run = 0;
  for (char c : s) {
    run = std::isxdigit(static_cast<unsigned char>(c)) ? run + 1 : 0;
    if (run >= length) return true;
  }
  return false;
}

// True when this process has no child left, running or zombie.
bool no_children_left() { return waitpid(-1, nullptr, WNOHANG) == -1 && errno == ECHILD; }

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

CATCH_TEST_CASE("launch: each bad request is one error line naming the flag, exit 2", "[apps][launch]") {
  env_var no_token("ACTORPIPE_JOB_TOKEN", nullptr);
  struct bad_case {
    std::vector<std::string> args;
    std::string line;  // the whole stderr
  };
  const std::vector<std::string> cmd = {"--", "simulate"};
  auto with = [&](std::vector<std::string> a) {
    a.insert(a.begin(), "launch");
    a.insert(a.end(), cmd.begin(), cmd.end());
    return a;
  };
  const std::vector<bad_case> cases = {
      {with({"--nproc-per-node", "0"}), "--nproc-per-node=0 must be >= 1"},
      {with({"--nproc-per-node", "-2"}), "--nproc-per-node=-2 must be >= 1"},
      {with({"--nproc-per-node", "2", "--nnodes", "0"}), "--nnodes=0 must be >= 1"},
      {with({"--nproc-per-node", "2", "--nnodes", "2", "--node-rank", "2"}),
       "--node-rank=2 must be in [0, 2) for --nnodes=2"},
      {with({"--nproc-per-node", "2", "--node-rank", "-1"}), "--node-rank=-1 must be in [0, 1) for --nnodes=1"},
      {with({"--nproc-per-node", "2", "--master-port", "0"}), "--master-port=0 must be in 1..65535"},
      {with({"--nproc-per-node", "2", "--master-port", "65536"}), "--master-port=65536 must be in 1..65535"},
      {with({"--nproc-per-node", "2", "--grace", "-1"}), "--grace=-1 must be a number of seconds in [0, 1e+09]"},
      {with({"--nproc-per-node", "2", "--stop-timeout", "nan"}), "--stop-timeout=nan must be a number of seconds in [0, 1e+09]"},
      // A wait past ~292 years overflows the clock: no longer an instant timeout.
      {with({"--nproc-per-node", "2", "--grace", "1e308"}), "--grace=1e+308 must be a number of seconds in [0, 1e+09]"},
      {{"launch", "--nproc-per-node", "2"},
       "missing the command to run: put it after --, e.g. actorpipe launch --nproc-per-node 2 -- train --stages 2"},
      {{"launch", "--nproc-per-node", "2", "--"},
       "missing the command to run: put it after --, e.g. actorpipe launch --nproc-per-node 2 -- train --stages 2"},
      {{"launch", "--nproc-per-node", "2", "--", "launch", "--nproc-per-node", "2", "--", "simulate"},
       "the command after -- cannot be launch itself: give the command each process runs, e.g. -- train --stages 2"},
      {{"launch", "--nproc-per-node", "2", "--", "simulte"}, "unknown command 'simulte' after -- (commands: simulate"},
      {{"launch", "--", "simulate"}, "--nproc-per-node is required"},
      {{"launch", "--nproc-per-node", "two", "--", "simulate"}, "--nproc-per-node"},
      {{"launch", "--nproc-per-node", "2", "simulate", "--stages", "2"},
       "unknown flag '--stages'; --stages is a flag of train: put it after --, with the command"},
      // A train flag that sounds like launch's: named (CLI11 listed the command's words, last first).
      {{"launch", "--nproc-per-node", "2", "--join-timeout", "3", "--", "train", "--steps", "1"},
       "unknown flag '--join-timeout'; --join-timeout is a flag of train: put it after --, with the command"},
      {{"launch", "--nproc-per-node", "2", "--bogus", "5", "--", "train"}, "unknown flag '--bogus'"},
  };
  for (const auto& c : cases) {
    auto r = cli(c.args);
    CATCH_CAPTURE(c.line, r.err);
    CATCH_CHECK(r.code == 2);
    CATCH_CHECK(r.out.empty());
    CATCH_CHECK(r.err.rfind("actorpipe launch: error: ", 0) == 0);
    CATCH_CHECK_THAT(r.err, Contains(c.line));
    CATCH_CHECK(std::count(r.err.begin(), r.err.end(), '\n') == 1);
  }
  CATCH_CHECK(cli(with({"--nproc-per-node", "0"})).err == "actorpipe launch: error: --nproc-per-node=0 must be >= 1\n");
  // The command's own flags are parsed once, before any process starts: a typo is one line as
  // the command says it (it was one per process, among launch's lines).
  auto typo = cli({"launch", "--nproc-per-node", "2", "--", "simulate", "--stagez", "2"});
  CATCH_CHECK(typo.code == 2);
  CATCH_CHECK(typo.err == "actorpipe simulate: error: unknown flag '--stagez' (did you mean --stages?)\n");
  auto value = cli({"launch", "--nproc-per-node", "2", "--", "simulate", "--stages", "x"});
  CATCH_CHECK(value.code == 2);
  CATCH_CHECK_THAT(value.err, Catch::StartsWith("actorpipe simulate: error: --stages"));
  CATCH_CHECK(std::count(value.err.begin(), value.err.end(), '\n') == 1);

  // More processes than pipes for their output: refused before anything starts (under a soft
  // limit of 256 open files, set here for this test alone).
  struct rlimit before {};
  CATCH_REQUIRE(getrlimit(RLIMIT_NOFILE, &before) == 0);
  struct rlimit low = before;
  low.rlim_cur = std::min<rlim_t>(256, before.rlim_max);
  CATCH_REQUIRE(setrlimit(RLIMIT_NOFILE, &low) == 0);
  auto r = cli(with({"--nproc-per-node", "100"}));
  CATCH_REQUIRE(setrlimit(RLIMIT_NOFILE, &before) == 0);
  CATCH_CHECK(r.code == 2);
  CATCH_CHECK(r.out.empty());
  CATCH_CHECK(r.err == "actorpipe launch: error: --nproc-per-node=100 needs 432 open files for the processes' output, more "
                       "than this process may open (" + std::to_string(low.rlim_cur) + ", ulimit -n)\n");
}

CATCH_TEST_CASE("launch: several nodes need a job token from the environment, and a strong one",
                "[apps][launch]") {
  {
    env_var no_token("ACTORPIPE_JOB_TOKEN", nullptr);
    auto r = cli({"launch", "--nproc-per-node", "2", "--nnodes", "2", "--node-rank", "1", "--", "simulate"});
    CATCH_CHECK(r.code == 2);
    CATCH_CHECK(r.err ==
                "actorpipe launch: error: --nnodes=2 needs one job token shared by every node and ACTORPIPE_JOB_TOKEN "
                "is not set: make one (openssl rand -hex 32) and run export ACTORPIPE_JOB_TOKEN=<that token> on every "
                "node before actorpipe launch\n");
  }
  env_var weak("ACTORPIPE_JOB_TOKEN", "tooshort");
  auto r = cli({"launch", "--nproc-per-node", "2", "--", "simulate"});
  CATCH_CHECK(r.code == 2);
  CATCH_CHECK(r.err == "actorpipe launch: error: ACTORPIPE_JOB_TOKEN must be at least 16 characters (it has 8)\n");
  CATCH_CHECK(r.err.find("tooshort") == std::string::npos);
}

CATCH_TEST_CASE("launch --help explains the flags with a one-node and a two-node example", "[apps][launch]") {
  auto r = cli({"launch", "--help"});
  CATCH_CHECK(r.code == 0);
  for (const char* text : {"--nproc-per-node", "--nnodes", "--node-rank", "--master-addr", "--master-port", "--grace",
                           "actorpipe launch --nproc-per-node 4 -- train",
                           "--nnodes 2 --node-rank 0", "--nnodes 2 --node-rank 1", "export ACTORPIPE_JOB_TOKEN=",
                           "RANK = node-rank x nproc-per-node + LOCAL_RANK", "SIGKILL"})
    CATCH_CHECK_THAT(r.out, Contains(text));
  CATCH_CHECK_THAT(cli({"--help"}).out, Contains("launch"));
}

CATCH_TEST_CASE("the actorpipe binary launches two simulate processes and exits 0", "[apps][launch][binary]") {
  env_var no_token("ACTORPIPE_JOB_TOKEN", nullptr);
  auto r = binary("launch --nproc-per-node 2 -- simulate --stages 2 --microbatches 4");
  CATCH_CAPTURE(r.err);
  CATCH_CHECK(r.code == 0);
  size_t runs = 0;
  for (size_t at = r.out.find("schedule 1f1b: stages=2, chunks=1, microbatches=4"); at != std::string::npos;
       at = r.out.find("schedule 1f1b: stages=2", at + 1))
    ++runs;
  CATCH_CHECK(runs == 2);
  // Whole lines, each from one process and saying which.
  std::istringstream lines(r.out);
  for (std::string line; std::getline(lines, line);) {
    CATCH_CAPTURE(line);
    CATCH_CHECK((line.rfind("[p0] ", 0) == 0 || line.rfind("[p1] ", 0) == 0));
  }
  CATCH_CHECK_THAT(r.out, Contains("[p0] schedule 1f1b: stages=2, chunks=1, microbatches=4"));
  CATCH_CHECK_THAT(r.out, Contains("[p1] schedule 1f1b: stages=2, chunks=1, microbatches=4"));
  CATCH_CHECK(r.err == "actorpipe launch: starting 2 processes on node 0 of 1: ranks 0-1 of world size 2, master "
                       "127.0.0.1:29500, a new job token; each runs: " +
                           std::filesystem::canonical(ACTORPIPE_BIN).string() +
                           " simulate --stages 2 --microbatches 4\n");
  CATCH_CHECK_FALSE(has_hex_run(r.out + r.err, 16));  // the new token is never printed
}

CATCH_TEST_CASE("a failing process makes launch exit with its code and name it", "[apps][launch][binary]") {
  env_var no_token("ACTORPIPE_JOB_TOKEN", nullptr);
  auto r = binary("launch --nproc-per-node 2 --grace 2 -- simulate --stages 0");
  CATCH_CAPTURE(r.err);
  CATCH_CHECK(r.code == 2);
  CATCH_CHECK(r.out.empty());
  // Both fail on their own; whichever is reaped first is the one launch names first.
  CATCH_CHECK_THAT(r.err, Contains("actorpipe launch: process 0 (local 0) exited with code 2\n"));
  CATCH_CHECK_THAT(r.err, Contains("actorpipe launch: process 1 (local 1) exited with code 2\n"));
  // (The processes' own error lines share launch's stderr and may interleave, so they are not checked.)
}

CATCH_TEST_CASE("each process gets its rank, the world, the master and one shared job token", "[apps][launch]") {
  const std::string dir = temp_path("_env");
  std::filesystem::create_directory(dir);
  env_var stale_rank("RANK", "99");  // what launch inherited must not leak through
  env_var stale_world("WORLD_SIZE", "99");

  CATCH_SECTION("one node: a new token, never printed (unset, or set but empty as train reads it)") {
    for (const char* unset : {static_cast<const char*>(nullptr), ""}) {
      CATCH_CAPTURE(unset == nullptr);
      env_var no_token("ACTORPIPE_JOB_TOKEN", unset);
      auto o = shell_job(2, "env > " + dir + "/env.$LOCAL_RANK");
      o.master_addr = "10.1.2.3";
      o.master_port = 1234;
      std::ostringstream log;
      CATCH_REQUIRE(run_launch(o, log) == 0);
      auto e0 = read_env_file(dir + "/env.0"), e1 = read_env_file(dir + "/env.1");
      const std::map<std::string, std::string> want0 = {{"RANK", "0"},        {"WORLD_SIZE", "2"},
                                                        {"LOCAL_RANK", "0"},  {"LOCAL_WORLD_SIZE", "2"},
                                                        {"MASTER_ADDR", "10.1.2.3"}, {"MASTER_PORT", "1234"}};
      for (const auto& [key, value] : want0) {
        CATCH_CAPTURE(key);
        CATCH_CHECK(e0[key] == value);
        CATCH_CHECK(e1[key] == (key == "RANK" || key == "LOCAL_RANK" ? "1" : value));
      }
      const std::string token = e0["ACTORPIPE_JOB_TOKEN"];
      CATCH_CHECK(token.size() == 64);
      CATCH_CHECK(e1["ACTORPIPE_JOB_TOKEN"] == token);
      const char* own = std::getenv("ACTORPIPE_JOB_TOKEN");  // launch's own environment is untouched
      CATCH_CHECK((unset == nullptr ? own == nullptr : own != nullptr && std::string(own).empty()));
      CATCH_CHECK(log.str().find(token) == std::string::npos);
      CATCH_CHECK_THAT(log.str(), Contains("a new job token"));
      CATCH_CHECK_THAT(log.str(), Contains("master 10.1.2.3:1234"));
    }
  }
  CATCH_SECTION("second of two nodes: ranks after node 0's, the token from the environment") {
    const std::string token = "0123456789abcdef-shared-by-all-nodes";
    env_var shared("ACTORPIPE_JOB_TOKEN", token.c_str());
    auto o = shell_job(2, "env > " + dir + "/env.$LOCAL_RANK");
    o.nnodes = 2;
    o.node_rank = 1;
    std::ostringstream log;
    CATCH_REQUIRE(run_launch(o, log) == 0);
    for (int i = 0; i < 2; ++i) {
      auto e = read_env_file(dir + "/env." + std::to_string(i));
      CATCH_CHECK(e["RANK"] == std::to_string(2 + i));
      CATCH_CHECK(e["WORLD_SIZE"] == "4");
      CATCH_CHECK(e["LOCAL_RANK"] == std::to_string(i));
      CATCH_CHECK(e["LOCAL_WORLD_SIZE"] == "2");
      CATCH_CHECK(e["MASTER_ADDR"] == "127.0.0.1");
      CATCH_CHECK(e["MASTER_PORT"] == "29500");
      CATCH_CHECK(e["ACTORPIPE_JOB_TOKEN"] == token);
    }
    CATCH_CHECK(log.str().find(token) == std::string::npos);
    CATCH_CHECK(log.str().find("0123456789abcdef") == std::string::npos);
    CATCH_CHECK_THAT(log.str(), Contains("on node 1 of 2: ranks 2-3 of world size 4"));
    CATCH_CHECK_THAT(log.str(), Contains("job token from ACTORPIPE_JOB_TOKEN"));
  }
  CATCH_CHECK(no_children_left());
  std::filesystem::remove_all(dir);
}

CATCH_TEST_CASE("after a failure a hanging process gets the grace period, then SIGTERM", "[apps][launch]") {
  env_var no_token("ACTORPIPE_JOB_TOKEN", nullptr);
  auto o = shell_job(2, "if [ \"$LOCAL_RANK\" = 1 ]; then exit 3; fi; exec /bin/sleep 30");
  o.grace_s = 0.5;
  std::ostringstream log;
  const auto t0 = std::chrono::steady_clock::now();
  CATCH_CHECK(run_launch(o, log) == 3);
  const double took = seconds_since(t0);
  CATCH_CAPTURE(log.str());
  CATCH_CHECK(took >= 0.5);
  CATCH_CHECK(took < 0.5 + 3);
  CATCH_CHECK_THAT(log.str(), Contains("actorpipe launch: process 1 (local 1) exited with code 3\n"));
  CATCH_CHECK_THAT(log.str(), Contains("giving the other 1 running process 0.5 s to exit"));
  CATCH_CHECK_THAT(log.str(), Contains("sending SIGTERM to process 0 (local 0)\n"));
  CATCH_CHECK(log.str().find("process 0 (local 0) was killed") == std::string::npos);  // stopped by launch: expected
  CATCH_CHECK(no_children_left());
}

CATCH_TEST_CASE("a process that ignores SIGTERM gets SIGKILL and a signal death is 128 + signal", "[apps][launch]") {
  env_var no_token("ACTORPIPE_JOB_TOKEN", nullptr);
  auto o = shell_job(2, "if [ \"$LOCAL_RANK\" = 1 ]; then sleep 0.2; kill -9 $$; fi; trap '' TERM; exec /bin/sleep 30");
  o.grace_s = 0.2;
  o.kill_after_s = 0.5;
  std::ostringstream log;
  const auto t0 = std::chrono::steady_clock::now();
  CATCH_CHECK(run_launch(o, log) == 128 + 9);
  const double took = seconds_since(t0);
  CATCH_CAPTURE(log.str());
  CATCH_CHECK(took >= 0.2 + 0.2 + 0.5);
  CATCH_CHECK(took < 0.9 + 3);
  CATCH_CHECK_THAT(log.str(), Contains("actorpipe launch: process 1 (local 1) was killed by signal 9\n"));
  CATCH_CHECK_THAT(log.str(), Contains("sending SIGTERM to process 0 (local 0)\n"));
  CATCH_CHECK_THAT(log.str(), Contains("0.5 s after being told to stop, sending SIGKILL to process 0 (local 0)\n"));
  CATCH_CHECK(no_children_left());
}

CATCH_TEST_CASE("SIGTERM sent to launch is passed on to every process", "[apps][launch]") {
  env_var no_token("ACTORPIPE_JOB_TOKEN", nullptr);
  const std::string mark = temp_path(".term");
  // Process 1 signals launch (its parent); process 0 records the SIGTERM launch passes on.
  auto o = shell_job(2, "if [ \"$LOCAL_RANK\" = 1 ]; then sleep 0.3; kill -TERM $PPID; exec /bin/sleep 30; fi; "
                        "trap 'kill $! 2>/dev/null; echo TERM > " + mark + "; exit 0' TERM; /bin/sleep 30 & wait");
  std::ostringstream log;
  const auto t0 = std::chrono::steady_clock::now();
  CATCH_CHECK(run_launch(o, log) == 128 + 15);
  CATCH_CAPTURE(log.str());
  CATCH_CHECK(seconds_since(t0) < 0.3 + 3);
  CATCH_CHECK_THAT(log.str(), Contains("got SIGTERM, passing it on to process 0 (local 0), process 1 (local 1)"));
  std::ifstream f(mark);
  std::string got;
  f >> got;
  CATCH_CHECK(got == "TERM");
  std::remove(mark.c_str());
  CATCH_CHECK(no_children_left());
}

namespace {

// A 2-process job whose every attempt appends "RESTART_COUNT RANK" to `seen`, then process 1
// exits `code` while process 0 would run on (launch stops it).
launch_options failing_job(const std::string& seen, int code, int max_restarts) {
  auto o = shell_job(2, "echo \"$ACTORPIPE_RESTART_COUNT $RANK\" >> " + seen + "; if [ \"$LOCAL_RANK\" = 1 ]; then exit " +
                            std::to_string(code) + "; fi; exec /bin/sleep 30");
  o.grace_s = 0.1;
  o.max_restarts = max_restarts;
  return o;
}

// The lines failing_job's processes wrote, one per process and attempt.
std::multiset<std::string> attempts_seen(const std::string& seen) {
  std::ifstream f(seen);
  std::multiset<std::string> lines;
  for (std::string line; std::getline(f, line);) lines.insert(line);
  return lines;
}

}  // namespace

CATCH_TEST_CASE("launch with max restarts starts a failed job again, telling each attempt its count, and gives up with the history",
                "[apps][launch][restart]") {
  env_var no_token("ACTORPIPE_JOB_TOKEN", nullptr);
  const std::string seen = temp_path(".attempts");
  // Every attempt fails: process 1 exits 3; process 0 would run on and is stopped by launch.
  auto o = failing_job(seen, 3, 2);
  std::ostringstream log;
  CATCH_CHECK(run_launch(o, log) == 3);
  CATCH_CAPTURE(log.str());
  CATCH_CHECK_THAT(log.str(), Contains("attempt 1 failed (process 1 (local 1) exited with code 3); restarting the job "
                                       "(restart 1 of 2): train starts again from step 0, as it has no --save-dir to "
                                       "resume from"));
  CATCH_CHECK_THAT(log.str(), Contains("restart 1 of 2: starting 2 processes again (ACTORPIPE_RESTART_COUNT=1)"));
  CATCH_CHECK_THAT(log.str(), Contains("attempt 2 failed (process 1 (local 1) exited with code 3); restarting the job "
                                       "(restart 2 of 2)"));
  CATCH_CHECK_THAT(log.str(), Contains("giving up after 2 restarts (--max-restarts 2); the job failed 3 times:\n"
                                       "  attempt 1: process 1 (local 1) exited with code 3 after "));
  CATCH_CHECK_THAT(log.str(), Contains("\n  attempt 3: process 1 (local 1) exited with code 3 after "));
  CATCH_CHECK(log.str().find("attempt 3 failed") == std::string::npos);
  // Each attempt ran both processes, told its restart count.
  CATCH_CHECK(attempts_seen(seen) == std::multiset<std::string>{"0 0", "0 1", "1 0", "1 1", "2 0", "2 1"});
  std::remove(seen.c_str());
  CATCH_CHECK(no_children_left());
}

CATCH_TEST_CASE("launch does not restart a job whose process was refused (exit 2), as it would be refused again",
                "[apps][launch][restart]") {
  env_var no_token("ACTORPIPE_JOB_TOKEN", nullptr);
  const std::string seen = temp_path(".refused");
  auto o = failing_job(seen, 2, 3);
  std::ostringstream log;
  CATCH_CHECK(run_launch(o, log) == 2);
  CATCH_CAPTURE(log.str());
  CATCH_CHECK_THAT(log.str(), Contains("attempt 1 failed (process 1 (local 1) exited with code 2); not restarting: exit "
                                       "code 2 means the command was refused (its flags, config, input files or "
                                       "checkpoint, a job that cannot form: the master port taken, a wrong job "
                                       "token or world size; or a model that fails its first step the same way in "
                                       "every run: its process's error says which), and a restart would be refused "
                                       "the same way"));
  CATCH_CHECK(log.str().find("restart 1") == std::string::npos);
  // The other process (sleeping 30 s) gets the grace period, at most 2 s (this job's is 0.1 s;
  // the multi-process test of a taken master port pins the 2 s against --grace 60).
  CATCH_CHECK_THAT(log.str(), Contains("a process was refused (exit 2): giving the other 1 running process 0.1 s to exit, then "
                                       "stopping them"));
  CATCH_CHECK_THAT(log.str(), Contains("still running after the 0.1 s grace period, sending SIGTERM to process 0 (local 0)"));
  CATCH_CHECK(attempts_seen(seen) == std::multiset<std::string>{"0 0", "0 1"});  // one attempt
  std::remove(seen.c_str());
  CATCH_CHECK(no_children_left());
}

CATCH_TEST_CASE("launch continues a stopped process it sends SIGTERM, so that it can exit before the SIGKILL",
                "[apps][launch]") {
  // A process stopped (SIGSTOP) acts on no SIGTERM: launch waited out the SIGKILL for it, saying
  // it was "still running".
  env_var no_token("ACTORPIPE_JOB_TOKEN", nullptr);
  auto o = shell_job(2, "if [ \"$LOCAL_RANK\" = 1 ]; then sleep 0.5; exit 3; fi; kill -STOP $$; exec /bin/sleep 30");
  o.grace_s = 0.1;
  o.kill_after_s = 20;
  std::ostringstream log;
  const auto t0 = std::chrono::steady_clock::now();
  CATCH_CHECK(run_launch(o, log) == 3);
  CATCH_CAPTURE(log.str());
  CATCH_CHECK_THAT(log.str(), Contains("sending SIGTERM to process 0 (local 0) (it was stopped: continued, so that it "
                                       "can exit)"));
  CATCH_CHECK(log.str().find("SIGKILL") == std::string::npos);
  CATCH_CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(15));
  CATCH_CHECK(no_children_left());
}

CATCH_TEST_CASE("launch with max restarts: a job that fails once and then succeeds exits 0, and a stop launch is told is never restarted",
                "[apps][launch][restart]") {
  env_var no_token("ACTORPIPE_JOB_TOKEN", nullptr);
  for (const int sig : {SIGINT, SIGTERM}) {
    // A process ended by SIGINT or SIGTERM itself (a second Ctrl-C to it, or one before its
    // handler is in place), not by launch: asked for, so not restarted (it was, from step 0).
    CATCH_CAPTURE(sig);
    auto o = shell_job(2, "if [ \"$LOCAL_RANK\" = 1 ]; then trap - INT TERM; kill -" + std::to_string(sig) +
                              " $$; fi; exec /bin/sleep 30");
    o.max_restarts = 3;
    o.grace_s = 0.1;
    std::ostringstream log;
    CATCH_CHECK(run_launch(o, log) == 128 + sig);
    CATCH_CAPTURE(log.str());
    CATCH_CHECK_THAT(log.str(), Contains("attempt 1 failed (process 1 (local 1) was killed by signal " + std::to_string(sig) +
                                         "); not restarting: the job stopped on the " + signal_name(sig) +
                                         " one of its processes was sent"));
    CATCH_CHECK(log.str().find("restart 1") == std::string::npos);
    CATCH_CHECK(no_children_left());
  }
  {
    auto o = shell_job(2, "if [ \"$ACTORPIPE_RESTART_COUNT\" = 0 ] && [ \"$LOCAL_RANK\" = 1 ]; then kill -9 $$; fi; exit 0");
    o.max_restarts = 3;
    std::ostringstream log;
    CATCH_CHECK(run_launch(o, log) == 0);
    CATCH_CAPTURE(log.str());
    CATCH_CHECK_THAT(log.str(), Contains("attempt 1 failed (process 1 (local 1) was killed by signal 9); restarting the "
                                         "job (restart 1 of 3)"));
    CATCH_CHECK(log.str().find("restart 2") == std::string::npos);
    CATCH_CHECK(log.str().find("giving up") == std::string::npos);
  }
  {
    // Process 1 sends launch SIGTERM: the job stops, and is not started again.
    auto o = shell_job(2, "if [ \"$LOCAL_RANK\" = 1 ]; then sleep 0.3; kill -TERM $PPID; fi; exec /bin/sleep 30");
    o.max_restarts = 3;
    o.stop_timeout_s = 1;
    std::ostringstream log;
    CATCH_CHECK(run_launch(o, log) == 128 + 15);
    CATCH_CAPTURE(log.str());
    CATCH_CHECK_THAT(log.str(), Contains("got SIGTERM, passing it on"));
    CATCH_CHECK(log.str().find("restart") == std::string::npos);
  }
  {
    auto o = shell_job(1, "true");
    o.max_restarts = -1;
    std::ostringstream log;
    CATCH_CHECK_THROWS_WITH(run_launch(o, log), "--max-restarts=-1 must be >= 0");
  }
  CATCH_CHECK(no_children_left());
}

CATCH_TEST_CASE("run_launch refuses a program it cannot run and starts nothing", "[apps][launch]") {
  auto o = shell_job(2, "true");
  o.program = "/nonexistent/actorpipe";
  std::ostringstream log;
  try {
    run_launch(o, log);
    CATCH_FAIL("no error");
  } catch (const std::runtime_error& e) {
    CATCH_CHECK(std::string(e.what()) == "cannot run '/nonexistent/actorpipe': No such file or directory");
  }
  CATCH_CHECK(log.str().empty());
}

// Output: every line of every process, prefixed with its process index.

namespace {

// A shell job whose processes' stdout and stderr land in two files.
struct captured_job {
  launch_options opt;
  std::string out_path = temp_path(".out"), err_path = temp_path(".err");
  captured_job(int nproc, const std::string& script) : opt(shell_job(nproc, script)) {
    opt.out_fd = open(out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    opt.err_fd = open(err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  }
  ~captured_job() {
    close(opt.out_fd);
    close(opt.err_fd);
    std::remove(out_path.c_str());
    std::remove(err_path.c_str());
  }
  std::string out() const { return read_whole(out_path); }
  std::string err() const { return read_whole(err_path); }
  static std::string read_whole(const std::string& path) {
    std::ifstream f(path);
    std::stringstream s;
    s << f.rdbuf();
    return s.str();
  }
};

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

}  // namespace

// A program launch may run (executable) that the system cannot: "cannot run 'x'" said not why.
CATCH_TEST_CASE("launch says why the system would not run a program it could start", "[apps][launch]") {
  env_var no_token("ACTORPIPE_JOB_TOKEN", nullptr);
  const std::string program = temp_path(".not-a-program");
  std::ofstream(program) << std::string("no interpreter line\0and not ELF", 31);
  CATCH_REQUIRE(chmod(program.c_str(), 0755) == 0);
  captured_job job(1, "");
  job.opt.program = program;
  job.opt.command = {"train"};
  std::ostringstream log;
  CATCH_CHECK(run_launch(job.opt, log) == 127);
  CATCH_CHECK_THAT(job.err(), Contains("[p0] actorpipe launch: cannot run '" + program + "': Exec format error\n"));
  // A script whose interpreter is missing: "No such file" of a file that is there.
  std::ofstream(program) << "#!/nonexistent/interpreter\n";
  captured_job script(1, "");
  script.opt.program = program;
  script.opt.command = {"train"};
  CATCH_CHECK(run_launch(script.opt, log) == 127);
  CATCH_CHECK_THAT(script.err(), Contains("[p0] actorpipe launch: cannot run '" + program +
                                          "': No such file or directory (the interpreter its first line, #!, names)\n"));
  std::remove(program.c_str());
}

CATCH_TEST_CASE("launch prefixes each line of each process with its index, on stdout and stderr", "[apps][launch]") {
  env_var no_token("ACTORPIPE_JOB_TOKEN", nullptr);
  // Process 1 also writes a line of its own log ("[p1 r2-3] ..."): that prefix stays alone.
  captured_job job(2,
                   "echo \"out $RANK\"; echo \"err $RANK\" >&2; "
                   "if [ \"$RANK\" = 1 ]; then echo '[p1 r2-3] actorpipe: joined' >&2; echo '[p10] not mine'; fi; "
                   "printf 'no newline at the end'");
  std::ostringstream log;
  CATCH_REQUIRE(run_launch(job.opt, log) == 0);
  auto out = lines_of(job.out()), err = lines_of(job.err());
  std::sort(out.begin(), out.end());
  std::sort(err.begin(), err.end());
  CATCH_CHECK(out == std::vector<std::string>{"[p0] no newline at the end", "[p0] out 0", "[p1] [p10] not mine",
                                               "[p1] no newline at the end", "[p1] out 1"});
  CATCH_CHECK(err == std::vector<std::string>{"[p0] err 0", "[p1 r2-3] actorpipe: joined", "[p1] err 1"});
  CATCH_CHECK(job.out().back() == '\n');
  CATCH_CHECK_THAT(log.str(), Contains("actorpipe launch: starting 2 processes"));
  CATCH_CHECK(no_children_left());
}

CATCH_TEST_CASE("launch exits 1 when the processes' output cannot be written, as train does, its reader gone too",
                "[apps][launch]") {
  env_var no_token("ACTORPIPE_JOB_TOKEN", nullptr);
  captured_job job(2, "echo the summary");
  close(job.opt.out_fd);
  job.opt.out_fd = open("/dev/full", O_WRONLY);  // a full disk: the report is lost (launch said 0)
  std::ostringstream log;
  CATCH_CHECK(run_launch(job.opt, log) == 1);
  CATCH_CHECK_THAT(log.str(), Contains("actorpipe launch: error: the processes' output could not be written (standard "
                                       "output: No space left on device)"));
  int ends[2];
  CATCH_REQUIRE(pipe(ends) == 0);
  close(ends[0]);  // `| head` that has read what it wanted
  close(job.opt.out_fd);
  job.opt.out_fd = ends[1];
  std::ostringstream piped;
  CATCH_CHECK(run_launch(job.opt, piped) == 1);  // it said 0: the report lost without a word
  CATCH_CHECK_THAT(piped.str(), Contains("actorpipe launch: error: the processes' output could not be written (standard "
                                         "output: Broken pipe)"));
}

CATCH_TEST_CASE("a huge line, a process dying mid-line or a pipe held open do not hang launch", "[apps][launch]") {
  env_var no_token("ACTORPIPE_JOB_TOKEN", nullptr);
  // Process 0: 200000 bytes without a newline, then a line. Process 1: half a line, then
  // SIGKILL. Both leave a background sleep holding their output pipes open.
  captured_job job(2,
                   "(exec /bin/sleep 5 &); "
                   "if [ \"$RANK\" = 0 ]; then head -c 200000 /dev/zero | tr '\\0' x; echo; echo after; exit 0; fi; "
                   "printf 'half a line'; kill -9 $$");
  job.opt.grace_s = 10;  // process 0 ends on its own
  std::ostringstream log;
  const auto t0 = std::chrono::steady_clock::now();
  CATCH_CHECK(run_launch(job.opt, log) == 128 + 9);
  CATCH_CHECK(seconds_since(t0) < 3);
  const auto out = lines_of(job.out());
  size_t xs = 0, pieces = 0;
  for (const auto& line : out)
    if (line.rfind("[p0] x", 0) == 0) {
      ++pieces;
      CATCH_CHECK(line.size() <= 5 + 64 * 1024);
      xs += static_cast<size_t>(std::count(line.begin(), line.end(), 'x'));
    }
  CATCH_CHECK(xs == 200000);
  CATCH_CHECK(pieces == 4);  // 3 x 64 KiB + the rest
  CATCH_CHECK(std::find(out.begin(), out.end(), "[p0] after") != out.end());
  CATCH_CHECK(std::find(out.begin(), out.end(), "[p1] half a line") != out.end());
  CATCH_CHECK_THAT(log.str(), Contains("actorpipe launch: process 1 (local 1) was killed by signal 9\n"));
  CATCH_CHECK(no_children_left());
}

CATCH_TEST_CASE("on a terminal a process's progress line is redrawn below the other lines", "[apps][launch]") {
  env_var no_token("ACTORPIPE_JOB_TOKEN", nullptr);
  const std::string dir = temp_path("_progress");
  std::filesystem::create_directory(dir);
  // Process 0 draws "step 1", process 1 then writes a line, then process 0 ends its progress
  // line with "step 2" and a newline. The marks order them.
  captured_job job(2, "if [ \"$RANK\" = 0 ]; then echo \"$ACTORPIPE_PROGRESS_TERMINAL\" > " + dir +
                          "/env; printf '\\rstep 1' >&2; touch " + dir + "/drawn; "
                          "while [ ! -e " + dir + "/written ]; do sleep 0.01; done; printf '\\rstep 2\\n' >&2; "
                          "else while [ ! -e " + dir + "/drawn ]; do sleep 0.01; done; echo other >&2; touch " +
                          dir + "/written; fi");
  job.opt.terminal = true;
  std::ostringstream log;
  CATCH_REQUIRE(run_launch(job.opt, log) == 0);
  const std::string clear = "\r\033[K";
  CATCH_CHECK(job.err() == clear + "[p0] step 1" +                   // drawn
                               clear + "[p1] other\n" +               // a line above it
                               clear + "[p0] step 1" +                // drawn again
                               clear + "[p0] step 2\n");              // its final state stays
  std::ifstream env(dir + "/env");
  std::string value;
  env >> value;
  CATCH_CHECK(value == "1");  // the processes know they may redraw
  std::filesystem::remove_all(dir);
  CATCH_CHECK(no_children_left());
}

CATCH_TEST_CASE("launch and train refuse a bad --log-level in one line naming it", "[apps][launch][log]") {
  auto r = cli({"launch", "--log-level", "loud", "--nproc-per-node", "2", "--", "simulate"});
  CATCH_CHECK(r.code == 2);
  CATCH_CHECK(r.err == "actorpipe launch: error: --log-level=loud must be one of trace, debug, info, warn, error, off\n");
  {
    env_var bad("ACTORPIPE_LOG_LEVEL", "chatty");
    r = cli({"launch", "--nproc-per-node", "2", "--", "simulate"});
    CATCH_CHECK(r.code == 2);
    CATCH_CHECK(r.err ==
                "actorpipe launch: error: ACTORPIPE_LOG_LEVEL=chatty must be one of trace, debug, info, warn, error, off\n");
  }
  r = cli({"launch", "--log-file", "/nonexistent-dir/launch.log", "--nproc-per-node", "2", "--", "simulate"});
  CATCH_CHECK(r.code == 2);
  CATCH_CHECK(r.err == "actorpipe launch: error: --log-file=/nonexistent-dir/launch.log cannot be opened for appending: "
                       "No such file or directory\n");
  auto help = cli({"launch", "--help"});
  CATCH_CHECK_THAT(help.out, Contains("--log-level"));
  CATCH_CHECK_THAT(help.out, Contains("--log-file"));
  CATCH_CHECK_THAT(help.out, Contains("'[p1] ...'"));
}

CATCH_TEST_CASE("the actorpipe binary: launch's lines obey --log-level, and --log-file gets every line",
                "[apps][launch][binary][log]") {
  env_var no_token("ACTORPIPE_JOB_TOKEN", nullptr);
  auto quiet = binary("launch --log-level warn --nproc-per-node 2 -- simulate --stages 2 --microbatches 4");
  CATCH_CHECK(quiet.code == 0);
  CATCH_CHECK(quiet.err.empty());  // the "starting" line is info

  const std::string file = temp_path(".launch.log");
  auto r = binary("launch --log-file " + file + " --nproc-per-node 2 -- simulate --stages 2 --microbatches 4");
  CATCH_CHECK(r.code == 0);
  CATCH_CHECK_THAT(r.err, Contains("actorpipe launch: starting 2 processes"));  // still on the terminal
  const std::string logged = read_text(file);
  CATCH_CAPTURE(logged);
  CATCH_CHECK_THAT(logged, Contains(" info: actorpipe launch: starting 2 processes on node 0 of 1"));
  CATCH_CHECK_THAT(logged, Contains(" info: [p0] schedule 1f1b: stages=2, chunks=1, microbatches=4"));
  CATCH_CHECK_THAT(logged, Contains(" info: [p1] schedule 1f1b: stages=2, chunks=1, microbatches=4"));
  std::remove(file.c_str());
  // launch's --log-level filters its own lines, not its processes' (at warn the file lost them
  // all, the error that said why the job failed included); theirs keep the level they said.
  auto failing = binary("launch --log-level warn --log-file " + file +
                        " --nproc-per-node 2 -- simulate --stages 2 --microbatches 4 --cost 0,1");
  CATCH_CHECK(failing.code == 2);
  const std::string kept = read_text(file);
  CATCH_CAPTURE(kept);
  CATCH_CHECK_THAT(kept, Contains(" error: [p0] actorpipe simulate: error: --cost '0,1': F must be"));
  CATCH_CHECK(kept.find("starting 2 processes") == std::string::npos);  // launch's own info line: filtered
  std::remove(file.c_str());
}

CATCH_TEST_CASE("launch --log-file keeps train's progress lines out, as train's own --log-file does",
                "[apps][launch][binary][log]") {
  // A line a step went in (500 of a 500-step job's 520 lines).
  env_var no_token("ACTORPIPE_JOB_TOKEN", nullptr);
  const std::string file = temp_path(".launch-train.log");
  auto r = binary("launch --log-file " + file + " --nproc-per-node 2 --master-port " + std::to_string(free_port()) +
                  " -- train --stages 2 --layers 2 --hidden 16 --heads 2 --seq-len 8 --microbatches 2 "
                  "--microbatch-size 2 --steps 3");
  CATCH_CHECK(r.code == 0);
  CATCH_CHECK_THAT(r.err, Contains("[p0] step 3/3 ["));  // still on the terminal
  const std::string logged = read_text(file);
  CATCH_CAPTURE(logged);
  CATCH_CHECK(logged.find("step 1/3 [") == std::string::npos);
  CATCH_CHECK(logged.find("step 3/3 [") == std::string::npos);
  CATCH_CHECK_THAT(logged, Contains(" info: [p0] final loss "));
  std::remove(file.c_str());
}

CATCH_TEST_CASE("launch whose reader goes away exits 1, not by SIGPIPE", "[apps][launch][binary]") {
  // Its own last lines, written after the attempt (SIGPIPE was the default again), killed it:
  // 141 and no word. The processes still get the default SIGPIPE.
  env_var no_token("ACTORPIPE_JOB_TOKEN", nullptr);
  const std::string piped = "bash -c '" + std::string(ACTORPIPE_BIN) +
                            " launch --nproc-per-node 2 -- simulate -P 32 -M 256 --format plan 2>&1 | head -c 10 "
                            ">/dev/null; exit ${PIPESTATUS[0]}'";
  const int status = std::system(piped.c_str());
  CATCH_CHECK(WIFEXITED(status));
  CATCH_CHECK(WEXITSTATUS(status) == 1);
}
