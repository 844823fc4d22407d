// Registry of schedule generators; built-ins are installed on first use (not by static
// initializers, which a static library's linker may drop).
#include "core/schedule/schedule_registry.hpp"

#include <algorithm>
#include <map>
#include <mutex>
#include <stdexcept>

#include "core/schedule/builtin_schedules.hpp"
#include "core/schedule/plan_validator.hpp"
#include "core/schedule/policy_registry.hpp"
#include "core/schedule/user_code.hpp"

namespace actorpipe {
namespace {

struct entry {
  schedule_generator generator;
  schedule_info info;
  int order;
};

struct registry {
  std::mutex mu;
  std::map<std::string, entry> entries;
  int next_order = 0;

  void add(const std::string& name, schedule_generator g, std::string description, bool builtin,
           int default_chunks = 1) {
    entries[name] =
        entry{std::move(g), schedule_info{name, std::move(description), builtin, default_chunks}, next_order++};
  }

  registry() {
    add("gpipe", make_gpipe, "all forwards, then all backwards; any chunks (loop placement)", true);
    add("1f1b", make_one_f_one_b, "warm-up of P-rank-1 forwards, then one forward one backward; chunks=1", true);
    add("interleaved", make_interleaved,
        "Megatron's virtual pipeline, loop placement; chunks>=2, microbatches a multiple of stages", true, 2);
    add("zb-h1", make_zb_h1, "zero bubble H1: backward split into I and W, W fills the bubbles, 1F1B memory; chunks=1",
        true);
    add("zbv", make_zbv, "zero bubble V-shape: 2 chunks per rank in V placement, split backward; chunks=2", true, 2);
    add("dualpipev", make_dualpipev,
        "DeepSeek's DualPipeV: V placement, forward/backward pairs, split backward in the tail; chunks=2, "
        "microbatches >= 2*stages",
        true, 2);
  }
};

registry& the_registry() {
  static registry r;
  return r;
}

}  // namespace

[[noreturn]] void reject_request(const std::string& schedule, const std::string& rule, const schedule_request& r) {
  throw std::invalid_argument(schedule + " needs " + rule + ": got stages=" + std::to_string(r.stages) +
                              ", microbatches=" + std::to_string(r.microbatches) +
                              ", chunks=" + std::to_string(r.chunks));
}

bool orders_by_cost(const std::string& name) {
  if (name == "zb-h1" || name == "zbv") return true;
  auto& r = the_registry();
  std::lock_guard<std::mutex> lock(r.mu);
  const auto it = r.entries.find(name);
  return it != r.entries.end() && !it->second.info.builtin;
}

void register_schedule(const std::string& name, schedule_generator generator, std::string description,
                       int default_chunks) {
  if (name.empty() || std::any_of(name.begin(), name.end(), [](char c) { return c == ' ' || c == '\t' || c == '\n'; }))
    throw std::invalid_argument("register_schedule: name '" + name + "' must be non-empty without whitespace");
  if (!generator) throw std::invalid_argument("register_schedule: generator for '" + name + "' is empty");
  if (default_chunks < 1)
    throw std::invalid_argument("register_schedule: default_chunks=" + std::to_string(default_chunks) + " for '" +
                                name + "' must be >= 1");
  // Asked before taking this registry's lock: neither registry calls the other while it holds
  // its own, so two threads can never wait on each other.
  if (is_dynamic_policy(name))
    throw std::invalid_argument("register_schedule: '" + name + "' is a dynamic policy; pick another name");
  auto& reg = the_registry();
  std::lock_guard<std::mutex> lock(reg.mu);
  auto it = reg.entries.find(name);
  if (it != reg.entries.end() && it->second.info.builtin)
    throw std::invalid_argument("register_schedule: '" + name + "' is a built-in schedule; pick another name");
  reg.add(name, std::move(generator), std::move(description), false, default_chunks);
}

int default_chunks(const std::string& name) {
  {
    auto& reg = the_registry();
    std::lock_guard<std::mutex> lock(reg.mu);
    auto it = reg.entries.find(name);
    if (it != reg.entries.end()) return it->second.info.default_chunks;
  }
  for (const auto& p : list_policies())
    if (p.name == name) return p.default_chunks;
  return 1;
}

bool has_schedule(const std::string& name) {
  auto& reg = the_registry();
  std::lock_guard<std::mutex> lock(reg.mu);
  return reg.entries.count(name) > 0;
}

std::vector<schedule_info> list_schedules() {
  std::vector<schedule_info> builtin, user;
  {
    auto& reg = the_registry();
    std::lock_guard<std::mutex> lock(reg.mu);
    std::vector<const entry*> all;
    for (auto& [name, e] : reg.entries) all.push_back(&e);
    std::sort(all.begin(), all.end(), [](const entry* a, const entry* b) { return a->order < b->order; });
    for (auto* e : all) (e->info.builtin ? builtin : user).push_back(e->info);
  }
  // Built-in schedules, built-in policies, then every user registration in name order.
  for (auto& p : list_policies()) (p.builtin ? builtin : user).push_back(std::move(p));
  std::sort(user.begin(), user.end(), [](const schedule_info& a, const schedule_info& b) { return a.name < b.name; });
  builtin.insert(builtin.end(), user.begin(), user.end());
  return builtin;
}

plan make_schedule(const std::string& name, const schedule_request& request) {
  schedule_generator gen;
  std::string known;
  {
    auto& reg = the_registry();
    std::lock_guard<std::mutex> lock(reg.mu);
    auto it = reg.entries.find(name);
    if (it != reg.entries.end())
      gen = it->second.generator;
    else
      for (auto& [n, e] : reg.entries) known += (known.empty() ? "" : ", ") + n;
  }
  if (!gen) {
    if (is_dynamic_policy(name))
      throw std::invalid_argument("'" + name +
                                  "' is a dynamic policy: it picks actions as inputs arrive and has no plan to "
                                  "generate or validate (simulate --schedule " + name + " runs it)");
    std::string policies;
    for (auto& p : list_policies()) policies += (policies.empty() ? "" : ", ") + p.name;
    throw std::invalid_argument("unknown schedule '" + name + "' (known: " + known + "; dynamic policies: " +
                                policies + ")");
  }
  if (request.stages < 1) throw std::invalid_argument("stages must be >= 1: got stages=" + std::to_string(request.stages));
  if (request.microbatches < 1)
    throw std::invalid_argument("microbatches must be >= 1: got microbatches=" + std::to_string(request.microbatches));
  if (request.chunks < 1) throw std::invalid_argument("chunks must be >= 1: got chunks=" + std::to_string(request.chunks));
  check_plan_size("schedule '" + name + "'", request.stages, request.chunks, request.microbatches);
  plan p = refusing_what_throws("schedule '" + name + "': its generator failed", [&] { return gen(request); });
  p.name = name;
  if (p.num_ranks() != request.stages || p.chunks() != request.chunks || p.microbatches != request.microbatches)
    throw std::invalid_argument("schedule '" + name + "' returned a plan for stages=" + std::to_string(p.num_ranks()) +
                                ", microbatches=" + std::to_string(p.microbatches) +
                                ", chunks=" + std::to_string(p.chunks()) + " when asked for stages=" +
                                std::to_string(request.stages) + ", microbatches=" +
                                std::to_string(request.microbatches) + ", chunks=" + std::to_string(request.chunks));
  require_valid(p);
  return p;
}

}  // namespace actorpipe
