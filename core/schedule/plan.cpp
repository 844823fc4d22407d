// Plan helpers: dependency rule and the text format.
#include "core/text_file.hpp"
#include "core/schedule/plan.hpp"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <stdexcept>
#include <vector>

namespace actorpipe {

bool plan::uses_split_backward() const {
  for (const auto& rank : ranks)
    for (const auto& a : rank)
      if (a.op == op_kind::input_grad || a.op == op_kind::weight_grad) return true;
  return false;
}

void check_plan_size(const std::string& who, int stages, int chunks, int microbatches) {
  const long long forwards = static_cast<long long>(stages) * chunks * microbatches;
  if (forwards <= max_plan_forwards) return;
  throw std::invalid_argument(who + ": stages x chunks x microbatches = " + std::to_string(stages) + " x " +
                              std::to_string(chunks) + " x " + std::to_string(microbatches) + " = " +
                              std::to_string(forwards) + " forward passes in one step, more than a plan may hold (" +
                              std::to_string(max_plan_forwards) + ")");
}

void require_plan_file_count(const std::string& file, const std::string& what, int given, int in_file) {
  if (given != in_file)
    throw std::invalid_argument("the run has " + std::to_string(given) + " " + what + " but schedule file '" + file +
                                "' has " + std::to_string(in_file));
}

int dependencies_of(const action& a, int num_virtual_stages, dependency out[2]) {
  using k = dependency::kind;
  const int v = a.virtual_stage, m = a.microbatch;
  switch (a.op) {
    case op_kind::forward:
      if (v == 0) return 0;
      out[0] = {k::forward, v - 1, m};
      return 1;
    case op_kind::backward:
    case op_kind::input_grad:
      out[0] = {k::forward, v, m};
      if (v + 1 >= num_virtual_stages) return 1;  // the last stage's F computed the loss
      out[1] = {k::input_grad, v + 1, m};
      return 2;
    case op_kind::weight_grad:
      out[0] = {k::input_grad, v, m};
      return 1;
  }
  return 0;
}

std::vector<size_t> walk_plan(const plan& p, const std::function<void(int rank, const action& a)>& visit) {
  const int P = p.num_ranks(), S = p.num_virtual_stages(), M = p.microbatches;
  std::vector<char> fwd_done(static_cast<size_t>(S) * M, 0), grad_done(static_cast<size_t>(S) * M, 0);
  auto idx = [M](int v, int m) { return static_cast<size_t>(v) * M + m; };
  std::vector<size_t> next(P, 0);
  for (bool progress = true; progress;) {
    progress = false;
    for (int r = 0; r < P; ++r) {
      while (next[r] < p.ranks[r].size()) {
        const action& a = p.ranks[r][next[r]];
        dependency deps[2];
        int n = dependencies_of(a, S, deps);
        bool ready = true;
        for (int k = 0; k < n && ready; ++k)
          ready = (deps[k].what == dependency::kind::forward ? fwd_done : grad_done)[idx(deps[k].virtual_stage,
                                                                                        deps[k].microbatch)];
        if (!ready) break;
        visit(r, a);
        if (a.op == op_kind::forward) fwd_done[idx(a.virtual_stage, a.microbatch)] = 1;
        if (produces_input_grad(a.op)) grad_done[idx(a.virtual_stage, a.microbatch)] = 1;
        ++next[r];
        progress = true;
      }
    }
  }
  return next;
}

std::string format_plan(const plan& p) {
  std::string out;
  for (size_t r = 0; r < p.ranks.size(); ++r) {
    out += std::to_string(r) + ":";
    for (const auto& a : p.ranks[r]) {
      out += ' ';
      out += to_string(a);
    }
    out += '\n';
  }
  return out;
}

namespace {

std::string trim(const std::string& s) {
  const char* ws = " \t\r";
  auto b = s.find_first_not_of(ws);
  if (b == std::string::npos) return "";
  return s.substr(b, s.find_last_not_of(ws) - b + 1);
}

}  // namespace

plan parse_plan(const std::string& given, const std::string& name) {
  // A UTF-8 byte-order mark (an editor's) and old Mac line ends (CR alone) are taken as text.
  std::string text = given.compare(0, 3, "\xEF\xBB\xBF") == 0 ? given.substr(3) : given;
  for (std::size_t i = 0; i < text.size(); ++i)
    if (text[i] == '\r' && (i + 1 == text.size() || text[i + 1] != '\n')) text[i] = '\n';
  std::map<int, std::vector<action>> by_rank;
  std::map<int, int> line_of_rank;
  std::map<int, std::pair<int, int>> owner;  // virtual stage -> (rank, line)
  std::istringstream in(text);
  std::string raw;
  int lineno = 0;
  auto fail = [&](const std::string& why) {
    return std::invalid_argument(name + ":" + std::to_string(lineno) + ": " + why);
  };
  while (std::getline(in, raw)) {
    ++lineno;
    auto hash = raw.find('#');
    std::string line = trim(hash == std::string::npos ? raw : raw.substr(0, hash));
    if (line.empty()) continue;
    auto colon = line.find(':');
    if (colon == std::string::npos)
      throw fail("expected 'RANK: ACTION ...', got '" + printable_text(line) + "'");
    std::string rank_text = trim(line.substr(0, colon));
    int rank = -1;
    const bool digits = !rank_text.empty() &&
                        std::all_of(rank_text.begin(), rank_text.end(), [](char c) { return c >= '0' && c <= '9'; });
    if (!digits) throw fail("rank '" + printable_text(rank_text) + "' is not a non-negative integer");
    // Its value counts, not its length: leading zeros ("0000000") name a small rank.
    const std::size_t first_digit = std::min(rank_text.find_first_not_of('0'), rank_text.size() - 1);
    if (rank_text.size() - first_digit > 6)
      throw fail("rank '" + printable_text(rank_text) + "' is past any plan (at most 999999 ranks)");
    rank_text.erase(0, first_digit);
    rank = std::stoi(rank_text);
    if (line_of_rank.count(rank))
      throw fail("rank " + std::to_string(rank) + " is listed twice (first on line " +
                 std::to_string(line_of_rank[rank]) + ")");
    line_of_rank[rank] = lineno;
    auto& actions = by_rank[rank];
    std::istringstream tokens(line.substr(colon + 1));
    std::string tok;
    while (tokens >> tok) {
      action a;
      if (has_control_bytes(tok))
        throw fail("bad action '" + printable_text(tok) + "': it holds a control character");
      try {
        a = parse_action(tok);
      } catch (const std::invalid_argument& e) {
        throw fail(printable_text(e.what(), std::string::npos));
      }
      auto it = owner.find(a.virtual_stage);
      if (it != owner.end() && it->second.first != rank)
        throw fail("virtual stage " + std::to_string(a.virtual_stage) + " is listed by rank " +
                   std::to_string(rank) + " and by rank " + std::to_string(it->second.first) +
                   " (line " + std::to_string(it->second.second) +
                   "): a virtual stage lives on exactly one rank");
      owner.emplace(a.virtual_stage, std::make_pair(rank, lineno));
      actions.push_back(a);
    }
  }
  if (by_rank.empty()) throw std::invalid_argument(name + ": no ranks listed");
  const int ranks = by_rank.rbegin()->first + 1;
  for (int r = 0; r < ranks; ++r)
    if (!by_rank.count(r))
      throw std::invalid_argument(name + ": rank " + std::to_string(r) + " is missing (ranks go 0.." +
                                  std::to_string(ranks - 1) + ")");
  if (owner.empty())  // ranks named with nothing after them ("0:"): it crashed below
    throw std::invalid_argument(name + ": no actions listed (each rank's line names its actions, e.g. '0: F0.0 B0.0')");
  // The first virtual stage no rank lists, found in the map: a stray F999999999.0 must not
  // size a table (it took 4 GB and 17 s).
  const int stages = owner.rbegin()->first + 1;
  if (static_cast<int>(owner.size()) != stages) {
    int v = 0;
    for (auto it = owner.begin(); it != owner.end() && it->first == v; ++it) ++v;
    throw std::invalid_argument(name + ": virtual stage " + std::to_string(v) + " appears on no rank (virtual stages go 0.." +
                                std::to_string(stages - 1) + ")");
  }
  std::vector<int> rank_of(stages, -1);
  for (auto& [v, who] : owner) rank_of[v] = who.first;
  plan p;
  p.name = name;
  try {
    p.place = placement_from_ranks(ranks, std::move(rank_of));
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument(name + ": " + e.what());
  }
  int max_mb = -1;
  for (auto& [r, actions] : by_rank)
    for (auto& a : actions) max_mb = std::max(max_mb, a.microbatch);
  p.microbatches = max_mb + 1;
  check_plan_size(name, ranks, p.place.chunks(), p.microbatches);
  for (auto& [r, actions] : by_rank) p.ranks.push_back(std::move(actions));
  return p;
}

std::string backward_order_note(const plan& p) {
  std::map<std::pair<int, char>, std::vector<int>> order;  // (virtual stage, op) -> microbatches
  for (const auto& list : p.ranks)
    for (const action& a : list)
      if (a.op != op_kind::forward) order[{a.virtual_stage, static_cast<char>(a.op)}].push_back(a.microbatch);
  std::string first;
  int more = 0;
  for (const auto& [key, ms] : order) {
    if (std::is_sorted(ms.begin(), ms.end())) continue;
    if (!first.empty()) {
      ++more;
      continue;
    }
    std::string listed;
    for (std::size_t i = 0; i < ms.size() && i < 8; ++i) listed += (i ? ", " : "") + std::to_string(ms[i]);
    if (ms.size() > 8) listed += ", ...";
    first = "virtual stage " + std::to_string(key.first) + " runs its " + std::string(1, key.second) +
            "'s (which add up gradients) for microbatches " + listed;
  }
  if (more > 0) first += " (and " + std::to_string(more) + " more virtual stage or op" + (more == 1 ? "" : "s") + " out of order)";
  return first;
}

std::string read_plan_file(const std::string& path) {
  // The largest plan (max_plan_forwards, each with its B or I and W, "W12.1048575 ") is under
  // 64 MiB: a file past 128 MiB (or /dev/zero) is not a plan, and is not read whole.
  auto text = read_text_at_most(path, std::size_t{128} << 20, "schedule file '" + path + "'");
  if (!text)
    throw std::invalid_argument("schedule file '" + path + "' holds more than 128 MiB: no plan is that long (at most " +
                                std::to_string(max_plan_forwards) + " forwards)");
  return std::move(*text);
}

plan load_plan_file(const std::string& path) { return parse_plan(read_plan_file(path), path); }

}  // namespace actorpipe
