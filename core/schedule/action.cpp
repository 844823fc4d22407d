// Text form of a single action.
#include "core/schedule/action.hpp"

#include <algorithm>
#include <charconv>
#include <stdexcept>

namespace actorpipe {

std::string to_string(const action& a) {
  std::string s(1, static_cast<char>(a.op));
  s += std::to_string(a.virtual_stage);
  s += '.';
  s += std::to_string(a.microbatch);
  return s;
}

namespace {

bool parse_index(std::string_view digits, int& out) {
  if (digits.empty() || digits.size() > 9) return false;
  for (char c : digits)
    if (c < '0' || c > '9') return false;
  auto res = std::from_chars(digits.data(), digits.data() + digits.size(), out);
  return res.ec == std::errc{} && res.ptr == digits.data() + digits.size();
}

}  // namespace

action parse_action(std::string_view token) {
  auto bad = [&](const char* why) {
    return std::invalid_argument("bad action '" + std::string(token) + "': " + why +
                                 " (expected <op><virtual_stage>.<microbatch> with op F, B, I or W, "
                                 "e.g. F0.3)");
  };
  if (token.size() < 4) throw bad("too short");
  action a;
  switch (token[0]) {
    case 'F': a.op = op_kind::forward; break;
    case 'B': a.op = op_kind::backward; break;
    case 'I': a.op = op_kind::input_grad; break;
    case 'W': a.op = op_kind::weight_grad; break;
    default: throw bad("unknown op");
  }
  auto rest = token.substr(1);
  auto dot = rest.find('.');
  if (dot == std::string_view::npos) throw bad("missing '.'");
  // Decimal digits past 9 of them are a number, but past any plan (max_plan_forwards).
  const auto too_big = [](std::string_view s) {
    return s.size() > 9 && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
  };
  if (!parse_index(rest.substr(0, dot), a.virtual_stage))
    throw bad(too_big(rest.substr(0, dot)) ? "virtual stage is past any plan" : "virtual stage is not a number");
  if (!parse_index(rest.substr(dot + 1), a.microbatch))
    throw bad(too_big(rest.substr(dot + 1)) ? "microbatch is past any plan" : "microbatch is not a number");
  return a;
}

}  // namespace actorpipe
