// Dynamic ordering policies by name, the sibling of schedule_registry for policies that pick
// actions as inputs arrive instead of following a plan. Built-in: greedy. User code adds its own
// before it trains or simulates (every process of a job runs the same binary, so each registers):
//
//   actorpipe::register_policy("my-policy", [](const actorpipe::policy_request& r) {
//     return std::make_unique<my_policy>(r.place, r.microbatches, r.rank, r.budget);
//   }, "what it does");
//   return actorpipe::cli_main(argc, argv, std::cout, std::cerr);  // train --schedule my-policy
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/schedule/placement.hpp"
#include "core/schedule/policy.hpp"
#include "core/schedule/schedule_registry.hpp"

namespace actorpipe {

// What one rank's policy is made for.
struct policy_request {
  placement place;         // the run's placement: the registration's kind, stages x chunks
  int microbatches = 1;    // M
  int rank = 0;            // the rank this policy drives
  int budget = 0;          // train --budget: the rank's limit on microbatches in flight (greedy: live
                           // activations of its first chunk); 0 = the policy's default
  bool split_backward = false;  // run I and W instead of B (as the registration asked)
};

using policy_factory = std::function<std::unique_ptr<rank_policy>(const policy_request&)>;

struct policy_options {
  std::string placement = "loop";  // "loop" (v = chunk * P + rank) or "v-shape"
  int default_chunks = 1;          // what front ends use when the user gives no chunk count
  bool split_backward = false;     // the policy's backward is I + W (handed on in policy_request)
};

// Adds (or replaces a user-registered) policy. Throws std::invalid_argument for an empty or
// whitespace-containing name, a name of a built-in policy or of a schedule (static or user),
// an empty factory, default_chunks < 1 or a placement other than loop and v-shape.
void register_policy(const std::string& name, policy_factory factory, std::string description = "",
                     policy_options options = {});

// True for the names of registered dynamic policies (greedy, and what user code registered).
bool is_dynamic_policy(const std::string& name);

// Registered policies (dynamic = true), built-ins first, then user ones in name order.
std::vector<schedule_info> list_policies();

// The placement `name` runs on with `stages` ranks and `chunks` chunks per rank.
placement policy_placement(const std::string& name, int stages, int chunks);

// Rank `rank`'s policy, checked: the factory must return one, listing exactly the rank's
// actions (F and B, or F, I and W, of every microbatch on each of its virtual stages). Throws
// std::invalid_argument naming the policy and what is wrong (an unknown name lists the known
// ones); the factory's own exceptions pass through. The policy returned also checks, as it
// runs, that every action it picks belongs to the rank, is ready and was not picked before
// (std::logic_error naming the policy, rank and action), so a faulty policy fails loudly
// instead of stalling the pipeline.
std::unique_ptr<rank_policy> make_policy(const std::string& name, int stages, int microbatches, int chunks, int rank,
                                         int budget = 0);

// Every rank's policy, rank 0 first.
std::vector<std::unique_ptr<rank_policy>> make_policies(const std::string& name, int stages, int microbatches,
                                                        int chunks, int budget = 0);

}  // namespace actorpipe
