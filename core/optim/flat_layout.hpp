// How one virtual stage's parameters travel in a data-parallel gradient sync, and which
// replica owns which part of their optimizer state (ZeRO-1). The parameters are flattened in
// their order into one run of elements, cut into buckets of `bucket_elements` (a multiple of
// D; the last bucket padded with zeros to a multiple of D), and each bucket into D equal
// slices: replica j owns slice j of every bucket, and its shard is those slices back to back.
// No torch: the numbers only.
#pragma once

#include <vector>

namespace actorpipe {

struct flat_layout {
  struct bucket {
    long long start = 0;   // first element, in the flattened parameters
    long long length = 0;  // real elements
    long long padded = 0;  // length rounded up to a multiple of D
  };
  // A run of one parameter's elements inside a bucket or a shard.
  struct segment {
    int parameter = 0;
    long long parameter_offset = 0;  // first element, in the flattened parameter
    long long offset = 0;            // first element, in the bucket or the shard
    long long length = 0;
  };

  int replicas = 1;
  std::vector<long long> parameter_sizes;
  std::vector<long long> parameter_offsets;  // where each parameter starts in the flattened run
  std::vector<bucket> buckets;
  long long elements = 0;  // real, every parameter

  long long slice_length(int b) const { return buckets[static_cast<std::size_t>(b)].padded / replicas; }
  long long shard_length() const;                  // padding included
  long long shard_offset_of_bucket(int b) const;   // where bucket b's slice sits in a shard
  std::vector<segment> bucket_segments(int b) const;     // offset: in the bucket
  std::vector<segment> shard_segments(int shard) const;  // offset: in the shard; real elements only
};

// Throws std::invalid_argument for replicas < 1, bucket_elements < 1 or a negative size.
// bucket_elements is rounded up to a multiple of replicas.
flat_layout make_flat_layout(const std::vector<long long>& parameter_sizes, int replicas, long long bucket_elements);

}  // namespace actorpipe
