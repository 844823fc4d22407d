#include "core/held_names.hpp"

#include <map>
#include <utility>

namespace actorpipe {

std::string held_name_clash(const std::vector<held_name>& held, int replicas, int processes) {
  std::map<std::pair<int, std::string>, const held_name*> first;  // (replica, name) -> its first holder
  const auto stage = [processes](const held_name& h) {
    return std::to_string(h.stage) + (processes > 1 ? " (process " + std::to_string(h.process) + ")" : std::string());
  };
  for (const held_name& h : held) {
    const auto [at, fresh] = first.emplace(std::make_pair(h.replica, h.name), &h);
    if (fresh) continue;
    const held_name& other = *at->second;
    if (other.stage == h.stage && other.process == h.process) continue;  // a stage checks its own layers itself
    const std::string kind = other.buffer != h.buffer ? "tensor" : h.buffer ? "buffer" : "parameter";
    return kind + " '" + h.name + "' is held by virtual stages " + stage(other) + " and " + stage(h) +
           (replicas > 1 ? " of replica " + std::to_string(h.replica) : std::string()) + ": two layers give their " +
           kind + "s the same names (give them distinct param prefixes)";
  }
  return "";
}

}  // namespace actorpipe
