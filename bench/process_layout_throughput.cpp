// Benchmark: the real GPT on 2 pipeline ranks, 2 processes x 1 rank (UCX between them) against
// 1 process x 2 ranks (in-process hand-off), same job, rounds interleaved so both layouts see
// the same machine. Reports tokens/s (steps after the first two) and the ratio per round.
// Target: 2-process / 1-process >= 0.95.
//
//   bench/process_layout_throughput path/to/actorpipe [rounds=3] [steps=6] [port=29400]
// The two-process runs use ports port, port+1, ... (one a round). It prints the train run's
// compute line (LibTorch, BLAS, kernels); a run that fails is shown with its last lines.
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench/bench_args.hpp"
#include "core/median.hpp"

namespace {

std::vector<std::string> job(const std::string& metrics, int steps) {
  return {"train", "--stages", "2", "--layers", "8", "--hidden", "256", "--heads", "4", "--seq-len", "128",
          "--microbatch-size", "4", "--microbatches", "16", "--steps", std::to_string(steps), "--schedule", "1f1b",
          "--metrics", metrics};
}

// Runs `bin args`; its output (stdout and stderr) goes to `output`. The exit status, 128 + signal.
int run(const std::string& bin, std::vector<std::string> args, const std::string& output) {
  std::fflush(stdout);  // or the child's copy of the buffer is printed again
  pid_t pid = fork();
  if (pid < 0) return 127;
  if (pid == 0) {
    if (!freopen(output.c_str(), "w", stdout) || dup2(fileno(stdout), STDERR_FILENO) < 0) _exit(127);
    std::vector<char*> argv{const_cast<char*>(bin.c_str())};
    for (auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    execv(bin.c_str(), argv.data());
    std::fprintf(stderr, "cannot run %s: %s\n", bin.c_str(), std::strerror(errno));
    _exit(127);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

// The lines of `path` that start with `prefix`, or its last `last` lines where prefix is empty.
std::string lines_of(const std::string& path, const std::string& prefix, size_t last = 12) {
  std::ifstream f(path);
  std::vector<std::string> kept;
  for (std::string line; std::getline(f, line);)
    if (prefix.empty() || line.rfind(prefix, 0) == 0) kept.push_back(line);
  if (prefix.empty() && kept.size() > last) kept.erase(kept.begin(), kept.end() - static_cast<long>(last));
  std::string text;
  for (const auto& line : kept) text += line + "\n";
  return text;
}

// Tokens/s over the steps after the first two (allocation and connection warm-up).
double tokens_per_s(const std::string& metrics) {
  std::ifstream f(metrics);
  std::string line;
  double tokens = 0, seconds = 0;
  while (std::getline(f, line)) {
    auto j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_discarded() || !j.contains("step") || !j.contains("tokens_per_s") || !j.contains("seconds")) return 0;
    if (j["step"].get<int>() < 2) continue;
    tokens += j["tokens_per_s"].get<double>() * j["seconds"].get<double>();
    seconds += j["seconds"].get<double>();
  }
  return seconds > 0 ? tokens / seconds : 0;
}

}  // namespace

int main(int argc, char** argv) {
  const char* usage =
      "usage: process_layout_throughput path/to/actorpipe [rounds=3 (1-1000)] [steps=6 (3-1000)] [port=29400 (1024-)]\n"
      "  2 ranks as 2 processes (actorpipe launch, UCX between them) against 1 process, rounds interleaved;\n"
      "  the two-process run of round r uses --master-port port+r-1\n";
  if (actorpipe::bench::asked_for_help(argc, argv)) {
    std::printf("%s", usage);
    return 0;
  }
  if (argc < 2 || argc > 5) {
    std::fprintf(stderr, "process_layout_throughput: %s\n%s",
                 argc < 2 ? "the actorpipe program to run is missing" : "at most 4 arguments (the program, rounds, steps, port)",
                 usage);
    return 2;
  }
  const std::string bin = argv[1];
  if (access(bin.c_str(), X_OK) != 0) {
    std::fprintf(stderr, "process_layout_throughput: '%s' is no program to run: %s\n", bin.c_str(), std::strerror(errno));
    return 2;
  }
  using actorpipe::bench::whole_number;
  const long long rounds = argc > 2 ? whole_number(argv[2], 1, 1000) : 3;
  const long long steps = argc > 3 ? whole_number(argv[3], 3, 1000) : 6;  // tokens/s from step 2 on
  // Round r's two processes take port + r - 1: the last round's must be a port too.
  const long long last_port = 65535 - (rounds > 0 ? rounds - 1 : 0);
  const long long port = argc > 4 ? whole_number(argv[4], 1024, last_port) : 29400;
  if (rounds < 0 || steps < 0 || port < 0) {
    const std::string why =
        rounds < 0  ? "rounds must be a whole number from 1 to 1000, got '" + std::string(argv[2]) + "'"
        : steps < 0 ? "steps must be a whole number from 3 to 1000, got '" + std::string(argv[3]) + "'"
                    : "port must be a whole number from 1024 to " + std::to_string(last_port) + " (with " +
                          std::to_string(rounds) + " rounds on ports port..port+" + std::to_string(rounds - 1) +
                          "), got '" + std::string(argv[4]) + "'";
    std::fprintf(stderr, "process_layout_throughput: %s\n%s", why.c_str(), usage);
    return 2;
  }
  const actorpipe::bench::load_watch load;
  if (!getenv("UCX_TLS")) setenv("UCX_TLS", "tcp,self,posix,sysv,cma", 1);
  const std::string stem = "/tmp/process_layout_" + std::to_string(getpid());
  const std::string metrics = stem + ".jsonl", output = stem + ".out";
  std::printf("GPT 8 layers, hidden 256, seq 128, 16 microbatches of 4, 1f1b on 2 ranks (1 thread each), UCX_TLS=%s\n",
              getenv("UCX_TLS"));
  std::vector<double> ratios;
  for (long r = 0; r < rounds; ++r) {
    const auto failed = [&](const char* which, int code) {
      std::fprintf(stderr, "the %s run failed (exit %d); its last lines:\n%s", which, code, lines_of(output, "").c_str());
      std::remove(metrics.c_str());
      std::remove(output.c_str());
      return 1;
    };
    // It exited 0 but wrote no steps to time (not actorpipe's train, or its --metrics unread).
    const auto no_metrics = [&](const char* which) {
      std::fprintf(stderr, "the %s run wrote no metrics of steps after the second to %s; its last lines:\n%s", which,
                   metrics.c_str(), lines_of(output, "").c_str());
      std::remove(metrics.c_str());
      std::remove(output.c_str());
      return 1;
    };
    if (const int code = run(bin, job(metrics, static_cast<int>(steps)), output); code != 0)
      return failed("one-process", code);
    if (r == 0) {  // what it ran on, as train says it
      std::printf("%s", lines_of(output, "compute: ").c_str());
      std::printf("round  1 process x 2 ranks  2 processes x 1 rank  ratio (2 proc / 1 proc)\n");
    }
    const double one = tokens_per_s(metrics);
    if (!(one > 0)) return no_metrics("one-process");
    std::vector<std::string> launch = {"launch", "--nproc-per-node", "2", "--master-port", std::to_string(port + r), "--"};
    auto j = job(metrics, static_cast<int>(steps));
    launch.insert(launch.end(), j.begin(), j.end());
    if (const int code = run(bin, launch, output); code != 0) return failed("two-process", code);
    const double two = tokens_per_s(metrics);
    if (!(two > 0)) return no_metrics("two-process");
    ratios.push_back(two / one);
    std::printf("%-5ld  %12.0f tok/s     %12.0f tok/s      %.3f\n", r + 1, one, two, two / one);
  }
  std::printf("median ratio %.3f (target >= 0.95)\n", actorpipe::median(ratios));
  load.say();
  std::remove(metrics.c_str());
  std::remove(output.c_str());
  return 0;
}
