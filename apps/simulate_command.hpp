// `actorpipe simulate`: build or load a plan, validate it, simulate it on a cost model and
// show the timeline and its numbers (text or JSON), optionally writing a Chrome trace and SVG.
#pragma once

#include <iosfwd>
#include <optional>
#include <string>

namespace actorpipe {

struct simulate_options {
  std::string schedule = "1f1b";
  std::string schedule_file;   // when set, the plan comes from this file instead
  std::optional<int> stages;   // default 4 (from the file when one is given)
  std::optional<int> microbatches;  // default 8 (from the file)
  std::optional<int> chunks;   // default 2 for interleaved and zbv, 1 otherwise (from the file)
  std::string cost = "1,2,1,1";  // F,B,I,W
  double send_latency = 0;
  std::string format = "text";  // text | json
  std::string trace_path;
  std::string svg_path;
  bool print_plan = false;
  int width = 200;
};

// Throws std::invalid_argument (or std::runtime_error for I/O) with a one-line message.
void run_simulate(const simulate_options& opt, std::ostream& out);

// The registered schedules, one per line with their description.
void list_schedules_command(std::ostream& out);

}  // namespace actorpipe
