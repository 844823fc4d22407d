// Cost model lookups and the --cost flag parser.
#include "core/sim/cost_model.hpp"

#include <cmath>
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
    char* end = nullptr;
    double x = std::strtod(parts[k].c_str(), &end);
    if (end != parts[k].c_str() + parts[k].size() || !std::isfinite(x) || x < 0 || x > max_cost)
      throw bad(std::string(names[k]) + " must be a number in [0, " + number_text(max_cost) + "], got '" + parts[k] + "'");
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
  if (v[1] <= 0) throw bad("B must be > 0");
  return cost_model::uniform(v[0], v[1], v[2], v[3]);
}

}  // namespace actorpipe
