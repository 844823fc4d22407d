#include "core/proc_files.hpp"

#include <cstdlib>
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

}  // namespace actorpipe
