// Buckets, slices and shards of a virtual stage's flattened parameters.
#include "core/optim/flat_layout.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace actorpipe {

long long flat_layout::shard_length() const {
  long long n = 0;
  for (int b = 0; b < static_cast<int>(buckets.size()); ++b) n += slice_length(b);
  return n;
}

long long flat_layout::shard_offset_of_bucket(int b) const {
  long long n = 0;
  for (int i = 0; i < b; ++i) n += slice_length(i);
  return n;
}

namespace {

// The parameters' runs inside the flattened range [begin, end); `offset` counts from `base`.
std::vector<flat_layout::segment> segments_in(const flat_layout& l, long long begin, long long end, long long base) {
  std::vector<flat_layout::segment> out;
  for (int p = 0; p < static_cast<int>(l.parameter_sizes.size()); ++p) {
    const long long p_begin = l.parameter_offsets[p], p_end = p_begin + l.parameter_sizes[p];
    const long long lo = std::max(begin, p_begin), hi = std::min(end, p_end);
    if (lo < hi) out.push_back({p, lo - p_begin, base + (lo - begin), hi - lo});
  }
  return out;
}

}  // namespace

std::vector<flat_layout::segment> flat_layout::bucket_segments(int b) const {
  const bucket& k = buckets[b];
  return segments_in(*this, k.start, k.start + k.length, 0);
}

std::vector<flat_layout::segment> flat_layout::shard_segments(int shard) const {
  std::vector<segment> out;
  for (int b = 0; b < static_cast<int>(buckets.size()); ++b) {
    const bucket& k = buckets[b];
    const long long s = slice_length(b);
    const long long begin = k.start + shard * s, end = std::min(begin + s, k.start + k.length);
    if (begin >= end) continue;  // all padding
    auto part = segments_in(*this, begin, end, shard_offset_of_bucket(b));
    out.insert(out.end(), part.begin(), part.end());
  }
  return out;
}

flat_layout make_flat_layout(const std::vector<long long>& parameter_sizes, int replicas, long long bucket_elements) {
  if (replicas < 1) throw std::invalid_argument("flat layout: replicas=" + std::to_string(replicas) + " must be >= 1");
  if (bucket_elements < 1)
    throw std::invalid_argument("flat layout: bucket_elements=" + std::to_string(bucket_elements) + " must be >= 1");
  flat_layout l;
  l.replicas = replicas;
  l.parameter_sizes = parameter_sizes;
  for (long long n : parameter_sizes) {
    if (n < 0) throw std::invalid_argument("flat layout: a parameter size is " + std::to_string(n));
    l.parameter_offsets.push_back(l.elements);
    l.elements += n;
  }
  const long long per_bucket = (bucket_elements + replicas - 1) / replicas * replicas;
  for (long long start = 0; start < l.elements; start += per_bucket) {
    const long long length = std::min(per_bucket, l.elements - start);
    l.buckets.push_back({start, length, (length + replicas - 1) / replicas * replicas});
  }
  return l;
}

}  // namespace actorpipe
