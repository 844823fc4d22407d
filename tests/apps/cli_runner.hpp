// Test helpers for the command line: run cli_main in-process and capture its streams, and
// make unique temporary paths (in a folder of the process's, removed when it exits).
#pragma once

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <sys/wait.h>
#include <unistd.h>
#include <vector>

#include "apps/cli.hpp"

namespace actorpipe::testing {

struct cli_run {
  int code;
  std::string out, err;
};

inline cli_run cli(std::vector<std::string> args) {
  args.insert(args.begin(), "actorpipe");
  std::vector<const char*> argv;
  for (auto& a : args) argv.push_back(a.c_str());
  std::ostringstream out, err;
  int code = cli_main(static_cast<int>(argv.size()), argv.data(), out, err);
  return {code, out.str(), err.str()};
}

// One folder per test process for every path temp_path hands out, removed with all it holds
// when the process exits (by the process that made it, not by a forked child).
class test_folder {
 public:
  test_folder()
      : owner_(getpid()), path_(std::filesystem::temp_directory_path() / ("actorpipe_test_" + std::to_string(owner_))) {
    std::filesystem::create_directories(path_);
  }
  ~test_folder() {
    std::error_code ignored;
    if (getpid() == owner_) std::filesystem::remove_all(path_, ignored);
  }
  const std::filesystem::path& path() const { return path_; }

 private:
  pid_t owner_;
  std::filesystem::path path_;
};

inline std::string temp_path(const std::string& suffix) {
  static test_folder folder;
  static int counter = 0;
  return (folder.path() / ("t" + std::to_string(counter++) + suffix)).string();
}

#ifdef ACTORPIPE_BIN
// Runs the built binary through the shell (for what ends its own process); returns the exit
// status, stdout and stderr.
inline cli_run binary(const std::string& args) {
  const std::string err_file = temp_path(".err");
  const std::string cmd = std::string(ACTORPIPE_BIN) + " " + args + " 2>" + err_file;
  FILE* pipe = popen(cmd.c_str(), "r");
  if (pipe == nullptr) throw std::runtime_error("popen failed: " + cmd);
  std::string out;
  char buf[4096];
  std::size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, pipe)) > 0) out.append(buf, n);
  const int status = pclose(pipe);
  std::ifstream ef(err_file);
  std::stringstream es;
  es << ef.rdbuf();
  std::remove(err_file.c_str());
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out, es.str()};
}
#endif

}  // namespace actorpipe::testing
