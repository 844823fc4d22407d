// Test helpers for the command line: run cli_main in-process and capture its streams, and
// make unique temporary paths (in a folder of the process's, removed when it exits).
#pragma once

#include <filesystem>
#include <sstream>
#include <string>
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

}  // namespace actorpipe::testing
