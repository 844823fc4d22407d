// Layer -> virtual stage partitions: even count splits and exact min-max cost splits.
#include "core/partition.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <regex>
#include <sstream>
#include <stdexcept>
#include <string>

namespace actorpipe {
namespace {

std::string show(double v) {
  std::ostringstream os;
  os.precision(17);
  os << v;
  return os.str();
}

void check_costs(const layer_costs& costs) {
  for (std::size_t i = 0; i < costs.per_layer.size(); ++i) {
    double c = costs.per_layer[i];
    if (!std::isfinite(c) || c < 0)
      throw std::invalid_argument("layer cost per_layer[" + std::to_string(i) + "]=" + show(c) +
                                  " must be finite and >= 0");
  }
  if (!std::isfinite(costs.first_stage_extra) || costs.first_stage_extra < 0)
    throw std::invalid_argument("first_stage_extra=" + show(costs.first_stage_extra) + " must be finite and >= 0");
  if (!std::isfinite(costs.last_stage_extra) || costs.last_stage_extra < 0)
    throw std::invalid_argument("last_stage_extra=" + show(costs.last_stage_extra) + " must be finite and >= 0");
}

// Prefix sums in long double so a part's cost is a difference of two prefixes: O(1), and
// monotone in both ends (rounding is monotone), which the greedy tests below rely on. Summing
// each range directly would not be: the same layers summed from a different start can round
// differently.
class cost_table {
 public:
  cost_table(const layer_costs& costs, int upto) : costs_(costs), prefix_(static_cast<std::size_t>(upto) + 1) {
    prefix_[0] = 0;
    for (int i = 0; i < upto; ++i) prefix_[i + 1] = prefix_[i] + static_cast<long double>(costs.per_layer[i]);
  }

  double cost(int start, int end, bool is_first, bool is_last) const {
    double c = static_cast<double>(prefix_[end] - prefix_[start]);
    if (is_first) c += costs_.first_stage_extra;
    if (is_last) c += costs_.last_stage_extra;
    return c;
  }

 private:
  const layer_costs& costs_;
  std::vector<long double> prefix_;
};

// Non-negative doubles (and +inf) order the same way as their bit patterns, so bisecting the
// bits finds the exact smallest feasible threshold in at most 64 steps.
std::uint64_t bits_of(double v) {
  std::uint64_t b;
  std::memcpy(&b, &v, sizeof b);
  return b;
}

double double_of(std::uint64_t b) {
  double v;
  std::memcpy(&v, &b, sizeof v);
  return v;
}

class splitter {
 public:
  splitter(const layer_costs& costs, int parts)
      : n_(static_cast<int>(costs.per_layer.size())), parts_(parts), table_(costs, n_) {}

  // Smallest achievable heaviest part.
  double optimum() const {
    std::uint64_t lo = 0;
    std::uint64_t hi = bits_of(table_.cost(0, n_, true, true));  // one part is never worse than many
    while (lo < hi) {
      std::uint64_t mid = lo + (hi - lo) / 2;
      if (feasible(double_of(mid)))
        hi = mid;
      else
        lo = mid + 1;
    }
    return double_of(lo);
  }

  std::vector<layer_range> balanced_split(double limit) const {
    // min_start[j]: the leftmost s >= 1 from which [s, n) splits into exactly j parts of cost
    // <= limit (every s in [min_start[j], n - j] does, since parts only get lighter when they
    // shrink). Found by a greedy from the right.
    std::vector<int> min_start(static_cast<std::size_t>(parts_), n_ + 1);
    int pos = n_;
    for (int j = 1; j < parts_; ++j) {
      if (pos > 1) {
        int s = leftmost_start(pos, limit);
        if (s == pos) break;  // cannot happen for an achievable limit; caught below
        pos = s;
      }
      min_start[j] = pos;
    }

    std::vector<layer_range> out;
    int start = 0;
    for (int i = 0; i + 1 < parts_; ++i) {
      int left = parts_ - i;  // parts still to place, this one included
      bool first = start == 0;
      int lo = std::max(start + 1, min_start[left - 1]);
      int hi = rightmost_end(start, n_ - (left - 1), limit);
      if (lo > hi) throw std::logic_error("partition_by_cost: no end for part " + std::to_string(i));
      double target = table_.cost(start, n_, first, true) / left;
      // First end in [lo, hi] whose cost reaches the target; the best end is it or the one before.
      int a = lo, b = hi + 1;
      while (a < b) {
        int mid = a + (b - a) / 2;
        if (table_.cost(start, mid, first, false) >= target)
          b = mid;
        else
          a = mid + 1;
      }
      int end;
      if (a > hi) {
        end = hi;
      } else if (a == lo) {
        end = lo;
      } else {
        double over = table_.cost(start, a, first, false) - target;
        double under = target - table_.cost(start, a - 1, first, false);
        end = under <= over ? a - 1 : a;  // tie: the shorter part
      }
      out.push_back({start, end});
      start = end;
    }
    out.push_back({start, n_});
    return out;
  }

