// Renderers: the ASCII timeline, Chrome trace JSON and SVG show what the simulator computed.
#include <catch2/catch.hpp>

#include <algorithm>
#include <map>
#include <set>

#include <nlohmann/json.hpp>

#include "core/schedule/schedule_registry.hpp"
#include "core/sim/chrome_trace.hpp"
#include "core/sim/simulator.hpp"
#include "core/sim/timeline_ascii.hpp"
#include "core/sim/timeline_svg.hpp"

using namespace actorpipe;
using Catch::Contains;

namespace {
size_t count(const std::string& s, const std::string& what) {
  size_t n = 0;
  for (size_t pos = s.find(what); pos != std::string::npos; pos = s.find(what, pos + 1)) ++n;
  return n;
}
}  // namespace

CATCH_TEST_CASE("ASCII timeline draws every action where the simulator put it", "[sim][render]") {
  auto r = simulate(make_schedule("1f1b", {2, 2, 1}), cost_model::uniform(1, 2, 1, 1));
  // F=1 column unit of 3 chars; rank 1 starts after one forward.
  std::string expected =
      "rank 0 |F0 F1 ......B0    ...B1    |\n"
      "rank 1 |...F0 B0    F1 B1    ......|\n";
  std::string got = render_ascii_timeline(r);
  CATCH_CHECK(got.substr(0, expected.size()) == expected);
  CATCH_CHECK_THAT(got, Contains("legend: F forward"));

  auto wide = simulate(make_schedule("interleaved", {4, 8, 2}), cost_model::uniform(1, 2, 1, 1));
  std::string w = render_ascii_timeline(wide, 80);
  for (size_t start = 0, nl; (nl = w.find('\n', start)) != std::string::npos && w.compare(start, 4, "rank") == 0;
       start = nl + 1)
    CATCH_CHECK(nl - start <= 80);
  CATCH_CHECK(count(w, "rank ") == 4);
  // Past 100 ranks the names are wider ("rank 100"): every row as long as the others, within
  // the width (rows from rank 100 on were one column longer, out of line).
  auto many = simulate(make_schedule("1f1b", {101, 101, 1}), cost_model::uniform(1, 2, 1, 1));
  const std::string m = render_ascii_timeline(many, 60);
  std::set<std::size_t> lengths;
  for (size_t start = 0, nl; (nl = m.find('\n', start)) != std::string::npos && m.compare(start, 4, "rank") == 0;
       start = nl + 1)
    lengths.insert(nl - start);
  CATCH_CHECK(lengths.size() == 1);
  CATCH_CHECK(*lengths.begin() <= 60);
  CATCH_CHECK_THAT(m, Contains("\nrank 100|") && Contains("\nrank 99 |") && Contains("rank 0  |"));
  // Every line within the width, the legend and the note on hidden actions too (they were 92
  // and more columns at --width 40).
  const std::string narrow = render_ascii_timeline(simulate(make_schedule("1f1b", {4, 64, 1}), cost_model::uniform(1, 2, 1, 1)), 40);
  for (size_t start = 0, nl; (nl = narrow.find('\n', start)) != std::string::npos; start = nl + 1)
    CATCH_CHECK(nl - start <= 40);
  CATCH_CHECK_THAT(narrow, Contains("legend: F forward,") && Contains("actions are hidden"));

  // Two chunks: chunk 1 is drawn in lower case.
  auto v = simulate(make_schedule("zbv", {2, 2, 2}), cost_model::uniform(1, 2, 1, 1));
  std::string zv = render_ascii_timeline(v);
  // Rank 0 holds virtual stages 0 and 3: f0 waits for F2.0 from rank 1.
  CATCH_CHECK(zv.rfind("rank 0 |F0 F1 ...f0 i0 f1 i1 I0 w0 I1 w1 W0 W1 |", 0) == 0);
  CATCH_CHECK_THAT(zv, Contains("lower case = chunk 1"));
}

