// Buckets, slices and shards of flattened parameters: every real element lands in exactly one
// shard, padding only at a bucket's end, segments that add up.
#include <catch2/catch.hpp>

#include <map>

#include "core/optim/flat_layout.hpp"

using namespace actorpipe;
using Catch::Contains;

CATCH_TEST_CASE("parameters of 5, 7 and 3 elements in buckets of 6 over 2 replicas") {
  const flat_layout l = make_flat_layout({5, 7, 3}, 2, 6);
  CATCH_CHECK(l.elements == 15);
  CATCH_REQUIRE(l.buckets.size() == 3);
  CATCH_CHECK(l.buckets[2].start == 12);
  CATCH_CHECK(l.buckets[2].length == 3);
  CATCH_CHECK(l.buckets[2].padded == 4);  // one element of padding, at the very end
  CATCH_CHECK(l.shard_length() == 3 + 3 + 2);
  CATCH_CHECK(l.shard_offset_of_bucket(2) == 6);
  // Bucket 0 holds parameter 0 whole and parameter 1's first element.
  auto b0 = l.bucket_segments(0);
  CATCH_REQUIRE(b0.size() == 2);
  CATCH_CHECK(b0[1].parameter == 1);
  CATCH_CHECK(b0[1].offset == 5);
  CATCH_CHECK(b0[1].length == 1);
  // Shard 1: bucket 0's elements 3-5, bucket 1's 9-11, bucket 2's 14 (15 is padding).
  auto s1 = l.shard_segments(1);
  long long total = 0;
  for (auto& s : s1) total += s.length;
  CATCH_CHECK(total == 3 + 3 + 1);
  CATCH_CHECK(s1.back().parameter == 2);
  CATCH_CHECK(s1.back().parameter_offset == 2);
  CATCH_CHECK(s1.back().offset == 6);
}

CATCH_TEST_CASE("every element belongs to exactly one shard, for many shapes") {
  for (int replicas : {1, 2, 3, 4})
    for (long long bucket : {1LL, 5LL, 8LL, 1000LL}) {
      const flat_layout l = make_flat_layout({1, 17, 0, 64, 9}, replicas, bucket);
      std::map<std::pair<int, long long>, int> owners;  // (parameter, element) -> shards
      for (int j = 0; j < replicas; ++j)
        for (auto& s : l.shard_segments(j)) {
          CATCH_CHECK(s.offset + s.length <= l.shard_length());
          for (long long e = 0; e < s.length; ++e) ++owners[{s.parameter, s.parameter_offset + e}];
        }
      CATCH_CHECK(static_cast<long long>(owners.size()) == l.elements);
      for (auto& [k, n] : owners) CATCH_CHECK(n == 1);
      long long padded = 0;
      for (auto& b : l.buckets) padded += b.padded;
      CATCH_CHECK(l.shard_length() * replicas == padded);
      CATCH_CHECK(padded - l.elements < replicas);  // padding: less than one slice row
    }
}

CATCH_TEST_CASE("a flat layout refuses bad sizes") {
  CATCH_CHECK_THROWS_WITH(make_flat_layout({4}, 0, 8), Contains("replicas=0"));
  CATCH_CHECK_THROWS_WITH(make_flat_layout({4}, 2, 0), Contains("bucket_elements=0"));
  CATCH_CHECK(make_flat_layout({}, 2, 8).buckets.empty());
}
