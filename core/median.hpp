// The median of some measurements: the middle one, or the mean of the middle two.
#pragma once

#include <algorithm>
#include <vector>

namespace actorpipe {

inline double median(std::vector<double> v, double if_empty = 0.0) {
  if (v.empty()) return if_empty;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

}  // namespace actorpipe
