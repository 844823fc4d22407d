// Chrome trace writer.
#include "core/sim/chrome_trace.hpp"

#include <nlohmann/json.hpp>

namespace actorpipe {

namespace {
const char* op_name(op_kind op) {
  switch (op) {
    case op_kind::forward: return "forward";
    case op_kind::backward: return "backward";
    case op_kind::input_grad: return "input_grad";
    case op_kind::weight_grad: return "weight_grad";
  }
  return "?";
}
}  // namespace

std::string render_chrome_trace(const sim_result& r) {
  using nlohmann::json;
  json events = json::array();
  events.push_back({{"name", "process_name"}, {"ph", "M"}, {"pid", 0},
                    {"args", {{"name", "actorpipe simulate " + r.schedule}}}});
  for (int rank = 0; rank < r.stages; ++rank) {
    events.push_back({{"name", "thread_name"}, {"ph", "M"}, {"pid", 0}, {"tid", rank},
                      {"args", {{"name", "rank " + std::to_string(rank)}}}});
    events.push_back({{"name", "thread_sort_index"}, {"ph", "M"}, {"pid", 0}, {"tid", rank},
                      {"args", {{"sort_index", rank}}}});
  }
  for (const auto& e : r.events) {
    json args = {{"virtual_stage", e.act.virtual_stage}, {"microbatch", e.act.microbatch}};
    // A B that sent its input gradient before its weight part: when (trace microseconds).
    if (e.output_at >= 0) args["input_grad_sent_at"] = e.output_at * 1000.0;
    events.push_back({{"name", to_string(e.act)},
                      {"cat", op_name(e.act.op)},
                      {"ph", "X"},
                      {"pid", 0},
                      {"tid", e.rank},
                      {"ts", e.start * 1000.0},  // trace timestamps are microseconds
                      {"dur", (e.end - e.start) * 1000.0},
                      {"args", args}});
  }
  json doc = {{"traceEvents", events},
              {"displayTimeUnit", "ms"},
              {"otherData",
               {{"schedule", r.schedule},
                {"stages", r.stages},
                {"chunks", r.chunks},
                {"microbatches", r.microbatches},
                {"makespan", r.makespan},
                {"bubble_ratio", r.bubble_ratio}}}};
  return doc.dump(1) + "\n";
}

}  // namespace actorpipe