  const cost_table& table() const { return table_; }

 private:
  // Largest end in [start, max_end] with cost(start, end) <= limit (start itself when even one
  // layer is too heavy). Not the last part: the last extra is checked separately.
  int rightmost_end(int start, int max_end, double limit) const {
    bool first = start == 0;
    int a = start, b = max_end;
    while (a < b) {
      int mid = a + (b - a + 1) / 2;
      if (table_.cost(start, mid, first, false) <= limit)
        a = mid;
      else
        b = mid - 1;
    }
    return a;
  }

  // Smallest start in [1, end] with cost(start, end) <= limit, never including layer 0 (end
  // itself when even one layer is too heavy).
  int leftmost_start(int end, double limit) const {
    bool last = end == n_;
    int a = 1, b = end;
    while (a < b) {
      int mid = a + (b - a) / 2;
      if (table_.cost(mid, end, false, last) <= limit)
        b = mid;
      else
        a = mid + 1;
    }
    return a;
  }

  // Can the layers be cut into exactly parts_ parts of cost <= limit? Greedy from the left for
  // the first parts_ - 1 parts (each as long as possible maximizes how far they reach), then
  // the rest must fit in the last part, extra included. Fewer greedy parts suffice too: with
  // n >= parts_ any part can be split without making anything heavier.
  bool feasible(double limit) const {
    int pos = 0;
    for (int j = 0; j + 1 < parts_ && pos < n_; ++j) {
      int end = rightmost_end(pos, n_, limit);
      if (end == pos) return false;
      pos = end;
    }
    int s = std::min(pos, n_ - 1);
    return table_.cost(s, n_, s == 0, true) <= limit;
  }

