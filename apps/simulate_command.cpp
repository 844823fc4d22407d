// `actorpipe simulate` implementation (no CLI parsing here; see cli.cpp).
#include "apps/simulate_command.hpp"
#include "apps/file_roles.hpp"
#include "core/text_file.hpp"
#include "core/number_text.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <ostream>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "core/config.hpp"
#include "core/schedule/plan_validator.hpp"
#include "core/schedule/policy_registry.hpp"
#include "core/sim/policy_simulator.hpp"
#include "core/schedule/schedule_registry.hpp"
#include "core/sim/chrome_trace.hpp"
#include "core/sim/plan_choice.hpp"
#include "core/sim/simulator.hpp"
#include "core/sim/timeline_ascii.hpp"
#include "core/sim/timeline_svg.hpp"

namespace actorpipe {
namespace {

// simulate's files are its output: a path that takes no writes is a bad request (exit 2).
void write_file(const std::string& path, const std::string& what, const std::string& content) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec))
    throw std::invalid_argument("cannot write " + what + " to '" + path + "': it is a directory, give a file name");
  errno = 0;
  std::ofstream f(path, std::ios::binary);
  if (!f)
    throw std::invalid_argument("cannot write " + what + " to '" + path + "'" +
                                (errno ? std::string(": ") + std::strerror(errno) : std::string()));
  if (!(f << content << std::flush)) {  // a full disk: no cut file left, and a failure (exit 1), as train's --trace
    const std::string why = errno ? std::string(": ") + std::strerror(errno) : std::string();
    f.close();
    if (std::filesystem::is_regular_file(path, ec)) std::filesystem::remove(path, ec);
    throw std::runtime_error("cannot write " + what + " to '" + path + "'" + why);
  }
}

void require_match(const char* flag, const std::optional<int>& given, int in_file, const std::string& path) {
  if (given && *given != in_file)
    throw std::invalid_argument(std::string(flag) + "=" + std::to_string(*given) + " but schedule file '" + path +
                                "' has " + std::to_string(in_file));
}


// The job config behind a --config / --set request, flags applied last. Resolved for a plan:
// no batch size is needed unless the config gives one (config.hpp, resolve_for_plan).
job_config resolve_config(const simulate_options& opt) {
  job_config c;
  if (!opt.config_path.empty()) {
    if (!opt.config_read) opt.config_read = load_config_file(opt.config_path);
    c = *opt.config_read;
  } else {  // --set alone: what the flags default to (it started from pp=1, chunks=1)
    c.pp = 4;
  }
  const bool flags_over_config =
      refuse_flag_and_override(opt.overrides, {{"--schedule", "schedule", opt.schedule.has_value()},
                                               {"--stages", "pp", opt.stages.has_value()},
                                               {"--microbatches", "num_microbatches", opt.microbatches.has_value()},
                                               {"--chunks", "chunks", opt.chunks.has_value()}});
  apply_overrides(c, opt.overrides);
  if (opt.schedule) apply_override(c, "schedule", *opt.schedule);
  if (opt.stages) apply_override(c, "pp", std::to_string(*opt.stages));
  if (opt.microbatches) apply_override(c, "num_microbatches", std::to_string(*opt.microbatches));
  if (opt.chunks) apply_override(c, "chunks", std::to_string(*opt.chunks));
  // Without a config file or a chunk count, the schedule's own (2 for interleaved, zbv and
  // dualpipev), as train does.
  if (opt.config_path.empty() && !opt.chunks && !overrides_give(opt.overrides, "chunks")) c.chunks = default_chunks(c.schedule);
  // As train resolves it (one request, one plan): neither a microbatch count nor a size (flags,
  // --set, or a config that gives neither): 8 microbatches, or a batch --set alone cut into 8, or
  // the largest of 4, 2, 1 that divides it (a config's batch alone is the config's rules' to
  // refuse: with pp > 1 it needs one of the two); a microbatch size without any batch size: 8
  // of them. (A config's batch was cut here and refused by train; a size alone, the reverse.)
  const bool batch_set = overrides_give(opt.overrides, "batch_size");
  const bool global_set = overrides_give(opt.overrides, "global_batch_size");
  if (c.num_microbatches == 0 && c.microbatch_size == 0) {
    if (c.batch_size > 0) {
      if (batch_set) c.num_microbatches = microbatches_of_batch(c.batch_size);
    } else if (c.global_batch_size > 0) {
      if (global_set && c.dp >= 1 && c.global_batch_size % c.dp == 0)
        c.num_microbatches = microbatches_of_batch(c.global_batch_size / c.dp);
    } else {
      c.num_microbatches = 8;
    }
  } else if (c.num_microbatches == 0 && c.batch_size == 0 && c.global_batch_size == 0) {
    c.num_microbatches = 8;
  }
  // The three apart, one of them typed (-M or --set): refused, as train refuses it.
  require_typed_batch_keys_agree(c, opt.overrides,
                                 opt.microbatches ? std::map<std::string, std::string>{{"num_microbatches", "--microbatches"}}
                                                  : std::map<std::string, std::string>{});
  try {
    resolve_for_plan(c);
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument(with_config_file(e.what(), opt.config_path, flags_over_config));
  }
  return c;
}

