// Registry of dynamic policies; greedy is installed on first use (not by a static initializer,
// which a static library's linker may drop), through the same path as user policies.
#include "core/schedule/policy_registry.hpp"

#include <algorithm>
#include <map>
#include <mutex>
#include <set>
#include <stdexcept>
#include <tuple>

#include "core/schedule/user_code.hpp"

namespace actorpipe {
namespace {

// greedy's default budget: 1F1B's warm-up on the rank's first chunk (stages - rank), plus a
// microbatch per stage for each chunk after the first, as interleaved 1F1B's warm-up admits
// (with stages - rank alone, a later rank of several chunks ran nearly one action at a time).
int greedy_default_budget(const placement& place, int rank) {
  return std::max(1, place.ranks - rank + (place.chunks() - 1) * place.ranks);
}

struct entry {
  policy_factory factory;
  policy_options options;
  schedule_info info;
  int order;
};

struct registry {
  std::mutex mu;
  std::map<std::string, entry> entries;
  int next_order = 0;

  void add(const std::string& name, policy_factory f, std::string description, policy_options options, bool builtin) {
    schedule_info info{name, std::move(description), builtin, options.default_chunks};
    info.dynamic = true;
    entries[name] = entry{std::move(f), std::move(options), std::move(info), next_order++};
  }

  registry() {
    add("greedy",
        [](const policy_request& r) {
          return make_greedy_policy(r.place, r.microbatches, r.rank,
                                    r.budget > 0 ? r.budget : greedy_default_budget(r.place, r.rank), r.split_backward);
        },
        "backward first, forwards of new microbatches while the rank holds fewer than --budget "
        "(default stages - rank, + stages per chunk after the first); any chunks (loop placement)",
        policy_options{}, true);
  }
};

registry& the_registry() {
  static registry r;
  return r;
}

entry find(const std::string& name) {
  auto& reg = the_registry();
  std::lock_guard<std::mutex> lock(reg.mu);
  auto it = reg.entries.find(name);
  if (it == reg.entries.end()) {
    std::string known;
    for (auto& [n, e] : reg.entries) known += (known.empty() ? "" : ", ") + n;
    throw std::invalid_argument("unknown dynamic policy '" + name + "' (known: " + known + ")");
  }
  return it->second;
}

using key = std::tuple<char, int, int>;  // op, virtual stage, microbatch
key key_of(const action& a) { return {static_cast<char>(a.op), a.virtual_stage, a.microbatch}; }

// Runs a policy and refuses what would otherwise stall or corrupt the step silently: an action
// of another rank, one whose inputs are not there, one picked twice.
class checked_policy final : public rank_policy {
 public:
  checked_policy(std::unique_ptr<rank_policy> inner, std::string name, int rank)
      : inner_(std::move(inner)), name_(std::move(name)), rank_(rank) {
    for (const action& a : inner_->all_actions()) mine_.insert(key_of(a));
  }
  void reset() override {
    picked_.clear();
    inner_->reset();
  }
  std::optional<action> next(const std::function<bool(const action&)>& ready) override {
    return checked(inner_->next(ready), ready, "picked");
  }
  // The idle-time hooks go through too (they were left at the base's "nothing"), fill()'s pick
  // checked as next()'s.
  std::optional<action> fill(const std::function<bool(const action&)>& ready) override {
    return checked(inner_->fill(ready), ready, "filled a wait with");
  }
  std::optional<action> next_listed() const override { return inner_->next_listed(); }
  void completed(const action& a) override { inner_->completed(a); }
  bool finished() const override { return inner_->finished(); }
  std::string waiting_for() const override { return inner_->waiting_for(); }
  std::vector<action> all_actions() const override { return inner_->all_actions(); }

 private:
  std::optional<action> checked(std::optional<action> a, const std::function<bool(const action&)>& ready,
                                const char* how) {
    if (!a) return a;
    auto fail = [&](const std::string& why) {
      throw std::logic_error("policy '" + name_ + "' on rank " + std::to_string(rank_) + " " + how + " " + to_string(*a) +
                             ", " + why);
    };
    if (!mine_.count(key_of(*a))) fail("which is not one of the rank's actions");
    if (!picked_.insert(key_of(*a)).second) fail("which it had picked before in this step");
    if (!ready(*a)) fail("whose inputs have not arrived (a policy may only pick ready actions)");
    return a;
  }

