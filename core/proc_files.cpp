#include "core/proc_files.hpp"

#include <sys/auxv.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

namespace actorpipe {

std::map<std::string, std::string> proc_values(const std::string& path) {
  std::map<std::string, std::string> values;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    const auto colon = line.find(':');
    if (colon == std::string::npos) continue;
    std::string name = line.substr(0, colon);
    name.erase(name.find_last_not_of(" \t") + 1);
    const auto begin = line.find_first_not_of(" \t", colon + 1);
    values.emplace(name, begin == std::string::npos ? "" : line.substr(begin));
  }
  return values;
}

std::string value_of(const std::map<std::string, std::string>& values, const std::string& key) {
  const auto it = values.find(key);
  return it == values.end() ? "" : it->second;
}

std::string proc_value(const std::string& path, const std::string& key) { return value_of(proc_values(path), key); }

std::string first_line(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return line;
}

double meminfo_bytes(const std::string& key) {
  return std::atof(proc_value("/proc/meminfo", key).c_str()) * 1024;  // "24683784 kB"
}

double cgroup_bytes(const std::string& file) {
  const std::string value = first_line("/sys/fs/cgroup/" + file);
  return value.empty() || value == "max" ? 0 : std::atof(value.c_str());
}

std::vector<std::string> loader_arguments(int argc, const char* const* argv) {
  // The kernel loads a program's interpreter itself and says where (AT_BASE); a program the
  // loader was asked to run has none, as the loader is the program the kernel ran.
  if (::getauxval(AT_BASE) != 0 || argc < 1) return {};
  std::error_code ec;
  const std::string exe = std::filesystem::read_symlink("/proc/self/exe", ec).filename().string();
  if (ec || exe.rfind("ld-", 0) != 0) return {};
  std::ifstream f("/proc/self/cmdline", std::ios::binary);
  std::vector<std::string> all;
  std::string word;
  while (std::getline(f, word, '\0')) all.push_back(word);
  const std::size_t own = static_cast<std::size_t>(argc) - 1;  // main's argv[1..]
  if (all.size() < own + 2) return {};                          // the loader, ..., the program
  const std::size_t first_own = all.size() - own;
  for (std::size_t i = 0; i < own; ++i)  // another argv than the process's (a library caller's)
    if (argv[1 + i] == nullptr || all[first_own + i] != argv[1 + i]) return {};
  return std::vector<std::string>(all.begin() + 1, all.begin() + static_cast<std::ptrdiff_t>(first_own));
}

}  // namespace actorpipe