// The config behind --config / --set, its lines added to the summary.
job_config described_config(const simulate_options& opt, std::vector<std::string>& summary) {
  if (!opt.schedule_file.empty()) throw std::invalid_argument("--schedule-file cannot be combined with --config or --set");
  job_config c = resolve_config(opt);
  const std::string batching =
      c.batch_size == 0  // no batch size given: the plan needs only the microbatch count
          ? "num_microbatches=" + std::to_string(c.num_microbatches) + " (no batch size given)"
          : "batch_size=" + std::to_string(c.batch_size) + " = num_microbatches " +
                std::to_string(c.num_microbatches) + " x microbatch_size " + std::to_string(c.microbatch_size) +
                ", global_batch_size=" + std::to_string(c.global_batch_size);
  summary.push_back("config" + (opt.config_path.empty() ? std::string() : " " + opt.config_path) +
                    ": pp=" + std::to_string(c.pp) + " dp=" + std::to_string(c.dp) + " tp=" +
                    std::to_string(c.tp) + " (world_size=" + std::to_string(c.world_size) + "), " + batching);
  for (const auto& n : c.notes) summary.push_back("note: " + n);
  return c;
}

plan build_plan(const simulate_options& opt, std::vector<std::string>& summary,
                const std::shared_ptr<const cost_model>& costs) {
  if (!opt.config_path.empty() || !opt.overrides.empty()) {
    job_config c = described_config(opt, summary);
    return make_schedule(c.schedule, {c.pp, c.num_microbatches, c.chunks, costs});
  }
  if (!opt.schedule_file.empty()) {
    plan p = load_plan_file(opt.schedule_file);
    require_match("--stages", opt.stages, p.num_ranks(), opt.schedule_file);
    require_match("--microbatches", opt.microbatches, p.microbatches, opt.schedule_file);
    require_match("--chunks", opt.chunks, p.chunks(), opt.schedule_file);
    return p;
  }
  schedule_request req;
  req.stages = opt.stages.value_or(4);
  req.microbatches = opt.microbatches.value_or(8);
  const std::string name = opt.schedule.value_or("1f1b");
  req.chunks = opt.chunks.value_or(default_chunks(name));
  req.costs = costs;
  return make_schedule(name, req);
}

// --costs-from: the trace's per-(op, virtual stage) medians, and how many virtual stages it has.
struct traced_costs {
  cost_model costs;
  int virtual_stages = 0;
  size_t actions = 0;
  std::string halved;  // the virtual stages whose I and W are half of their B (none timed apart)
};

