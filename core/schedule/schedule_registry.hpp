// Schedules by name. Each is a generator: (stages P, microbatches M, chunks V) -> plan.
// Built-ins: gpipe, 1f1b, interleaved, zb-h1, zbv, dualpipev. User code adds its own at run time:
//
//   actorpipe::register_schedule("my-1f1b", [](const actorpipe::schedule_request& r) { ... },
//                                "what it does");
//
// Dynamic policies (no plan: they pick actions as inputs arrive) live in their own registry,
// policy_registry.hpp; one name space covers both, and list_schedules shows both.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/schedule/plan.hpp"
#include "core/sim/cost_model.hpp"

namespace actorpipe {

struct schedule_request {
  schedule_request() = default;
  schedule_request(int stages_, int microbatches_, int chunks_, std::shared_ptr<const cost_model> costs_ = nullptr)
      : stages(stages_), microbatches(microbatches_), chunks(chunks_), costs(std::move(costs_)) {}

  int stages = 1;        // P: pipeline ranks
  int microbatches = 1;  // M
  int chunks = 1;        // V: virtual stages per rank
  // What F, B, I, W cost per virtual stage (measured, or given to simulate --cost); null for
  // unit costs. Generators whose order depends on costs (zb-h1, zbv) build for these; the rest
  // ignore them.
  std::shared_ptr<const cost_model> costs;
};

using schedule_generator = std::function<plan(const schedule_request&)>;

struct schedule_info {
  std::string name;
  std::string description;
  bool builtin = false;
  int default_chunks = 1;  // what front ends use when the user gives no chunk count
  bool dynamic = false;    // a dynamic policy (policy_registry.hpp), not a plan generator
};

// Adds (or replaces a user-registered) schedule. Throws std::invalid_argument for an empty or
// whitespace-containing name, a name of a built-in or of a dynamic policy, or an empty generator.
void register_schedule(const std::string& name, schedule_generator generator, std::string description = "",
                       int default_chunks = 1);

// True for plan generators only (is_dynamic_policy answers for policies).
bool has_schedule(const std::string& name);

// Whether the generator's order may follow schedule_request::costs: zb-h1, zbv and every
// schedule a user registered (it gets the costs); not the other built-ins, whose plans are
// the same on any costs.
bool orders_by_cost(const std::string& name);

// The schedule's or dynamic policy's default_chunks (1 for an unknown name: make_schedule
// reports those).
int default_chunks(const std::string& name);

// Registered schedules and then dynamic policies (dynamic = true), built-ins first in a fixed
// order, then user ones in name order.
std::vector<schedule_info> list_schedules();

// Generates and validates. Throws std::invalid_argument for an unknown name (listing the known
// ones), a dynamic policy's name (it has no plan), a request a schedule does not accept ("1f1b needs microbatches >= stages: got
// microbatches=2, stages=4"), or a generator whose plan fails validation.
plan make_schedule(const std::string& name, const schedule_request& request);

}  // namespace actorpipe