  int n_;
  int parts_;
  cost_table table_;
};

}  // namespace

std::vector<int> distribute_layers(int num_layers, int stages, int chunks) {
  if (stages < 1) throw std::invalid_argument("stages=" + std::to_string(stages) + " must be >= 1");
  if (chunks < 1) throw std::invalid_argument("chunks=" + std::to_string(chunks) + " must be >= 1");
  long long k = static_cast<long long>(stages) * chunks;
  if (num_layers < k)
    throw std::invalid_argument("num_layers=" + std::to_string(num_layers) + " cannot be split over stages*chunks=" +
                                std::to_string(k) + " virtual stages (each needs at least one layer)");
  int parts = static_cast<int>(k);
  int q = num_layers / parts;
  int rem = num_layers % parts;
  std::vector<int> counts(static_cast<std::size_t>(parts), q);
  int first_extra = parts / 2 - rem / 2;  // rem < parts, so the extras stay in [0, parts)
  for (int i = 0; i < rem; ++i) ++counts[first_extra + i];
  return counts;
}

std::vector<layer_range> layer_ranges(const std::vector<int>& counts) {
  std::vector<layer_range> out;
  out.reserve(counts.size());
  int start = 0;
  for (std::size_t i = 0; i < counts.size(); ++i) {
    if (counts[i] < 1)
      throw std::invalid_argument("counts[" + std::to_string(i) + "]=" + std::to_string(counts[i]) +
                                  ": every virtual stage needs at least one layer");
    out.push_back({start, start + counts[i]});
    start += counts[i];
  }
  return out;
}

double part_cost(const layer_costs& costs, layer_range range, bool is_first, bool is_last) {
  int n = static_cast<int>(costs.per_layer.size());
  if (range.start < 0 || range.end < range.start || range.end > n)
    throw std::invalid_argument("part_cost: range [" + std::to_string(range.start) + ", " + std::to_string(range.end) +
                                ") is not inside the " + std::to_string(n) + " layers");
  // Same arithmetic as partition_by_cost (prefix sums from layer 0), so results compare exactly.
  return cost_table(costs, range.end).cost(range.start, range.end, is_first, is_last);
}

double max_part_cost(const layer_costs& costs, const std::vector<layer_range>& parts) {
  double worst = 0;
  for (std::size_t i = 0; i < parts.size(); ++i)
    worst = std::max(worst, part_cost(costs, parts[i], i == 0, i + 1 == parts.size()));
  return worst;
}

std::vector<layer_range> partition_by_cost(const layer_costs& costs, int parts) {
  if (parts < 1) throw std::invalid_argument("partition_by_cost: parts=" + std::to_string(parts) + " must be >= 1");
  if (costs.per_layer.size() < static_cast<std::size_t>(parts))
    throw std::invalid_argument("partition_by_cost: " + std::to_string(costs.per_layer.size()) +
                                " layers cannot be split into parts=" + std::to_string(parts) +
                                " non-empty parts");
  check_costs(costs);
  splitter s(costs, parts);
  double limit = s.optimum();
  std::vector<layer_range> out = s.balanced_split(limit);
  // The split is built against `limit`; a heavier part would mean a bug in the greedy tests.
  for (std::size_t i = 0; i < out.size(); ++i)
    if (s.table().cost(out[i].start, out[i].end, i == 0, i + 1 == out.size()) > limit)
      throw std::logic_error("partition_by_cost: part " + std::to_string(i) + " exceeds the optimum");
  return out;
}

layer_costs costs_from_parameter_counts(const std::vector<long long>& params, long long embedding_params,
                                        long long head_params) {
  layer_costs c;
  c.per_layer.reserve(params.size());
  for (std::size_t i = 0; i < params.size(); ++i) {
    if (params[i] < 0)
      throw std::invalid_argument("params[" + std::to_string(i) + "]=" + std::to_string(params[i]) + " must be >= 0");
    c.per_layer.push_back(static_cast<double>(params[i]));
  }
  if (embedding_params < 0)
    throw std::invalid_argument("embedding_params=" + std::to_string(embedding_params) + " must be >= 0");
  if (head_params < 0) throw std::invalid_argument("head_params=" + std::to_string(head_params) + " must be >= 0");
  c.first_stage_extra = static_cast<double>(embedding_params);
  c.last_stage_extra = static_cast<double>(head_params);
  return c;
}

namespace {

std::vector<layer_range> by_weights(const std::vector<double>& w, int parts, const char* what) {
  layer_costs c;
  c.per_layer = w;
  try {
    return partition_by_cost(c, parts);
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument(std::string("--partition ") + what + ": " + e.what());
  }
}

std::string joined(const std::vector<std::string>& names, std::size_t limit = 12) {
  std::string out;
  for (std::size_t i = 0; i < names.size() && i < limit; ++i) out += (i ? ", " : "") + names[i];
  if (names.size() > limit) out += ", ... (" + std::to_string(names.size()) + " in all)";
  return out;
}

}  // namespace

std::vector<layer_range> partition_layers(const std::string& method, const std::vector<std::string>& names, int stages,
                                          int chunks, const std::function<std::vector<double>()>& parameter_counts,
                                          const std::function<std::vector<double>()>& profile_costs) {
  const int L = static_cast<int>(names.size());
  if (L == 0) throw std::invalid_argument("the model has no layers: nothing to partition");
  if (stages < 1 || chunks < 1)
    throw std::invalid_argument("stages=" + std::to_string(stages) + " and chunks=" + std::to_string(chunks) + " must be >= 1");
  const long long K = static_cast<long long>(stages) * chunks;
  if (L < K)
    throw std::invalid_argument("the model's " + std::to_string(L) + " layers cannot be split over stages*chunks=" +
                                std::to_string(K) + " virtual stages (each needs at least one layer)");
  const int parts = static_cast<int>(K);
  const std::string bad = "--partition '" + method + "'";
  if (method == "uniform") return layer_ranges(distribute_layers(L, stages, chunks));
  if (method == "parameters" || method == "profile") {
    const bool params = method == "parameters";
    const auto& get = params ? parameter_counts : profile_costs;
    if (!get) throw std::invalid_argument(bad + ": no per-layer " + (params ? "parameter counts" : "profile") + " to balance");
    std::vector<double> w = get();
    if (w.size() != names.size())
      throw std::invalid_argument(bad + ": got " + std::to_string(w.size()) + " per-layer values for " + std::to_string(L) + " layers");
    return by_weights(w, parts, method.c_str());
  }
  if (method.rfind("type:", 0) == 0) {
    const std::string pattern = method.substr(5);
    if (pattern.empty()) throw std::invalid_argument(bad + ": type: needs a regular expression, e.g. type:^blocks\\.");
    // std::regex compiles (and matches) by recursion, a level per term and per group: 30,000
    // nested groups overflowed the stack (SIGSEGV). A layer-name pattern is short.
    if (pattern.size() > 1000)
      throw std::invalid_argument("--partition type:REGEX: the expression has " + std::to_string(pattern.size()) +
                                  " characters, more than the 1000 allowed");
    std::regex re;
    try {
      re = std::regex(pattern, std::regex::ECMAScript);
    } catch (const std::regex_error& e) {
      throw std::invalid_argument(bad + ": '" + pattern + "' is not a valid regular expression (" + e.what() + ")");
    }
    std::vector<int> matching;
    for (int i = 0; i < L; ++i)
      if (std::regex_search(names[i], re)) matching.push_back(i);
    if (matching.empty())
      throw std::invalid_argument(bad + " matches no layer name (the layers: " + joined(names) + ")");
    if (static_cast<long long>(matching.size()) < K)
      throw std::invalid_argument(bad + " matches " + std::to_string(matching.size()) +
                                  (matching.size() == 1 ? " layer" : " layers") + ", fewer than the stages*chunks=" +
                                  std::to_string(K) + " virtual stages (each needs one)");
    const auto counts = distribute_layers(static_cast<int>(matching.size()), stages, chunks);
    std::vector<layer_range> out;
    std::size_t next = 0;  // index into matching
    for (int p = 0; p < parts; ++p) {
      const int start = p == 0 ? 0 : matching[next];
      next += static_cast<std::size_t>(counts[p]);
      const int end = p + 1 == parts ? L : matching[next];
      out.push_back({start, end});
    }
    return out;
  }
  if (method.rfind("counts:", 0) == 0) {
    std::vector<int> counts;
    std::string rest = method.substr(7);
    std::size_t pos = 0;
    while (pos <= rest.size()) {
      std::size_t comma = rest.find(',', pos);
      std::string item = rest.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
      // Decimal digits only (stoi would take " 3" and "+3" too, and throw past int); "03" is 3.
      const bool digits = !item.empty() && item.find_first_not_of("0123456789") == std::string::npos;
      if (!digits) throw std::invalid_argument(bad + ": '" + item + "' is not a layer count (decimal digits, >= 1)");
      const std::string value = item.substr(std::min(item.find_first_not_of('0'), item.size() - 1));
      if (value.size() > 9) throw std::invalid_argument(bad + ": " + item + " layers is more than any model has");
      const int n = std::stoi(value);
      if (n < 1) throw std::invalid_argument(bad + ": '" + item + "' is not a layer count >= 1");
      counts.push_back(n);
      if (comma == std::string::npos) break;
      pos = comma + 1;
    }
    long long total = 0;
    for (int n : counts) total += n;
    if (static_cast<long long>(counts.size()) != K || total != L)
      throw std::invalid_argument(bad + ": needs stages*chunks=" + std::to_string(K) + " counts summing to the model's " +
                                  std::to_string(L) + " layers, got " + std::to_string(counts.size()) + " summing to " +
                                  std::to_string(total));
    return layer_ranges(counts);
  }
  throw std::invalid_argument(bad + " is not a partition method: use uniform, parameters, type:REGEX, profile or counts:A,B,...");
}

std::string describe_partition(const std::vector<layer_range>& parts, const std::vector<std::string>& names) {
  std::string out;
  for (std::size_t v = 0; v < parts.size(); ++v) {
    const auto& r = parts[v];
    out += (v ? " | " : "") + std::to_string(v) + ": " + names[r.start];
    if (r.size() > 1) out += " .. " + names[r.end - 1];
    out += " (" + std::to_string(r.size()) + (r.size() == 1 ? " layer)" : " layers)");
  }
  return out;
}

}  // namespace actorpipe
