// Cost model lookups and the --cost flag parser.
#include "core/sim/cost_model.hpp"

#include <algorithm>

#include <cmath>
#include <limits>
#include <cstdlib>
#include <stdexcept>

#include "core/number_text.hpp"

namespace actorpipe {

namespace {
double pick(const std::vector<double>& per_stage, int v) {
  if (per_stage.size() == 1) return per_stage[0];
  if (v < 0 || v >= static_cast<int>(per_stage.size()))
    throw std::out_of_range("cost model has " + std::to_string(per_stage.size()) + " entries, no virtual stage " +
                            std::to_string(v));
  return per_stage[v];
}
}  // namespace

double cost_model::cost(const action& a) const {
  switch (a.op) {
    case op_kind::forward: return pick(forward, a.virtual_stage);
    case op_kind::backward: return pick(backward, a.virtual_stage);
    case op_kind::input_grad: return pick(input_grad, a.virtual_stage);
    case op_kind::weight_grad: return pick(weight_grad, a.virtual_stage);
  }
  return 0.0;
}

double cost_model::output_after(const action& a) const {
  const double whole = cost(a);
  // The first virtual stage's B hands no gradient on: its output is ready when it ends.
  if (a.op != op_kind::backward || !early_input_grad || a.virtual_stage == 0) return whole;
  const double i = pick(input_grad, a.virtual_stage);  // 0: unknown (no split measured)
  return i > 0 && i < whole ? i : whole;
}

cost_model cost_model::uniform(double f, double b, double i, double w, double send_latency) {
  cost_model c;
  c.forward = {f};
  c.backward = {b};
  c.input_grad = {i};
  c.weight_grad = {w};
  c.send_latency = send_latency;
  return c;
}

cost_model parse_cost_spec(const std::string& spec) {
  std::vector<std::string> parts;
  size_t start = 0;
  for (;;) {
    size_t comma = spec.find(',', start);
    parts.push_back(spec.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  auto bad = [&](const std::string& why) {
    return std::invalid_argument("--cost '" + spec + "': " + why + " (expected F,B,I,W e.g. 1,2,1,1; or F,,I,W; or F,B)");
  };
  if (parts.size() != 2 && parts.size() != 4) throw bad("needs 2 or 4 comma-separated values");
  static const char* names[] = {"F", "B", "I", "W"};
  double v[4] = {0, 0, 0, 0};
  bool given[4] = {false, false, false, false};
  for (size_t k = 0; k < parts.size(); ++k) {
    if (parts[k].empty()) continue;
    const double x = decimal_number_text(parts[k]) ? std::strtod(parts[k].c_str(), nullptr) : -1;
    if (!std::isfinite(x) || x < 0 || x > max_cost)
      throw bad(std::string(names[k]) + " must be a decimal number in " + (k < 2 ? "(0, " : "[0, ") +
                number_text(max_cost) + "], got '" +
                parts[k] + "'");
    // One below a double's normal range keeps a digit or two (1e-320 showed as 9.99989e-321).
    if (x > 0 && x < std::numeric_limits<double>::min())
      throw bad(std::string(names[k]) + "=" + parts[k] + " is below a double's normal range (2.2e-308): give 0 " +
                (k < 2 ? "(not for F and B) " : "") + "or a larger cost, all of them scaled alike");
    v[k] = x;
    given[k] = true;
  }
  if (!given[0]) throw bad("F is required");
  if (parts.size() == 2) {
    if (!given[1]) throw bad("B is required");
    v[2] = v[3] = v[1] / 2;
  } else {
    if (!given[2] || !given[3]) {
      if (!given[1]) throw bad("give B, or both I and W");
      if (given[2] != given[3]) throw bad("give both I and W, or neither");
      v[2] = v[3] = v[1] / 2;
    } else if (!given[1]) {
      v[1] = v[2] + v[3];
    }
  }
  if (v[0] <= 0) throw bad("F must be > 0");
  if (v[1] <= 0) throw bad(given[1] ? "B must be > 0" : "B, taken as I + W, must be > 0: give I or W above 0, or B");
  // The costs as given, to ten digits (six showed "B=1e+06 is more than 1e+06 times"), and
  // a B not given as the I + W it was taken for.
  const auto shown = [&](int k) {
    return std::string(names[k]) + (k == 1 && !given[1] ? " (I+W)" : "") + "=" + printf_text("%.10g", v[k]);
  };
  // I and W are the input-grad and weight-grad parts of B (the whole backward): a part longer
  // than the whole is a misordered flag ("F,B,W"?), not a cost.
  for (int k : {2, 3})
    if (v[k] > v[1])
      throw bad(shown(k) + " is more than " + shown(1) + ", but " + names[k] +
                " is a part of the split B (B is the whole backward; leave B out, F,,I,W, for B = I+W)");
  int smallest = 0, largest = 0;
  for (int k = 1; k < 4; ++k) {
    if (v[k] > 0 && v[k] < v[smallest]) smallest = k;
    if (v[k] > v[largest]) largest = k;
  }
  if (v[largest] > max_cost_ratio * v[smallest])
    throw bad(shown(largest) + " is more than " + printf_text("%.10g", max_cost_ratio) + " times " + shown(smallest) +
              ": the smaller costs would round away next to it");
  return cost_model::uniform(v[0], v[1], v[2], v[3]);
}

std::string cost_spec_note(const cost_model& c) {
  if (c.backward.size() != 1 || c.input_grad.size() != 1 || c.weight_grad.size() != 1) return "";
  const double b = c.backward[0], i = c.input_grad[0], w = c.weight_grad[0];
  if (std::fabs(b - (i + w)) <= 1e-9 * b) return "";
  return "--cost B=" + number_text(b) + " is not I+W = " + number_text(i) + "+" + number_text(w) + " = " +
         number_text(i + w) + ": plans that run whole backwards (B) take " + number_text(b) +
         " for each, plans that split them (I, W) take " + number_text(i + w);
}

double smallest_cost(const cost_model& c) {
  double least = 0;
  for (const auto* table : {&c.forward, &c.backward, &c.input_grad, &c.weight_grad})
    for (double x : *table)
      if (x > 0 && (least == 0 || x < least)) least = x;
  return least;
}

double largest_cost(const cost_model& c) {
  double most = 0;
  for (const auto* table : {&c.forward, &c.backward, &c.input_grad, &c.weight_grad})
    for (double x : *table) most = std::max(most, x);
  return most;
}

}  // namespace actorpipe
