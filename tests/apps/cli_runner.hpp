// Test helpers for the command line: run cli_main in-process and capture its streams, and
// make unique temporary paths.
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

inline std::string temp_path(const std::string& suffix) {
  static int counter = 0;
  return (std::filesystem::temp_directory_path() /
          ("actorpipe_test_" + std::to_string(getpid()) + "_" + std::to_string(counter++) + suffix))
      .string();
}

}  // namespace actorpipe::testing