CATCH_TEST_CASE("ASCII timeline draws costs of any size alike", "[sim][render]") {
  // At 1e-308 the columns per time unit overflowed, and the row's length with them
  // ("basic_string::_M_create").
  const std::string unit = render_ascii_timeline(simulate(make_schedule("1f1b", {4, 8, 1}), cost_model::uniform(1, 2, 1, 1)));
  for (const double c : {1e-12, 1e-308, 1e-320})
    CATCH_CHECK(render_ascii_timeline(simulate(make_schedule("1f1b", {4, 8, 1}), cost_model::uniform(c, 2 * c, c, c))) == unit);
}

CATCH_TEST_CASE("ASCII timeline says how many actions a scaled-down row cannot show", "[sim][render]") {
  // gpipe on 2 ranks, 1 microbatch, costs 1 and 2 beside a latency of 1e6: 191 columns for
  // 2000006 time units. F1.0 [1000001, 1000002] and B1.0 [1000002, 1000004] share column 95.
  auto r = simulate(make_schedule("gpipe", {2, 1, 1}), cost_model::uniform(1, 2, 1, 1, 1e6));
  const std::string got = render_ascii_timeline(r);
  CATCH_CHECK_THAT(got, Contains("rank 0 |F....") && Contains("....B|\n"));  // B0.0 at the very end still drawn
  CATCH_CHECK_THAT(got, Contains("'.' idle\n(1 of 4 actions are hidden under others: one column is 10471.2 time units "
                                 "here; the SVG and the Chrome trace draw every one)\n"));
  // At a scale where every action has its cells, no such line.
  auto fine = simulate(make_schedule("1f1b", {2, 2, 1}), cost_model::uniform(1, 2, 1, 1, 0.5));
  CATCH_CHECK(render_ascii_timeline(fine).find("hidden") == std::string::npos);
}

CATCH_TEST_CASE("Chrome trace has one complete event per action, in microseconds", "[sim][render]") {
  auto r = simulate(make_schedule("zb-h1", {3, 4, 1}), cost_model::uniform(2, 4, 2, 2));
  auto j = nlohmann::json::parse(render_chrome_trace(r));
  int complete = 0;
  double last_end = 0;
  for (auto& e : j["traceEvents"]) {
    if (e["ph"] != "X") continue;
    ++complete;
    last_end = std::max(last_end, e["ts"].get<double>() + e["dur"].get<double>());
    CATCH_CHECK(e["tid"].get<int>() >= 0);
    CATCH_CHECK(e["tid"].get<int>() < 3);
  }
  CATCH_CHECK(complete == 3 * 4 * 3);
  CATCH_CHECK(last_end == Approx(r.makespan * 1000));
  CATCH_CHECK(j["otherData"]["schedule"] == "zb-h1");
  CATCH_CHECK(j["otherData"]["bubble_ratio"].get<double>() == Approx(r.bubble_ratio));

  // A B that sends its input gradient early carries when, in the trace's microseconds.
  cost_model early = cost_model::uniform(1, 3, 1, 2);
  early.early_input_grad = true;
  auto b = nlohmann::json::parse(render_chrome_trace(simulate(make_schedule("gpipe", {2, 1, 1}), early)));
  std::map<std::string, nlohmann::json> args;
  for (auto& e : b["traceEvents"])
    if (e["ph"] == "X") args[e["name"].get<std::string>()] = e["args"];
  CATCH_CHECK(args.at("B1.0")["input_grad_sent_at"].get<double>() == Approx(3000));  // B1.0 [2,5], I = 1
  CATCH_CHECK_FALSE(args.at("B0.0").contains("input_grad_sent_at"));                 // nothing before stage 0

  // Each rank's events in time order, whatever the order of the timeline's list (a measured W
  // that paused for an F is listed after the F that ran in its pause).
  sim_result paused = simulate(make_schedule("zb-h1", {2, 2, 1}), cost_model::uniform(1, 2, 1, 1));
  std::reverse(paused.events.begin(), paused.events.end());
  std::map<int, double> last_start;
  const auto in_order = nlohmann::json::parse(render_chrome_trace(paused));
  for (auto& e : in_order["traceEvents"]) {
    if (e["ph"] != "X") continue;
    const int rank = e["tid"].get<int>();
    const double ts = e["ts"].get<double>();
    if (last_start.count(rank)) CATCH_CHECK(ts >= last_start[rank]);
    last_start[rank] = ts;
  }
  CATCH_CHECK(last_start.size() == 2);
}

