// A number in a message that refuses it: number_text's six significant digits where they read
// back as the number, else as many as it takes. "--min-lr-ratio must be in [0, 1]: got 1" for
// 1.0000001 read as a value the rule allows.
#pragma once

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "core/number_text.hpp"

namespace actorpipe {

inline std::string exact_number_text(double x) {
  const std::string short_form = number_text(x);
  if (!std::isfinite(x) || std::strtod(short_form.c_str(), nullptr) == x) return short_form;
  char buf[40];
  for (int digits = 7; digits <= 17; ++digits) {
    std::snprintf(buf, sizeof buf, "%.*g", digits, x);
    if (std::strtod(buf, nullptr) == x) break;
  }
  return buf;
}

}  // namespace actorpipe
