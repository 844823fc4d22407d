// Output files against each other and against the files a command reads: two outputs under one
// name left one of them (`--metrics x --save-final x` kept the weights, and the summary said
// both were written), and an output under an input's name replaced what the user wrote (a
// --schedule-file overwritten by --trace).
#pragma once

#include <filesystem>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace actorpipe {

// (flag, path) pairs; empty paths are left out.
using file_roles = std::vector<std::pair<std::string, std::string>>;

// Throws std::invalid_argument naming both flags when two outputs, or an output and an input,
// are one file (the same path once made absolute, or the same existing file; a device such as
// /dev/null may be given to several).
inline void check_distinct_files(const file_roles& outputs, const file_roles& inputs) {
  namespace fs = std::filesystem;
  const auto same = [](const std::string& a, const std::string& b) {
    std::error_code ec;
    if (fs::exists(a, ec) && !fs::is_regular_file(a, ec) && !fs::is_directory(a, ec)) return false;  // /dev/null, twice
    if (fs::exists(a, ec) && fs::exists(b, ec) && fs::equivalent(a, b, ec)) return true;
    const fs::path x = fs::weakly_canonical(fs::absolute(a, ec), ec), y = fs::weakly_canonical(fs::absolute(b, ec), ec);
    return !x.empty() && x == y;
  };
  for (std::size_t i = 0; i < outputs.size(); ++i) {
    const auto& [flag, path] = outputs[i];
    if (path.empty()) continue;
    for (std::size_t j = i + 1; j < outputs.size(); ++j)
      if (!outputs[j].second.empty() && same(path, outputs[j].second))
        throw std::invalid_argument(flag + " '" + path + "' is also " + outputs[j].first + " ('" + outputs[j].second +
                                    "'): each output needs a file of its own");
    for (const auto& [in_flag, in_path] : inputs)
      if (!in_path.empty() && same(path, in_path))
        throw std::invalid_argument(flag + " '" + path + "' is the " + in_flag + " this run reads ('" + in_path +
                                    "'): writing it would replace it; give the output another name");
  }
}

}  // namespace actorpipe
