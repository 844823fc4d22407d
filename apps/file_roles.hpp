// Output files checked before a command works: each against the others and against the files
// it reads (two outputs under one name left one of them: `--metrics x --save-final x` kept the
// weights, and the summary said both were written; an output under an input's name replaced
// what the user wrote, a --schedule-file overwritten by --trace), and its folder.
#pragma once

#include <cerrno>
#include <cstring>
#include <filesystem>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "core/folder_probe.hpp"
#include "core/std_streams.hpp"

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
    const fs::path x = write_target(a), y = write_target(b);
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

// A pipe (FIFO) given as an output: with nothing reading it, the first write's open waited for
// a reader for ever, past --step-timeout and a first Ctrl-C: refused. With a reader
// (--metrics >(jq ...)), this end stays open for the process's life: closed here, the reader
// would see the end of its input before a line came. Nothing for a path that is no pipe.
inline void check_pipe_has_reader(const std::string& flag, const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::is_fifo(path, ec)) return;
  const int end = ::open(path.c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC);
  if (end < 0 && errno == ENXIO)
    throw std::invalid_argument(flag + " '" + path + "' is a pipe that nothing reads: what is written there would wait "
                                "for ever (start its reader first)");
  if (end < 0) throw std::invalid_argument(flag + " '" + path + "': cannot open the pipe (" + std::strerror(errno) + ")");
}

// A file a command writes (train's --metrics, --trace, --save-final; simulate's --trace, --svg):
// its folder must exist and take files before the work starts, so that a typo in a path does
// not cost the run. A file written aside and renamed into place (`replaced`: --save-final) must
// not be a device, pipe or socket, which the rename would replace. Nothing is left behind here.
inline void check_output_file(const char* flag, const std::string& path, bool replaced) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const std::string named = std::string(flag) + " '" + path + "'";
  if (fs::is_directory(path, ec)) throw std::invalid_argument(named + " is a directory: give a file name");
  const fs::path parent = fs::path(path).parent_path();
  fs::path dir = parent.empty() ? fs::path(".") : parent;
  if (!fs::is_directory(dir, ec)) throw std::invalid_argument(named + ": the folder '" + dir.string() + "' does not exist");
  // Through a symbolic link: the file it names is written, in that file's folder. A loop of
  // links, or one to a folder that is not there, failed only once the run had trained.
  struct stat link {};
  fs::path linked;  // where a symbolic link leads
  if (::lstat(path.c_str(), &link) == 0 && S_ISLNK(link.st_mode)) {
    struct stat through {};
    if (::stat(path.c_str(), &through) != 0 && errno == ELOOP)
      throw std::invalid_argument(named + " is a symbolic link in a loop of links: give a file name");
    linked = write_target(path);
    if (linked.empty() || !fs::is_directory(linked.parent_path(), ec))
      throw std::invalid_argument(named + " is a symbolic link leading to '" + linked.string() + "', whose folder '" +
                                  linked.parent_path().string() + "' does not exist");
    dir = linked.parent_path();
  }
  // A name past the filesystem's limit (255 bytes) failed only when written, after the run:
  // the name written, the link's target's where it is one.
  const std::string name = (linked.empty() ? fs::path(path) : linked).filename().string();
  const long name_max = ::pathconf(dir.c_str(), _PC_NAME_MAX);
  if (name_max > 0 && static_cast<long>(name.size()) > name_max)
    throw std::invalid_argument(named + ": the file name is " + std::to_string(name.size()) + " bytes, more than the " +
                                std::to_string(name_max) + " a name may have there");
  const auto status = fs::status(path, ec);
  // /dev/stdout where standard output is a file: the two overwrote each other's lines.
  struct stat target {};
  if (fs::exists(status) && ::stat(path.c_str(), &target) == 0)
    if (const char* stream = std_stream_writing(target))
      throw std::invalid_argument(named + " is this process's " + stream +
                                  ", a file: written apart, each would overwrite the other; give another file");
  if (!replaced && fs::is_fifo(status)) {  // written where it is, once it has a reader
    check_pipe_has_reader(flag, path);
    return;
  }
  if (fs::exists(status)) {
    if (replaced && !fs::is_regular_file(status))
      throw std::invalid_argument(named + " exists and is not a regular file (a device, pipe or socket): the file is "
                                          "written beside it and renamed into place, which would replace it; give a file name");
    if (::access(path.c_str(), W_OK) != 0) throw std::invalid_argument(named + ": the file exists and cannot be written");
    if (!replaced) return;  // written where it is
  }
  if (const folder_probe probe = probe_folder(dir, false); !probe.error.empty())
    throw std::invalid_argument(named + ": cannot write in the folder '" + dir.string() + "' (" + probe.error + ")");
}

}  // namespace actorpipe
