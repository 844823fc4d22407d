// Benchmark: the real GPT on 2 pipeline ranks, 2 processes x 1 rank (UCX between them) against
// 1 process x 2 ranks (in-process hand-off), same job, rounds interleaved so both layouts see
// the same machine. Reports tokens/s (steps after the first two) and the ratio per round.
// Target: 2-process / 1-process >= 0.95.
//
//   bench/process_layout_throughput path/to/actorpipe [rounds=3] [steps=6]
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace {

std::vector<std::string> job(const std::string& metrics, int steps) {
  return {"train", "--stages", "2", "--layers", "8", "--hidden", "256", "--heads", "4", "--seq-len", "128",
          "--microbatch-size", "4", "--microbatches", "16", "--steps", std::to_string(steps), "--schedule", "1f1b",
          "--metrics", metrics};
}

int run(const std::string& bin, std::vector<std::string> args) {
  std::fflush(stdout);  // or the child's copy of the buffer is printed again
  pid_t pid = fork();
  if (pid == 0) {
    freopen("/dev/null", "w", stdout);
    freopen("/dev/null", "w", stderr);
    std::vector<char*> argv{const_cast<char*>(bin.c_str())};
    for (auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    execv(bin.c_str(), argv.data());
    _exit(127);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

// Tokens/s over the steps after the first two (allocation and connection warm-up).
double tokens_per_s(const std::string& metrics) {
  std::ifstream f(metrics);
  std::string line;
  double tokens = 0, seconds = 0;
  while (std::getline(f, line)) {
    auto j = nlohmann::json::parse(line);
    if (j["step"].get<int>() < 2) continue;
    tokens += j["tokens_per_s"].get<double>() * j["seconds"].get<double>();
    seconds += j["seconds"].get<double>();
  }
  return seconds > 0 ? tokens / seconds : 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: process_layout_throughput path/to/actorpipe [rounds=3] [steps=6]\n");
    return 2;
  }
  const std::string bin = argv[1];
  const int rounds = argc > 2 ? std::atoi(argv[2]) : 3;
  const int steps = argc > 3 ? std::atoi(argv[3]) : 6;
  if (!getenv("UCX_TLS")) setenv("UCX_TLS", "tcp,self,posix,sysv,cma", 1);
  const std::string metrics = "/tmp/process_layout_" + std::to_string(getpid()) + ".jsonl";
  std::printf("GPT 8 layers, hidden 256, seq 128, 16 microbatches of 4, 1f1b on 2 ranks (1 thread each), UCX_TLS=%s\n",
              getenv("UCX_TLS"));
  std::printf("round  1 process x 2 ranks  2 processes x 1 rank  ratio (2 proc / 1 proc)\n");
  std::vector<double> ratios;
  for (int r = 0; r < rounds; ++r) {
    if (run(bin, job(metrics, steps)) != 0) {
      std::fprintf(stderr, "the one-process run failed\n");
      return 1;
    }
    const double one = tokens_per_s(metrics);
    std::vector<std::string> launch = {"launch", "--nproc-per-node", "2", "--master-port", std::to_string(29400 + r), "--"};
    auto j = job(metrics, steps);
    launch.insert(launch.end(), j.begin(), j.end());
    if (run(bin, launch) != 0) {
      std::fprintf(stderr, "the two-process run failed\n");
      return 1;
    }
    const double two = tokens_per_s(metrics);
    ratios.push_back(two / one);
    std::printf("%-5d  %12.0f tok/s     %12.0f tok/s      %.3f\n", r + 1, one, two, two / one);
  }
  std::sort(ratios.begin(), ratios.end());
  std::printf("median ratio %.3f (target >= 0.95)\n", ratios[ratios.size() / 2]);
  std::remove(metrics.c_str());
  return 0;
}