  std::unique_ptr<rank_policy> inner_;
  std::string name_;
  int rank_;
  std::set<key> mine_, picked_;
};

// Each (virtual stage, microbatch) of the rank: one F, and one B or one I and one W.
void check_actions(const std::string& name, const rank_policy& p, const placement& place, int microbatches, int rank) {
  const std::string who = "policy '" + name + "' for rank " + std::to_string(rank);
  std::set<key> seen;
  for (const action& a : p.all_actions()) {
    if (a.virtual_stage < 0 || a.virtual_stage >= place.num_virtual_stages() ||
        place.rank_of[a.virtual_stage] != rank || a.microbatch < 0 || a.microbatch >= microbatches)
      throw std::invalid_argument(who + " lists " + to_string(a) + ", which is not one of the rank's actions");
    if (!seen.insert(key_of(a)).second) throw std::invalid_argument(who + " lists " + to_string(a) + " twice");
  }
  for (int v : place.virtual_stages_of(rank))
    for (int m = 0; m < microbatches; ++m) {
      auto has = [&](op_kind op) { return seen.count(key{static_cast<char>(op), v, m}) > 0; };
      const bool b = has(op_kind::backward), i = has(op_kind::input_grad), w = has(op_kind::weight_grad);
      const std::string vm = std::to_string(v) + "." + std::to_string(m);
      if (!has(op_kind::forward)) throw std::invalid_argument(who + " does not list F" + vm);
      if (!b && !i) throw std::invalid_argument(who + " lists neither B" + vm + " nor I" + vm);
      if (b && (i || w)) throw std::invalid_argument(who + " lists B" + vm + " and a split backward of it too");
      if (i != w) throw std::invalid_argument(who + " lists " + (i ? "I" : "W") + vm + " without " + (i ? "W" : "I") + vm);
    }
}

}  // namespace

void register_policy(const std::string& name, policy_factory factory, std::string description,
                     policy_options options) {
  if (name.empty() || std::any_of(name.begin(), name.end(), [](char c) { return c == ' ' || c == '\t' || c == '\n'; }))
    throw std::invalid_argument("register_policy: name '" + name + "' must be non-empty without whitespace");
  if (!factory) throw std::invalid_argument("register_policy: factory for '" + name + "' is empty");
  if (options.default_chunks < 1)
    throw std::invalid_argument("register_policy: default_chunks=" + std::to_string(options.default_chunks) +
                                " for '" + name + "' must be >= 1");
  if (options.placement != "loop" && options.placement != "v-shape")
    throw std::invalid_argument("register_policy: placement '" + options.placement + "' for '" + name +
                                "' must be loop or v-shape");
  // Asked before taking this registry's lock: neither registry calls the other while it holds
  // its own, so two threads can never wait on each other.
  if (has_schedule(name))
    throw std::invalid_argument("register_policy: '" + name + "' is a schedule (a plan generator); pick another name");
  auto& reg = the_registry();
  std::lock_guard<std::mutex> lock(reg.mu);
  auto it = reg.entries.find(name);
  if (it != reg.entries.end() && it->second.info.builtin)
    throw std::invalid_argument("register_policy: '" + name + "' is a built-in policy; pick another name");
  reg.add(name, std::move(factory), std::move(description), std::move(options), false);
}

bool is_dynamic_policy(const std::string& name) {
  auto& reg = the_registry();
  std::lock_guard<std::mutex> lock(reg.mu);
  return reg.entries.count(name) > 0;
}

std::vector<schedule_info> list_policies() {
  auto& reg = the_registry();
  std::lock_guard<std::mutex> lock(reg.mu);
  std::vector<const entry*> all;
  for (auto& [name, e] : reg.entries) all.push_back(&e);
  std::stable_sort(all.begin(), all.end(), [](const entry* a, const entry* b) {
    if (a->info.builtin != b->info.builtin) return a->info.builtin;
    return a->info.builtin ? a->order < b->order : a->info.name < b->info.name;
  });
  std::vector<schedule_info> out;
  for (auto* e : all) out.push_back(e->info);
  return out;
}

placement policy_placement(const std::string& name, int stages, int chunks) {
  const entry e = find(name);
  if (stages < 1 || chunks < 1)
    throw std::invalid_argument("policy '" + name + "' needs stages >= 1 and chunks >= 1: got stages=" +
                                std::to_string(stages) + ", chunks=" + std::to_string(chunks));
  return e.options.placement == "v-shape" ? v_shape_placement(stages, chunks) : loop_placement(stages, chunks);
}

namespace {

// make_policy on a placement made once (make_policies made it for every rank: minutes for
// 100000 stages).
std::unique_ptr<rank_policy> make_policy_on(const std::string& name, const placement& place, int microbatches, int rank,
                                            int budget) {
  const entry e = find(name);
  const int stages = place.ranks;
  policy_request r;
  r.place = place;
  if (rank < 0 || rank >= stages)
    throw std::invalid_argument("policy '" + name + "': rank " + std::to_string(rank) + " is not in 0.." +
                                std::to_string(stages - 1));
  r.microbatches = microbatches;
  r.rank = rank;
  r.budget = budget;
  r.split_backward = e.options.split_backward;
  std::unique_ptr<rank_policy> p = refusing_what_throws(
      "policy '" + name + "': its factory failed for rank " + std::to_string(rank), [&] { return e.factory(r); });
  if (!p) throw std::invalid_argument("policy '" + name + "' returned no policy for rank " + std::to_string(rank));
  check_actions(name, *p, r.place, microbatches, rank);
  return std::make_unique<checked_policy>(std::move(p), name, rank);
}

// The placement a request for `name` gets, after the checks every request makes.
placement checked_request(const std::string& name, int stages, int microbatches, int chunks, int budget) {
  find(name);
  if (microbatches < 1)
    throw std::invalid_argument("policy '" + name + "' needs microbatches >= 1: got microbatches=" +
                                std::to_string(microbatches));
  if (budget < 0) throw std::invalid_argument("policy '" + name + "': budget=" + std::to_string(budget) + " must be >= 0");
  // Before the placement, which lists stages x chunks entries (-V 2147483647 grew by GBs first).
  if (stages >= 1 && chunks >= 1) check_plan_size("policy '" + name + "'", stages, chunks, microbatches);
  return policy_placement(name, stages, chunks);
}

}  // namespace

std::unique_ptr<rank_policy> make_policy(const std::string& name, int stages, int microbatches, int chunks, int rank,
                                         int budget) {
  return make_policy_on(name, checked_request(name, stages, microbatches, chunks, budget), microbatches, rank, budget);
}

std::vector<std::unique_ptr<rank_policy>> make_policies(const std::string& name, int stages, int microbatches,
                                                        int chunks, int budget) {
  const placement place = checked_request(name, stages, microbatches, chunks, budget);
  std::vector<std::unique_ptr<rank_policy>> out;
  for (int r = 0; r < stages; ++r) out.push_back(make_policy_on(name, place, microbatches, r, budget));
  return out;
}

}  // namespace actorpipe