traced_costs read_costs_from(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec))
    throw std::invalid_argument("--costs-from '" + path + "' is a directory: give the trace file (train --trace)");
  if (!std::filesystem::exists(path, ec))
    throw std::invalid_argument("--costs-from: cannot read '" + path + "': no such file");
  // A trace of one step of 16 stages and 1024 microbatches is about 10 MB: past 256 MiB (or
  // /dev/zero) it is not one, and is not read until memory runs out.
  const auto text = read_text_at_most(path, std::size_t{256} << 20, "--costs-from '" + path + "'");
  if (!text)
    throw std::invalid_argument("--costs-from '" + path + "' holds more than 256 MiB, more than it reads (the medians of "
                                "each op's costs need no such length: a trace of fewer microbatches gives them)");
  const std::vector<timeline_event> events = read_chrome_trace(*text, "--costs-from '" + path + "'");
  traced_costs t;
  for (const auto& e : events) t.virtual_stages = std::max(t.virtual_stages, e.act.virtual_stage + 1);
  t.costs = median_costs(events, t.virtual_stages);
  t.actions = actions_in(events);
  // Virtual stages whose backward the trace timed only whole (a plan without I and W, and a
  // B that did not send its input gradient early): their I and W are half of B each.
  std::vector<bool> timed_apart(static_cast<std::size_t>(t.virtual_stages), false);
  std::vector<int> has_i(static_cast<std::size_t>(t.virtual_stages), 0), has_w(has_i), has_f(has_i), has_b(has_i);
  for (const auto& e : events) {
    const auto v = static_cast<std::size_t>(e.act.virtual_stage);
    has_f[v] |= e.act.op == op_kind::forward;
    has_b[v] |= e.act.op != op_kind::forward;
    if (e.act.op == op_kind::input_grad || e.act.op == op_kind::weight_grad ||
        (e.act.op == op_kind::backward && e.output_at >= 0))
      timed_apart[v] = true;
    has_i[v] |= e.act.op == op_kind::input_grad || (e.act.op == op_kind::backward && e.output_at >= 0);
    has_w[v] |= e.act.op == op_kind::weight_grad || (e.act.op == op_kind::backward && e.output_at >= 0);
  }
  // I without W (or W without I): the missing half was read as free.
  for (int v = 0; v < t.virtual_stages; ++v)
    if (has_i[static_cast<std::size_t>(v)] != has_w[static_cast<std::size_t>(v)])
      throw std::invalid_argument("--costs-from '" + path + "': virtual stage " + std::to_string(v) + " has " +
                                  (has_i[static_cast<std::size_t>(v)] ? "I times but no W time" : "W times but no I time") +
                                  " (a trace of a whole step times both halves of every split backward)");
  for (int v = 0; v < t.virtual_stages; ++v)
    if (!timed_apart[static_cast<std::size_t>(v)]) {  // 0 (unknown) made a plan's I and W free
      t.costs.input_grad[v] = t.costs.weight_grad[v] = t.costs.backward[v] / 2;
      t.halved += (t.halved.empty() ? "" : ", ") + std::to_string(v);
    }
  // Every virtual stage needs its F and its backward (B, or I and W) in the trace.
  for (int v = 0; v < t.virtual_stages; ++v)
    if (!(t.costs.forward[v] > 0) || !(t.costs.backward[v] > 0)) {
      const bool forward = !(t.costs.forward[v] > 0);
      // Timed, at 0 ("dur": 0): not missing, but no cost to plan on either.
      if (forward ? has_f[static_cast<std::size_t>(v)] : has_b[static_cast<std::size_t>(v)])
        throw std::invalid_argument("--costs-from '" + path + "': virtual stage " + std::to_string(v) + "'s " +
                                    (forward ? "forward" : "backward") +
                                    " takes 0 (the median of its \"dur\"): a plan needs every op's cost > 0");
      throw std::invalid_argument("--costs-from '" + path + "': virtual stage " + std::to_string(v) + " has " +
                                  (t.costs.forward[v] > 0 ? "no backward time" : "no forward time") +
                                  " (a trace of a whole step times every op on every virtual stage" +
                                  (v + 1 < t.virtual_stages ? "; this one's go up to " + std::to_string(t.virtual_stages - 1)
                                                            : std::string()) +
                                  ")");
    }
  // As --cost: costs too far apart would round away beside each other (an event's wrong dur).
  const double least = smallest_cost(t.costs), most = largest_cost(t.costs);
  if (most > max_cost_ratio * least)
    throw std::invalid_argument("--costs-from '" + path + "': its median costs run from " + printf_text("%.10g", least) +
                                " to " + printf_text("%.10g", most) + ", more than " +
                                printf_text("%.10g", max_cost_ratio) +
                                " times apart: the smaller would round away next to the larger (is an event's dur wrong?)");
  return t;
}

