// `actorpipe simulate`: build or load a plan, validate it, simulate it on a cost model and
// show the timeline and its numbers (text or JSON), optionally writing a Chrome trace and SVG.
#pragma once

#include <iosfwd>
#include <optional>
#include <string>
#include <vector>

#include "core/config.hpp"

namespace actorpipe {

struct simulate_options {
  std::optional<std::string> schedule;  // default 1f1b (or the config's)
  std::string schedule_file;   // when set, the plan comes from this file instead
  std::string config_path;     // job config (JSON): schedule, pp, num_microbatches, chunks
  // The config as read, once per run of the command (a pipe gives its text once; the request
  // is resolved more than once).
  mutable std::optional<job_config> config_read;
  std::vector<std::string> overrides;  // "key=value" applied to the config, in order
  std::optional<int> stages;   // default 4 (from the file when one is given)
  std::optional<int> microbatches;  // default 8 (from the file)
  std::optional<int> chunks;   // default: the schedule's default_chunks (from the file)
  std::string cost = "1,2,1,1";  // F,B,I,W
  std::string costs_from;  // a Chrome trace (train --trace): per-(op, virtual stage) median costs instead
  double send_latency = 0;
  bool early_input_grad = false;  // B's input gradient leaves after its I part, as `train` runs it
  std::string format = "text";  // text | json
  std::string trace_path;
  std::string svg_path;
  bool print_plan = false;
  int width = 200;
  int budget = 0;  // a dynamic policy's budget, as train --budget (0: the policy's default)
};

// With a config (--config and/or --set), the schedule comes from the resolved, validated job
// config; --schedule/--stages/--microbatches/--chunks act as overrides of schedule, pp,
// num_microbatches and chunks. A plan needs no batch size: without one the batch rules are
// skipped (num_microbatches as given; 1 when pp == 1). send_latency may be at most
// max_cost_ratio times the smallest cost (cost_model.hpp). Throws std::invalid_argument (or std::runtime_error for I/O) with a one-line message.
void run_simulate(const simulate_options& opt, std::ostream& out);

// The registered schedules, one per line with their description.
void list_schedules_command(std::ostream& out);

}  // namespace actorpipe
