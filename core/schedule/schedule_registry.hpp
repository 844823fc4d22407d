// Schedules by name. Each is a generator: (stages P, microbatches M, chunks V) -> plan.
// Built-ins: gpipe, 1f1b, interleaved, zb-h1, zbv, dualpipev. User code adds its own at run time:
//
//   actorpipe::register_schedule("my-1f1b", [](const actorpipe::schedule_request& r) { ... },
//                                "what it does");
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "core/schedule/plan.hpp"

namespace actorpipe {

struct schedule_request {
  int stages = 1;        // P: pipeline ranks
  int microbatches = 1;  // M
  int chunks = 1;        // V: virtual stages per rank
};

using schedule_generator = std::function<plan(const schedule_request&)>;

struct schedule_info {
  std::string name;
  std::string description;
  bool builtin = false;
  int default_chunks = 1;  // what front ends use when the user gives no chunk count
};

// Adds (or replaces a user-registered) schedule. Throws std::invalid_argument for an empty or
// whitespace-containing name, a name of a built-in, or an empty generator.
void register_schedule(const std::string& name, schedule_generator generator, std::string description = "",
                       int default_chunks = 1);

bool has_schedule(const std::string& name);

// The schedule's default_chunks (1 for an unknown name: make_schedule reports those).
int default_chunks(const std::string& name);

// Registered schedules, built-ins first, then user ones in name order.
std::vector<schedule_info> list_schedules();

// Generates and validates. Throws std::invalid_argument for an unknown name (listing the known
// ones), a request a schedule does not accept ("1f1b needs microbatches >= stages: got
// microbatches=2, stages=4"), or a generator whose plan fails validation.
plan make_schedule(const std::string& name, const schedule_request& request);

}  // namespace actorpipe