// A plan or policy for `stages` virtual stages on costs traced for `traced` of them: one error.
void require_traced_stages(const simulate_options& opt, int traced, int stages, int ranks, int chunks) {
  if (opt.costs_from.empty() || traced == stages) return;
  throw std::invalid_argument("--costs-from '" + opt.costs_from + "' has costs for " + std::to_string(traced) +
                              " virtual stages, but the schedule has " + std::to_string(stages) + " (stages " +
                              std::to_string(ranks) + " x chunks " + std::to_string(chunks) + ")");
}

// Refuses an output format, send latency or timeline width simulate cannot use.
void check_output_options(const simulate_options& opt) {
  if (opt.budget < 0) throw std::invalid_argument("--budget must be >= 0 (0 = the policy's default): got " + std::to_string(opt.budget));
  if (opt.format != "text" && opt.format != "json" && opt.format != "plan")
    throw std::invalid_argument("--format must be text, json or plan, got '" + opt.format + "'");
  if (!std::isfinite(opt.send_latency) || opt.send_latency < 0 || opt.send_latency > max_cost)
    throw std::invalid_argument("--latency must be a number in [0, " + number_text(max_cost) + "], got " +
                                number_text(opt.send_latency));
  if (opt.width < 40) throw std::invalid_argument("--width must be >= 40, got " + std::to_string(opt.width));
}

// A send latency so much larger than the costs that they would round away beside it.
void check_latency_against(const cost_model& costs) {
  const double least = smallest_cost(costs);
  if (costs.send_latency > max_cost_ratio * least)
    throw std::invalid_argument("--latency " + printf_text("%.10g", costs.send_latency) + " is more than " +
                                printf_text("%.10g", max_cost_ratio) + " times the smallest cost (" +
                                printf_text("%.10g", least) + "): the costs would round away next to it; give at most " +
                                printf_text("%.10g", max_cost_ratio * least));
}

// What was simulated: the plan (built, loaded, or the order a dynamic policy chose), its
// timeline, and the lines to show before the results.
struct simulation {
  plan p;
  sim_result r;
  std::vector<std::string> summary;  // config lines, shown before the results
  std::string dynamic_note;          // text output only
  int traced_stages = 0;             // --costs-from: the virtual stages its costs cover
};

// A dynamic policy has no plan up front: runs it in the policy simulator, and keeps the order
// it chose as the plan (--print-plan), which is what the runtime would run on these costs.
void simulate_dynamic_policy(const simulate_options& opt, const std::string& name, const cost_model& costs,
                             bool from_config, simulation& s) {
  std::optional<job_config> config;
  if (from_config) config = described_config(opt, s.summary);
  const int P = config ? config->pp : opt.stages.value_or(4);
  const int M = config ? config->num_microbatches : opt.microbatches.value_or(8);
  const int V = config ? config->chunks : opt.chunks.value_or(default_chunks(name));
  if (P < 1 || M < 1 || V < 1)
    throw std::invalid_argument("stages, microbatches and chunks must be >= 1: got stages=" + std::to_string(P) +
                                ", microbatches=" + std::to_string(M) + ", chunks=" + std::to_string(V));
  require_traced_stages(opt, s.traced_stages, P * V, P, V);
  auto policies = make_policies(name, P, M, V, opt.budget);
  auto res = simulate_policies(policy_placement(name, P, V), M, policies, costs, name);
  s.p = std::move(res.executed);
  s.r = std::move(res.timeline);
  s.dynamic_note = "dynamic policy: no plan to validate; it ran in the policy simulator, which chose this order";
}

