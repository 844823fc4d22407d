// Chrome trace writer.
#include "core/sim/chrome_trace.hpp"

#include <algorithm>

#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdint>

#include <stdexcept>

#include "core/json_shape.hpp"
#include "core/schedule/plan.hpp"
#include "core/text_file.hpp"

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

sim_result in_milliseconds(sim_result r) {
  for (auto& e : r.events) {
    e.start *= 1000, e.end *= 1000;
    if (e.output_at >= 0) e.output_at *= 1000;  // an early B's input gradient
  }
  r.makespan *= 1000;
  return r;
}

std::string render_chrome_trace(const sim_result& r, const std::string& title,
                                const std::vector<std::pair<std::string, std::string>>& about) {
  using nlohmann::json;
  // Written event by event, as one document's dump(1) would be (keys in order, one space an
  // indent level): the whole document as one json tree took 8 GB for a trace of 600 MB.
  const auto dumped = [](const json& j, int depth) {  // names that are not UTF-8: U+FFFD
    std::string text = j.dump(1, ' ', false, json::error_handler_t::replace), out(static_cast<std::size_t>(depth), ' ');
    out.reserve(text.size() + text.size() / 8);
    for (char c : text) {
      out += c;
      if (c == '\n') out.append(static_cast<std::size_t>(depth), ' ');
    }
    return out;
  };
  json other = {{"schedule", r.schedule},          {"stages", r.stages},      {"chunks", r.chunks},
                {"microbatches", r.microbatches}, {"makespan", r.makespan}, {"bubble_ratio", r.bubble_ratio}};
  for (const auto& [key, value] : about) other[key] = value;
  std::string out = "{\n \"displayTimeUnit\": \"ms\",\n \"otherData\": " + dumped(other, 1).substr(1) + ",\n \"traceEvents\": [\n";
  const auto add = [&](const json& event) { out += dumped(event, 2) + ",\n"; };
  add({{"name", "process_name"}, {"ph", "M"}, {"pid", 0},
       {"args", {{"name", title.empty() ? "actorpipe simulate " + r.schedule : title}}}});
  for (int rank = 0; rank < r.stages; ++rank) {
    add({{"name", "thread_name"}, {"ph", "M"}, {"pid", 0}, {"tid", rank}, {"args", {{"name", "rank " + std::to_string(rank)}}}});
    add({{"name", "thread_sort_index"}, {"ph", "M"}, {"pid", 0}, {"tid", rank}, {"args", {{"sort_index", rank}}}});
  }
  // Each rank's events in time order (a W that paused for an F or I was listed after what
  // ran in its pause); ties keep their order.
  std::vector<std::size_t> order(r.events.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&r](std::size_t a, std::size_t b) {
    const auto& x = r.events[a];
    const auto& y = r.events[b];
    return x.rank != y.rank ? x.rank < y.rank : x.start < y.start;
  });
  for (const std::size_t i : order) {
    const auto& e = r.events[i];
    json args = {{"virtual_stage", e.act.virtual_stage}, {"microbatch", e.act.microbatch}};
    // A B that sent its input gradient before its weight part: when (trace microseconds).
    if (e.output_at >= 0) args["input_grad_sent_at"] = e.output_at * 1000.0;
    if (e.continues) args["continues"] = true;  // a W paused here; a later event ends it
    add({{"name", to_string(e.act)},
         {"cat", op_name(e.act.op)},
         {"ph", "X"},
         {"pid", 0},
         {"tid", e.rank},
         {"ts", e.start * 1000.0},  // trace timestamps are microseconds
         {"dur", (e.end - e.start) * 1000.0},
         {"args", args}});
  }
  out.resize(out.size() - 2);  // the last event's ",\n"
  out += "\n ]\n}\n";
  return out;
}