CATCH_TEST_CASE("a Chrome trace reads back as the timeline it was written from", "[sim][render]") {
  cost_model c = cost_model::uniform(1.5, 3, 1.25, 1.75);
  c.early_input_grad = true;
  const sim_result r = simulate(make_schedule("1f1b", {3, 5, 1}), c);
  const std::vector<timeline_event> back = read_chrome_trace(render_chrome_trace(r));
  CATCH_REQUIRE(back.size() == r.events.size());
  for (size_t i = 0; i < back.size(); ++i) {
    CATCH_CHECK(back[i].rank == r.events[i].rank);
    CATCH_CHECK(back[i].act == r.events[i].act);
    CATCH_CHECK(back[i].start == Approx(r.events[i].start));
    CATCH_CHECK(back[i].end == Approx(r.events[i].end));
    CATCH_CHECK(back[i].output_at == Approx(r.events[i].output_at));  // -1 where nothing left early
  }
  // So the costs measured from it are the costs simulated (B whole here: I and W its split).
  const cost_model m = median_costs(back, 3);
  CATCH_CHECK(m.forward == std::vector<double>(3, 1.5));
  CATCH_CHECK(m.backward == std::vector<double>(3, 3.0));
  CATCH_CHECK(m.early_input_grad);

  // A paused W's earlier part keeps its mark ("continues"), so its costs still add up.
  sim_result paused = r;
  paused.events.insert(paused.events.begin(), timeline_event{0, action{op_kind::weight_grad, 0, 0}, 0, 0.5, 1, -1, true});
  const std::vector<timeline_event> parts = read_chrome_trace(render_chrome_trace(paused));
  CATCH_REQUIRE(parts.size() == paused.events.size());
  const auto w = std::find_if(parts.begin(), parts.end(),
                              [](const timeline_event& e) { return e.act.op == op_kind::weight_grad && e.start == 0.5; });
  CATCH_REQUIRE(w != parts.end());
  CATCH_CHECK(w->continues);
  CATCH_CHECK(std::count_if(parts.begin(), parts.end(), [](const timeline_event& e) { return e.continues; }) == 1);

  CATCH_CHECK_THROWS_WITH(read_chrome_trace("{not json", "t.json"), Contains("t.json is not JSON"));
  CATCH_CHECK_THROWS_WITH(read_chrome_trace("{\"events\": []}", "t.json"), Contains("t.json has no traceEvents array"));
  CATCH_CHECK_THROWS_WITH(read_chrome_trace("{\"traceEvents\": [{\"ph\": \"M\"}]}", "t.json"),
                          Contains("t.json has no actions"));
  CATCH_CHECK_THROWS_WITH(
      read_chrome_trace(R"({"traceEvents": [{"ph": "X", "name": "F0.0", "cat": "sleep", "tid": 0, "ts": 0, "dur": 1}]})", "t.json"),
      Contains("t.json: event 'F0.0' has cat 'sleep', not forward, backward, input_grad or weight_grad"));
  CATCH_CHECK_THROWS_WITH(
      read_chrome_trace(R"({"traceEvents": [{"ph": "X", "name": "F0.0", "cat": "forward", "tid": 0, "ts": 0, "dur": 1,
                                            "args": {"microbatch": 0}}]})",
                        "t.json"),
      Contains("t.json: event 'F0.0' has no args.virtual_stage >= 0"));
  CATCH_CHECK_THROWS_WITH(
      read_chrome_trace(R"({"traceEvents": [{"ph": "X", "name": "F0.0", "cat": "forward", "tid": 0, "ts": 0}]})", "t.json"),
      Contains("t.json: event 'F0.0' has no number dur"));
  // Fields of another type are the file's fault, named (a raw type_error from nlohmann, exit 1):
  // a ph that is no "X" is no action; a cat or name of another type is quoted as written.
  CATCH_CHECK_THROWS_WITH(read_chrome_trace(R"({"traceEvents": [{"ph": 5}, {"ph": null, "cat": 1}]})", "t.json"),
                          Contains("t.json has no actions"));
  CATCH_CHECK_THROWS_WITH(
      read_chrome_trace(R"({"traceEvents": [{"ph": "X", "name": [1], "cat": 7, "tid": 0, "ts": 0, "dur": 1}]})", "t.json"),
      "t.json: event '[1]' has cat '7', not forward, backward, input_grad or weight_grad");
  // Nested past a bound: refused before a value is made (a copy overflowed the stack).
  CATCH_CHECK_THROWS_WITH(read_chrome_trace(R"({"traceEvents": [], "x": )" + std::string(200, '[') + std::string(200, ']') + "}",
                                            "t.json"),
                          "t.json nests deeper than 100 levels");
  // Values nothing real writes: refused before anything is sized or summed by them.
  const std::vector<std::pair<std::string, std::string>> absurd = {
      {R"("tid": 0, "ts": 0, "dur": 1, "args": {"virtual_stage": 2000000000, "microbatch": 0})",
       "has args.virtual_stage 2000000000, past any plan (< 1048576)"},
      {R"("tid": 0, "ts": 0, "dur": 1, "args": {"virtual_stage": 0, "microbatch": 1048576})",
       "has args.microbatch 1048576, past any plan (< 1048576)"},
      // 2^63 + 1 read as 1 through get<int> (the range check saw a negative number).
      {R"("tid": 0, "ts": 0, "dur": 1, "args": {"virtual_stage": 9223372036854775809, "microbatch": 0})",
       "has args.virtual_stage 9223372036854775809, past any plan (< 1048576)"},
      {R"("tid": 18446744073709551615, "ts": 0, "dur": 1, "args": {"virtual_stage": 0, "microbatch": 0})",
       "has tid 18446744073709551615, not a rank"},
      {R"("tid": 1.5, "ts": 0, "dur": 1, "args": {"virtual_stage": 0, "microbatch": 0})", "has tid 1.5, not a rank"},
      {R"("tid": 0, "ts": 0, "dur": -5, "args": {"virtual_stage": 0, "microbatch": 0})",
       "has dur -5, not a duration >= 0"},
      {R"("tid": 0, "ts": 1e300, "dur": 1, "args": {"virtual_stage": 0, "microbatch": 0})", "has ts 1e+300, not a time"},
      // An early input gradient sent outside its action gave negative I or W costs.
      {R"("tid": 0, "ts": 10, "dur": 5, "args": {"virtual_stage": 0, "microbatch": 0, "input_grad_sent_at": 4})",
       "has args.input_grad_sent_at 4, outside its action (ts 10, dur 5)"},
      {R"("tid": 0, "ts": 10, "dur": 5, "args": {"virtual_stage": 0, "microbatch": 0, "input_grad_sent_at": 16})",
       "has args.input_grad_sent_at 16, outside its action (ts 10, dur 5)"},
  };
  for (const auto& [fields, why] : absurd) {
    const std::string text = R"({"traceEvents": [{"ph": "X", "name": "F0.0", "cat": "forward", )" + fields + "}]}";
    CATCH_CHECK_THROWS_WITH(read_chrome_trace(text, "t.json"), "t.json: event 'F0.0' " + why);
  }
}