// Builds (or loads) the plan and simulates it. Costs other than the unit ones (or a send
// latency) shape the plans of cost-aware schedules (zb-h1, zbv); the unit-cost plan is then
// simulated beside it for comparison. Costs from a trace get the plan `train` would choose
// after measuring them (plan_choice.hpp: also rebuilt with the ranks' speeds made equal).
void simulate_plan(const simulate_options& opt, const cost_model& costs, simulation& s) {
  const bool traced = !opt.costs_from.empty();
  const bool given = traced || opt.cost != simulate_options{}.cost || costs.send_latency > 0;
  if (traced) {
    auto unit = std::make_shared<const plan>(build_plan(opt, s.summary, nullptr));
    require_traced_stages(opt, s.traced_stages, unit->num_virtual_stages(), unit->num_ranks(), unit->chunks());
    if (!opt.schedule_file.empty()) {
      s.p = *unit;
      s.r = simulate(s.p, costs);
      return;
    }
    const plan_choice c = choose_plan(unit->name, unit->num_ranks(), unit->microbatches, unit->place, costs, unit);
    s.p = *c.use;
    s.r = c.on_measured;
    if (c.candidates == 1) return;  // a schedule that does not order by cost
    char line[320];
    std::snprintf(line, sizeof line,
                  "plan chosen for these costs as train chooses after a measured step: %s; makespan %s, bubble "
                  "%.2f%% (the unit-cost plan: makespan %s, bubble %.2f%%)",
                  c.built_on == "running"        ? "the unit-cost plan, kept"
                  : c.built_on == "equal speeds" ? "built on them with the ranks' speeds made equal"
                                                 : "built on them",
                  number_text(s.r.makespan).c_str(), 100.0 * s.r.bubble_ratio,
                  number_text(c.running_on_measured.makespan).c_str(), 100.0 * c.running_on_measured.bubble_ratio);
    s.summary.push_back(line);
    return;
  }
  s.p = build_plan(opt, s.summary, given ? std::make_shared<const cost_model>(costs) : nullptr);
  s.r = simulate(s.p, costs);
  if (!given || !opt.schedule_file.empty()) return;
  std::vector<std::string> ignored;
  const plan unit = build_plan(opt, ignored, nullptr);
  if (format_plan(unit) == format_plan(s.p)) return;
  const sim_result u = simulate(unit, costs);
  char line[200];
  std::snprintf(line, sizeof line,
                "plan built for these costs: makespan %s, bubble %.2f%% (the unit-cost plan on these costs: "
                "makespan %s, bubble %.2f%%)",
                number_text(s.r.makespan).c_str(), 100.0 * s.r.bubble_ratio, number_text(u.makespan).c_str(),
                100.0 * u.bubble_ratio);
  s.summary.push_back(line);
}

// The results as one JSON document.
void print_json(std::ostream& out, const simulate_options& opt, const simulation& s) {
  const sim_result& r = s.r;
  nlohmann::json per_rank = nlohmann::json::array();
  for (int rank = 0; rank < r.stages; ++rank)
    per_rank.push_back({{"busy", r.busy[rank]},
                        {"idle", r.idle[rank]},
                        {"peak_activations", r.peak_activations[rank]},
                        {"peak_pending_weight_grads", r.peak_pending_weight_grads[rank]}});
  nlohmann::json j = {{"schedule", r.schedule},   {"stages", r.stages},
                      {"chunks", r.chunks},       {"microbatches", r.microbatches},
                      {"makespan", r.makespan},   {"ideal_time", r.ideal_time},
                      {"bubble_ratio", r.bubble_ratio}, {"per_rank", per_rank}};
  if (opt.print_plan) j["plan"] = format_plan(s.p);
  if (!s.summary.empty()) j["config"] = s.summary;
  out << j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) << '\n';  // a file name that is not UTF-8: U+FFFD
}