std::vector<timeline_event> read_chrome_trace(const std::string& json_text, const std::string& what) {
  using nlohmann::json;
  // Nested past a bound, a value's copy or print overflowed the stack.
  if (const json_shape shape = check_json_shape(json_text); !shape.problem.empty())
    throw std::invalid_argument(what + " " + shape.problem);
  json doc;
  try {
    doc = json::parse(json_text);
  } catch (const json::exception& e) {
    throw std::invalid_argument(what + " is not JSON: " + e.what());
  }
  if (!doc.is_object() || !doc.contains("traceEvents") || !doc["traceEvents"].is_array())
    throw std::invalid_argument(what + " has no traceEvents array (a Chrome trace from actorpipe train or simulate --trace)");
  std::vector<timeline_event> out;
  for (const auto& e : doc["traceEvents"]) {
    // Fields of another type than a trace's are the file's fault, said as such (json::value
    // threw its own type_error: exit 1, naming no file).
    const auto text = [&e](const char* key) {
      const auto it = e.find(key);
      return it == e.end() ? std::string() : it->is_string() ? it->get<std::string>() : it->dump();
    };
    if (!e.is_object() || text("ph") != "X") continue;
    const std::string name = e.contains("name") ? shown_text(text("name"), 200) : "?";
    const auto bad = [&](const std::string& why) {
      return std::invalid_argument(what + ": event '" + name + "' " + why);
    };
    const std::string cat = shown_text(text("cat"), 200);
    timeline_event t;
    if (cat == "forward") t.act.op = op_kind::forward;
    else if (cat == "backward") t.act.op = op_kind::backward;
    else if (cat == "input_grad") t.act.op = op_kind::input_grad;
    else if (cat == "weight_grad") t.act.op = op_kind::weight_grad;
    else throw bad("has cat '" + cat + "', not forward, backward, input_grad or weight_grad");
    for (const char* key : {"tid", "ts", "dur"})
      if (!e.contains(key) || !e[key].is_number()) throw bad(std::string("has no number ") + key);
    if (!e.contains("args") || !e["args"].is_object()) throw bad("has no args");
    const json& args = e["args"];
    // Whole numbers >= 0, and within what a plan may hold (plan.hpp), so that nothing sized by
    // them is absurd. Read as unsigned where they are (2^63 + 1 read as 1 through get<int>).
    const auto negative = [](const json& v) { return !v.is_number_unsigned() && v.get<long long>() < 0; };
    for (const char* key : {"virtual_stage", "microbatch"})
      if (!args.contains(key) || !args[key].is_number_integer() || negative(args[key]))
        throw bad(std::string("has no args.") + key + " >= 0");
    for (const char* key : {"virtual_stage", "microbatch"})
      if (args[key].get<std::uint64_t>() >= static_cast<std::uint64_t>(max_plan_forwards))
        throw bad(std::string("has args.") + key + " " + args[key].dump() + ", past any plan (< " +
                  std::to_string(max_plan_forwards) + ")");
    if (!e["tid"].is_number_integer() || negative(e["tid"]) ||
        e["tid"].get<std::uint64_t>() >= static_cast<std::uint64_t>(max_plan_forwards))
      throw bad("has tid " + e["tid"].dump() + ", not a rank");
    const double ts = e["ts"].get<double>(), dur = e["dur"].get<double>();
    if (!std::isfinite(ts) || std::abs(ts) > 1e100) throw bad("has ts " + e["ts"].dump() + ", not a time");
    if (!std::isfinite(dur) || dur < 0) throw bad("has dur " + e["dur"].dump() + ", not a duration >= 0");
    if (dur > 1e100) throw bad("has dur " + e["dur"].dump() + ", past any step (at most 1e100 microseconds)");
    t.rank = e["tid"].get<int>();
    t.act.virtual_stage = args["virtual_stage"].get<int>();
    t.act.microbatch = args["microbatch"].get<int>();
    t.start = ts / 1000.0;
    t.end = t.start + dur / 1000.0;
    if (args.contains("input_grad_sent_at") && args["input_grad_sent_at"].is_number()) {
      // Within its B (a time outside gave negative I or W costs).
      const double at = args["input_grad_sent_at"].get<double>();
      const double slack = 1e-9 * (std::abs(ts) + dur + 1);  // the written numbers' rounding
      if (!std::isfinite(at) || at < ts - slack || at > ts + dur + slack)
        throw bad("has args.input_grad_sent_at " + args["input_grad_sent_at"].dump() + ", outside its action (ts " +
                  e["ts"].dump() + ", dur " + e["dur"].dump() + ")");
      t.output_at = at / 1000.0;
    }
    t.continues = args.contains("continues") && args["continues"].is_boolean() && args["continues"].get<bool>();
    out.push_back(t);
  }
  if (out.empty()) throw std::invalid_argument(what + " has no actions (no \"X\" events)");
  return out;
}

}  // namespace actorpipe
