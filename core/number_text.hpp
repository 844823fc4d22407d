// How numbers appear in messages: six significant digits, like printf's %g ("0.0003", "1e+10").
#pragma once

#include <cstdio>
#include <string>

namespace actorpipe {

inline std::string number_text(double x) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", x);
  return buf;
}

}  // namespace actorpipe