// Each rank's busy and idle time and peak activations (and pending weight grads when the plan
// splits backward), with a note on what they count.
void print_rank_table(std::ostream& out, const simulation& s) {
  const sim_result& r = s.r;
  const bool split = s.p.uses_split_backward();
  out << "rank  busy        idle        peak activations" << (split ? "  peak pending W" : "") << '\n';
  for (int rank = 0; rank < r.stages; ++rank) {
    char line[128];
    std::snprintf(line, sizeof line, "%-5d %-11s %-11s %-17d", rank, number_text(r.busy[rank]).c_str(),
                  number_text(r.idle[rank]).c_str(), r.peak_activations[rank]);
    std::string l = line;
    if (split) l += " " + std::to_string(r.peak_pending_weight_grads[rank]);
    while (!l.empty() && l.back() == ' ') l.pop_back();
    out << l << '\n';
  }
  out << "(activations: stashes of one microbatch on one virtual stage, live from F until B or I";
  out << (split ? "; pending W: I done, W not yet, holding only the weight-grad inputs)\n" : ")\n");
}

// The results as text: the schedule and costs, the summary, the ASCII timeline, the totals and
// the per-rank table, then the files written.
void print_text(std::ostream& out, const simulate_options& opt, const cost_model& costs, const simulation& s) {
  const sim_result& r = s.r;
  const auto each = [](const std::vector<double>& v) {  // "1.5" or, per virtual stage, "16.5/16.4/16.3/17.4"
    std::string t;
    for (double x : v) t += (t.empty() ? "" : "/") + number_text(x);
    return t;
  };
  out << "schedule " << r.schedule << ": stages=" << r.stages << ", chunks=" << r.chunks
      << ", microbatches=" << r.microbatches << "; cost F=" << each(costs.forward) << " B=" << each(costs.backward)
      << " I=" << each(costs.input_grad) << " W=" << each(costs.weight_grad)
      << ", send latency " << number_text(costs.send_latency)
      << (costs.early_input_grad ? "; B sends its input gradient after I" : "") << '\n';
  for (const auto& line : s.summary) out << line << '\n';
  if (!s.dynamic_note.empty()) out << s.dynamic_note << '\n';
  out << '\n';
  if (opt.print_plan) out << format_plan(s.p) << '\n';
  out << render_ascii_timeline(r, opt.width) << '\n';
  out << "makespan      " << number_text(r.makespan) << '\n';
  out << "ideal time    " << number_text(r.ideal_time) << "  (busiest rank's compute, no bubble)\n";
  char pct[32];
  std::snprintf(pct, sizeof pct, "%.2f%%", 100.0 * r.bubble_ratio);
  out << "bubble ratio  " << pct << "  (1 - total busy / (stages * makespan))\n\n";
  print_rank_table(out, s);
  if (!opt.trace_path.empty()) out << "wrote Chrome trace " << shown_path(opt.trace_path) << " (open in ui.perfetto.dev)\n";
  if (!opt.svg_path.empty()) out << "wrote SVG timeline " << shown_path(opt.svg_path) << '\n';
}

}  // namespace

void list_schedules_command(std::ostream& out) {
  const auto all = list_schedules();
  std::size_t width = 13;  // one column for the descriptions, however long a user's name is
  for (const auto& s : all) width = std::max(width, s.name.size());
  for (const auto& s : all) {
    std::string name = s.name;
    name.resize(width, ' ');
    out << name << ' ' << (s.dynamic ? "[dynamic policy] " : "") << s.description << '\n';
  }
}

