// Arguments of the benchmark programs, read whole: a value that is not a whole number in its
// range is refused, where atoi read "abc" or "--help" as 0 or 1 and the bench ran on it.
#pragma once

#include <cerrno>
#include <cstdlib>
#include <string>

namespace actorpipe::bench {

// `text` as a whole number from lo to hi, or -1.
inline long long whole_number(const char* text, long long lo, long long hi) {
  char* end = nullptr;
  errno = 0;
  const long long v = std::strtoll(text, &end, 10);
  return end != text && *end == '\0' && errno == 0 && v >= lo && v <= hi ? v : -1;
}

// Whether --help or -h is among the arguments.
inline bool asked_for_help(int argc, char** argv) {
  for (int i = 1; i < argc; ++i)
    if (std::string(argv[i]) == "--help" || std::string(argv[i]) == "-h") return true;
  return false;
}

}  // namespace actorpipe::bench
