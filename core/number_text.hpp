// How numbers appear in messages and reports: number_text with six significant digits, like
// printf's %g ("0.0003", "1e+10"); fixed_text with a given count of decimals; printf_text
// with any one-number printf format ("%.1f%%", "%.2e").
#pragma once

#include <cstdio>
#include <string>

namespace actorpipe {

inline std::string number_text(double x) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", x);
  return buf;
}

inline std::string fixed_text(double x, int digits) {
  char buf[352];  // the widest double at up to 30 decimals
  std::snprintf(buf, sizeof buf, "%.*f", digits < 0 ? 0 : digits > 30 ? 30 : digits, x);
  return buf;
}

// `format` holds one double conversion and at most 32 more characters.
inline std::string printf_text(const char* format, double x) {
  char buf[352];
  std::snprintf(buf, sizeof buf, format, x);
  return buf;
}

}  // namespace actorpipe