CATCH_TEST_CASE("SVG draws a box per action and a lane per rank", "[sim][render]") {
  auto r = simulate(make_schedule("zbv", {4, 8, 2}), cost_model::uniform(1, 2, 1, 1));
  std::string svg = render_svg_timeline(r);
  CATCH_CHECK(svg.rfind("<svg xmlns=\"http://www.w3.org/2000/svg\"", 0) == 0);
  CATCH_CHECK(svg.substr(svg.size() - 7) == "</svg>\n");
  CATCH_CHECK(count(svg, "<title>") == r.events.size());
  CATCH_CHECK(count(svg, ">rank ") == 4);
  CATCH_CHECK_THAT(svg, Contains("zbv: stages=4, chunks=2, microbatches=8"));
  CATCH_CHECK_THAT(svg, Contains("<title>W7.7 on rank 0"));
  // The same plan on costs in another unit (seconds, say) draws the same picture: it drew
  // costs of 0.02 as 1 px boxes in a picture 105 px wide.
  const auto width_of = [](const std::string& svg) {
    const auto at = svg.find("width=\"") + 7;
    return std::stod(svg.substr(at, svg.find('"', at) - at));
  };
  const double unit_width = width_of(svg);
  const auto small = simulate(make_schedule("zbv", {4, 8, 2}), cost_model::uniform(0.01, 0.02, 0.01, 0.01));
  CATCH_CHECK(width_of(render_svg_timeline(small)) == Approx(unit_width).epsilon(0.01));
  const auto big = simulate(make_schedule("zbv", {4, 8, 2}), cost_model::uniform(1000, 2000, 1000, 1000));
  CATCH_CHECK(width_of(render_svg_timeline(big)) == Approx(unit_width).epsilon(0.01));
  // One W far shorter than the rest: the picture stays at most 16000 px plus its margins (it
  // was 440094 px wide), the W's drawn at 1 px.
  const auto tiny_w = simulate(make_schedule("zb-h1", {4, 8, 1}), cost_model::uniform(1, 2, 1, 0.0001));
  const double capped = width_of(render_svg_timeline(tiny_w));
  CATCH_CHECK(capped <= 16100);
  CATCH_CHECK(capped > 1100);
  // Costs of any size draw the same picture with the same ticks: at 1e-12 the axis had 517
  // ticks (its bound was absolute), at 1e-20 it walked 1e11 of them and never ended, and at
  // 1e-308 px per time unit overflowed.
  const std::string unit_svg = render_svg_timeline(simulate(make_schedule("1f1b", {4, 8, 1}), cost_model::uniform(1, 2, 1, 1)));
  for (const double c : {1e-12, 1e-20, 1e-308, 1e-320}) {
    CATCH_INFO("cost " << c);
    const std::string svg_c = render_svg_timeline(simulate(make_schedule("1f1b", {4, 8, 1}), cost_model::uniform(c, 2 * c, c, c)));
    CATCH_CHECK(width_of(svg_c) == width_of(unit_svg));
    CATCH_CHECK(count(svg_c, "text-anchor=\"middle\">") == count(unit_svg, "text-anchor=\"middle\">"));
    CATCH_CHECK(count(svg_c, "nan") == 0);
    CATCH_CHECK(count(svg_c, "inf") == 0);
  }
}

CATCH_TEST_CASE("a name that is not UTF-8 gives well-formed SVG and JSON", "[sim][render]") {
  // A schedule file's name in Latin-1 ('n\xffx.txt') named the timeline; the SVG held the raw
  // byte (not XML) and the trace's JSON writer threw.
  auto r = simulate(make_schedule("1f1b", {2, 2, 1}), cost_model::uniform(1, 2, 1, 1));
  r.schedule = "n\xffx<&>\x01\xc3\xa9\xe2\x82";  // bad byte, specials, a control, 'é', a cut sequence
  const std::string svg = render_svg_timeline(r);
  CATCH_CHECK_THAT(svg, Contains("n\xEF\xBF\xBDx&lt;&amp;&gt;\xc3\xa9\xEF\xBF\xBD\xEF\xBF\xBD: stages=2"));
  CATCH_CHECK(svg.find('\xff') == std::string::npos);
  CATCH_CHECK(svg.find('\x01') == std::string::npos);
  const auto trace = nlohmann::json::parse(render_chrome_trace(r));
  CATCH_CHECK_THAT(trace["otherData"]["schedule"].get<std::string>(), Contains("n\xEF\xBF\xBDx<&>\x01\xc3\xa9\xEF\xBF\xBD"));
}
