// How numbers appear in messages and reports: number_text with six significant digits, like
// printf's %g ("0.0003", "1e+10"), but whole numbers below 1e15 exactly ("1000001", not
// "1e+06"); fixed_text with a given count of decimals; printf_text with any one-number printf
// format ("%.1f%%", "%.2e"); and which texts are plain decimal numbers.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <string>

namespace actorpipe {

inline std::string number_text(double x) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", x);
  // A whole number that six digits would round ("1000001" read as "1e+06") is written out.
  if (x > -1e15 && x < 1e15 && x == static_cast<double>(static_cast<long long>(x)) && std::strtod(buf, nullptr) != x)
    std::snprintf(buf, sizeof buf, "%.0f", x);
  return buf;
}

inline std::string fixed_text(double x, int digits) {
  char buf[352];  // the widest double at up to 30 decimals
  std::snprintf(buf, sizeof buf, "%.*f", digits < 0 ? 0 : digits > 30 ? 30 : digits, x);
  return buf;
}

// Bytes in GiB with one decimal: "23.5 GiB".
inline std::string gib_text(double bytes) { return fixed_text(bytes / (1024.0 * 1024 * 1024), 1) + " GiB"; }

// `format` holds one double conversion and at most 32 more characters.
inline std::string printf_text(const char* format, double x) {
  char buf[352];
  std::snprintf(buf, sizeof buf, format, x);
  return buf;
}

// A plain decimal number: an optional sign, digits with at most one point (a digit on one
// side of it at least), an optional exponent ("1", "-2.5", ".5", "1e-3"). strtod (and CLI11,
// through strtold) also take hex ("0x10" is 16) and leading blanks: a number written so is a
// typo, not a number.
inline bool decimal_number_text(const std::string& t) {
  std::size_t k = 0;
  const auto digits = [&] {
    const std::size_t from = k;
    while (k < t.size() && t[k] >= '0' && t[k] <= '9') ++k;
    return k - from;
  };
  if (k < t.size() && (t[k] == '+' || t[k] == '-')) ++k;
  std::size_t mantissa = digits();
  if (k < t.size() && t[k] == '.') {
    ++k;
    mantissa += digits();
  }
  if (mantissa == 0) return false;
  if (k < t.size() && (t[k] == 'e' || t[k] == 'E')) {
    ++k;
    if (k < t.size() && (t[k] == '+' || t[k] == '-')) ++k;
    if (digits() == 0) return false;
  }
  return k == t.size();
}

// A plain decimal whole number: an optional sign and digits. CLI11 reads integers with base 0,
// so "010" would be 8 and "0x3" 3.
inline bool decimal_integer_text(const std::string& t) {
  const std::size_t first = !t.empty() && (t[0] == '+' || t[0] == '-') ? 1 : 0;
  if (t.size() == first) return false;
  for (std::size_t k = first; k < t.size(); ++k)
    if (t[k] < '0' || t[k] > '9') return false;
  return true;
}

}  // namespace actorpipe
