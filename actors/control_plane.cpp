// The control plane: one io broker per process, in the role of its process (the hub on
// process 0, a member elsewhere; see control_role.hpp).
#include "actors/control_plane.hpp"

#include <caf/io/all.hpp>

#include <sstream>

#include "actors/control_role.hpp"

namespace actorpipe {
namespace {

std::vector<std::pair<std::string, std::string>> fingerprint_fields(const std::string& text) {
  std::vector<std::pair<std::string, std::string>> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    const auto eq = line.find('=');
    if (eq == std::string::npos) return {};
    out.emplace_back(line.substr(0, eq), line.substr(eq + 1));
  }
  return out;
}

std::string one_line(const std::string& text) {
  std::string s = text;
  while (!s.empty() && s.back() == '\n') s.pop_back();
  for (char& c : s)
    if (c == '\n') c = ' ';
  return s;
}

// An option of the fingerprint as a message names it: its flag (or environment variable) and
// its value as given there ("--steps 3", "no --save-dir", "--data-file (8192 bytes, digest
// ...)", "WORLD_SIZE=2"); options that only a config or code sets keep their key.
std::string option_text(const std::string& key, const std::string& value) {
  if (key == "world_size") return "WORLD_SIZE=" + value;
  if (key == "resumed_after_step")  // "STEP DIGEST": the step, and the manifest's digest
    return value == "0" ? "no --resume" : "--resume of a step-" + value.substr(0, value.find(' ')) + " checkpoint";
  if (key == "lower_case") return value == "false" ? "--no-lower-case" : "no --no-lower-case";
  if (key == "pause_w" || key == "init_std") return key + "=" + value;
  std::string flag = "--" + key;
  for (char& c : flag)
    if (c == '_') c = '-';
  if (value.empty() || value == "false" || value == "none") return "no " + flag;
  if (value == "true" || value == "given") return flag;
  if (key == "data_file" || key == "init_from" || key == "eval_file" || key == "vocab_file" || key == "schedule_file")
    return flag + " (" + value + ")";  // what the file holds, not its path
  return flag + " " + value;
}

}  // namespace

std::string describe_job_difference(const std::string& theirs, const std::string& process0s) {
  const auto a = fingerprint_fields(theirs), b = fingerprint_fields(process0s);
  bool same_names = !a.empty() && a.size() == b.size();
  for (size_t i = 0; same_names && i < a.size(); ++i) same_names = a[i].first == b[i].first;
  if (!same_names) return "its options are '" + one_line(theirs) + "', process 0's are '" + one_line(process0s) + "'";
  std::string out;
  // Another world size spreads the ranks otherwise: the spread is not a second difference
  // (it named a --ranks-per-process no one gave).
  bool world_differs = false;
  for (size_t i = 0; i < a.size(); ++i) world_differs = world_differs || (a[i].first == "world_size" && a[i].second != b[i].second);
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].second == b[i].second) continue;
    if (world_differs && a[i].first == "ranks_per_process") continue;
    if (!out.empty()) out += "; ";
    const auto space_a = a[i].second.find(' '), space_b = b[i].second.find(' ');
    if (a[i].first == "resumed_after_step" && space_a != std::string::npos && space_b != std::string::npos &&
        a[i].second.substr(0, space_a) == b[i].second.substr(0, space_b)) {  // one step, two checkpoints
      out += "--resume of another step-" + a[i].second.substr(0, space_a) + " checkpoint than process 0's (its manifest's "
             "digest " + a[i].second.substr(space_a + 1) + ", process 0's " + b[i].second.substr(space_b + 1) +
             "): each process must resume from a copy of the same checkpoint";
      continue;
    }
    out += option_text(a[i].first, a[i].second) + " against process 0's " + option_text(b[i].first, b[i].second);
  }
  return out.empty() ? "the same options in another form" : out;
}

void add_control_plane_types(caf::actor_system_config& cfg) {
  cfg.add_message_type<msg::join>("actorpipe.join");
  cfg.add_message_type<msg::welcome>("actorpipe.welcome");
}

caf::actor spawn_control_plane(caf::actor_system& sys, cluster_options options, std::vector<std::uint8_t> address,
                               caf::actor owner) {
  if (options.process == 0)
    return sys.middleman().spawn_broker(control_hub, std::move(options), std::move(address), std::move(owner));
  return sys.middleman().spawn_broker(control_member, std::move(options), std::move(address), std::move(owner));
}

}  // namespace actorpipe