void run_simulate(const simulate_options& opt, std::ostream& out) {
  // Named as given (the schedule's own rule read "stages must be >= 1: got stages=0").
  for (const auto& [flag, value] : {std::pair<const char*, const std::optional<int>&>{"--stages", opt.stages},
                                    {"--microbatches", opt.microbatches},
                                    {"--chunks", opt.chunks}})
    if (value && *value < 1) throw std::invalid_argument(std::string(flag) + " must be >= 1: got " + std::to_string(*value));
  check_output_options(opt);
  check_distinct_files({{"--trace", opt.trace_path}, {"--svg", opt.svg_path}},
                       {{"--schedule-file", opt.schedule_file}, {"--costs-from", opt.costs_from}, {"--config", opt.config_path}});
  // Before the simulation, which may take minutes (--cost on a large zero-bubble plan): a path
  // found wrong after it lost the result.
  if (!opt.trace_path.empty()) check_output_file("--trace", opt.trace_path, false);
  if (!opt.svg_path.empty()) check_output_file("--svg", opt.svg_path, false);
  simulation s;
  cost_model costs;
  if (opt.costs_from.empty()) {
    costs = parse_cost_spec(opt.cost);
    costs.early_input_grad = opt.early_input_grad;
    // Costs read 0 as "not measured", and an early B then hands its gradient on at its end:
    // I=0 asked for at once simulated the late one without a word.
    if (opt.early_input_grad)
      for (const double i : costs.input_grad)
        if (i <= 0)
          throw std::invalid_argument("--early-input-grad with --cost " + opt.cost +
                                      ": I=0 says when B sends its input gradient (after I): give I > 0");
    if (const std::string note = cost_spec_note(costs); !note.empty()) s.summary.push_back("note: " + note);
  } else {
    const traced_costs t = read_costs_from(opt.costs_from);
    costs = t.costs;  // early_input_grad where the trace's B sent their gradients early
    s.traced_stages = t.virtual_stages;
    s.summary.push_back("costs from " + opt.costs_from + ": the median of each op on each virtual stage over " +
                        std::to_string(t.actions) + " traced actions");
    if (!t.halved.empty())
      s.summary.push_back("the trace times the backward of virtual stage " + t.halved +
                          " only whole (B): I and W are taken as half of it each, as --cost F,B takes them");
  }
  costs.send_latency = opt.send_latency;
  check_latency_against(costs);
  const bool from_config = !opt.config_path.empty() || !opt.overrides.empty();
  std::string name = opt.schedule.value_or("1f1b");
  if (opt.schedule_file.empty() && from_config) name = resolve_config(opt).schedule;
  if (opt.schedule_file.empty() && is_dynamic_policy(name)) {
    simulate_dynamic_policy(opt, name, costs, from_config, s);
  } else {
    if (opt.budget != 0)
      throw std::invalid_argument("--budget " + std::to_string(opt.budget) + " is for a dynamic policy (--schedule greedy): " +
                                  (opt.schedule_file.empty() ? name : opt.schedule_file) + " has no budget");
    simulate_plan(opt, costs, s);
  }

  if (!opt.trace_path.empty()) write_file(opt.trace_path, "the Chrome trace", render_chrome_trace(s.r));
  if (!opt.svg_path.empty()) write_file(opt.svg_path, "the SVG timeline", render_svg_timeline(s.r));
  if (opt.format == "json")
    print_json(out, opt, s);
  else if (opt.format == "plan") {  // a schedule file: --schedule-file reads it back
    // The comment is one line whatever the name holds (a file name with a line break in it
    // split the comment, and the plan did not read back).
    std::string name = s.r.schedule;
    for (char& c : name)
      if (c == '\n' || c == '\r') c = ' ';
    out << "# " << name << ": stages=" << s.r.stages << ", chunks=" << s.r.chunks
        << ", microbatches=" << s.r.microbatches << "\n"
        << format_plan(s.p);
  } else {
    print_text(out, opt, costs, s);
  }
}

}  // namespace actorpipe
