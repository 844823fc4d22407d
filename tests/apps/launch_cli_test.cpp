// `actorpipe launch`: the one-line errors through cli_main, the real binary starting simulate
// processes, and run_launch with /bin/sh as the program to see each process's environment and
// to drive the failure, grace, SIGTERM/SIGKILL and signal-forwarding paths.
#include <catch2/catch.hpp>

#include <algorithm>
#include <array>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>
#include <sys/wait.h>
#include <unistd.h>

#include "apps/launch_command.hpp"
#include "tests/apps/cli_runner.hpp"

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

// Runs the built binary through the shell; returns exit status, stdout and stderr.
cli_run binary(const std::string& args) {
  const std::string err_file = temp_path(".err");
  const std::string cmd = std::string(ACTORPIPE_BIN) + " " + args + " 2>" + err_file;
  FILE* pipe = popen(cmd.c_str(), "r");
  CATCH_REQUIRE(pipe != nullptr);
  std::string out;
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), pipe)) > 0) out.append(buf.data(), n);
  const int status = pclose(pipe);
  std::ifstream ef(err_file);
  std::stringstream es;
  es << ef.rdbuf();
  std::remove(err_file.c_str());
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out, es.str()};
}

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
      {with({"--nproc-per-node", "2", "--grace", "-1"}), "--grace=-1 must be a finite number of seconds >= 0"},
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
       "--stages (the command to run and its flags go after --)"},
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

  CATCH_SECTION("one node: a new token, never printed") {
    env_var no_token("ACTORPIPE_JOB_TOKEN", nullptr);
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
    CATCH_CHECK(std::getenv("ACTORPIPE_JOB_TOKEN") == nullptr);  // launch's own environment is untouched
    CATCH_CHECK(log.str().find(token) == std::string::npos);
    CATCH_CHECK_THAT(log.str(), Contains("a new job token"));
    CATCH_CHECK_THAT(log.str(), Contains("master 10.1.2.3:1234"));
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
