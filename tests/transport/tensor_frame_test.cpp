// Tests for transport/tensor_frame: round trips, the exact wire bytes, one rejected frame per
// decode rule, and a seeded fuzz run proving decode either accepts a valid frame or throws.
#include "transport/tensor_frame.hpp"

#include <chrono>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

using namespace actorpipe;

namespace {

frame_limits test_limits() {
  frame_limits l;
  l.ranks = 4;
  l.virtual_stages = 8;
  l.microbatches = 16;
  l.max_dims = 4;
  l.max_bytes = 1u << 20;
  return l;
}

tensor_meta base_meta() {
  tensor_meta m;
  m.dtype = wire_dtype::f32;
  m.kind = tensor_kind::activation;
  m.step = 5;
  m.microbatch = 2;
  m.virtual_stage = 3;
  m.source_rank = 1;
  m.tag = 99;
  m.shape = {4, 8};
  m.nbytes = 128;
  return m;
}

tensor_meta decode(const std::vector<std::uint8_t>& bytes, const frame_limits& limits = test_limits()) {
  return decode_frame(bytes.data(), bytes.size(), limits);
}

// Encodes a meta the encoder accepts but the decoder must reject.
tensor_meta decode_meta(const tensor_meta& m) { return decode(encode_frame(m)); }

void put_le(std::vector<std::uint8_t>& bytes, std::size_t offset, std::uint64_t value, int width) {
  for (int i = 0; i < width; ++i) bytes[offset + i] = static_cast<std::uint8_t>(value >> (8 * i));
}

// Independent statement of what an accepted frame must satisfy, so the fuzz oracle does not
// reuse the decoder's own logic.
bool satisfies_limits(const tensor_meta& m, const frame_limits& l) {
  const int d = static_cast<int>(m.dtype), k = static_cast<int>(m.kind);
  if (d < 1 || d > 6 || k < 1 || k > 9) return false;  // dtypes f32 .. f64
  if (static_cast<int>(m.shape.size()) > l.max_dims) return false;
  // Any dimension may be 0; the others' product must fit a signed 64-bit count all the same.
  unsigned __int128 count = 1;
  bool no_elements = false;
  for (std::int64_t dim : m.shape) {
    if (dim < 0) return false;
    if (dim == 0) no_elements = true;
    else count *= static_cast<unsigned __int128>(dim);
    if (count > static_cast<unsigned __int128>(std::numeric_limits<std::int64_t>::max())) return false;
  }
  const unsigned __int128 bytes = no_elements ? 0 : count * element_size(m.dtype);
  if (bytes > std::numeric_limits<std::uint64_t>::max()) return false;
  // A gathered parameter's microbatch field is its index in its chunk; a tied gradient's, its
  // slot; a data-parallel slice's, its bucket.
  const int index_bound = m.kind == tensor_kind::parameter || m.kind == tensor_kind::tied_gradient || is_shard_slice(m.kind)
                              ? l.max_parameters
                              : l.microbatches;
  return m.step >= 0 && m.microbatch >= 0 && m.microbatch < index_bound && m.virtual_stage >= 0 &&
         m.virtual_stage < l.virtual_stages && m.source_rank >= 0 && m.source_rank < l.ranks &&
         bytes == m.nbytes && m.nbytes <= l.max_bytes;
}

}  // namespace

CATCH_TEST_CASE("element_size covers every wire dtype", "[transport][frame]") {
  CATCH_CHECK(element_size(wire_dtype::f32) == 4);
  CATCH_CHECK(element_size(wire_dtype::f16) == 2);
  CATCH_CHECK(element_size(wire_dtype::bf16) == 2);
  CATCH_CHECK(element_size(wire_dtype::i64) == 8);
  CATCH_CHECK(element_size(wire_dtype::i32) == 4);
  CATCH_CHECK(element_size(wire_dtype::f64) == 8);  // a double model's activations cross processes too
  CATCH_CHECK_THROWS_AS(element_size(static_cast<wire_dtype>(0)), std::invalid_argument);
}

CATCH_TEST_CASE("frames round trip", "[transport][frame]") {
  frame_limits wide;
  wide.ranks = 1024;
  wide.virtual_stages = 4096;
  wide.microbatches = 1 << 20;
  wide.max_dims = 8;
  wide.max_bytes = std::numeric_limits<std::uint64_t>::max();

  std::vector<tensor_meta> metas;
  metas.push_back(base_meta());
  {
    tensor_meta m;  // defaults: f32 activation at step 0, one element
    m.shape = {1};
    m.nbytes = 4;
    metas.push_back(m);
  }
  {
    tensor_meta m;
    m.dtype = wire_dtype::bf16;
    m.kind = tensor_kind::gradient;
    m.step = std::numeric_limits<std::int32_t>::max();
    m.microbatch = wide.microbatches - 1;
    m.virtual_stage = wide.virtual_stages - 1;
    m.source_rank = wide.ranks - 1;
    m.tag = std::numeric_limits<std::uint64_t>::max();
    m.shape = {2, 3, 5, 7, 11, 13, 17, 19};
    m.nbytes = 2ull * 2 * 3 * 5 * 7 * 11 * 13 * 17 * 19;
    metas.push_back(m);
  }
  {
    tensor_meta m;
    m.dtype = wire_dtype::i64;
    m.kind = tensor_kind::tokens;
    m.step = 123456;
    m.tag = 0x8000000000000001ull;
    m.shape = {std::int64_t{1} << 30, 2};  // large dims exercise the high bytes
    m.nbytes = 8ull << 31;
    metas.push_back(m);
  }
  {
    tensor_meta m;
    m.dtype = wire_dtype::i32;
    m.kind = tensor_kind::targets;
    m.microbatch = 7;
    m.shape = {std::numeric_limits<std::int64_t>::max() / 4};
    m.nbytes = 4ull * static_cast<std::uint64_t>(m.shape[0]);
    metas.push_back(m);
  }
  {
    tensor_meta m;
    m.dtype = wire_dtype::f16;
    m.kind = tensor_kind::gradient;
    m.virtual_stage = 17;
    m.source_rank = 3;
    m.shape = {16, 1, 4096};
    m.nbytes = 2ull * 16 * 4096;
    metas.push_back(m);
  }

  for (const auto& m : metas) {
    const auto bytes = encode_frame(m);
    CATCH_CHECK(bytes.size() == 40 + 8 * m.shape.size());
    const auto back = decode(bytes, wide);
    CATCH_CHECK(back == m);
    CATCH_CHECK(encode_frame(back) == bytes);
  }
}

CATCH_TEST_CASE("frame bytes are exact little-endian", "[transport][frame]") {
  tensor_meta m;
  m.dtype = wire_dtype::f16;
  m.kind = tensor_kind::gradient;
  m.step = 0x01020304;
  m.microbatch = 3;
  m.virtual_stage = 1;
  m.source_rank = 2;
  m.tag = 0x0102030405060708ull;
  m.shape = {2, 0x0100000000LL};
  m.nbytes = 2ull * 2 * 0x0100000000ull;  // 0x0400000000

  const std::vector<std::uint8_t> expected = {
      'A',  'P',  'F',  '1',                           // magic
      1,                                               // version
      2,                                               // dtype f16
      2,                                               // kind gradient
      2,                                               // ndims
      0x04, 0x03, 0x02, 0x01,                          // step
      0x03, 0x00, 0x00, 0x00,                          // microbatch
      0x01, 0x00, 0x00, 0x00,                          // virtual_stage
      0x02, 0x00, 0x00, 0x00,                          // source_rank
      0x08, 0x07, 0x06, 0x05, 0x04, 0x03, 0x02, 0x01,  // tag
      0x00, 0x00, 0x00, 0x00, 0x04, 0x00, 0x00, 0x00,  // nbytes
      0x02, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,  // shape[0]
      0x00, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00,  // shape[1]
  };
  CATCH_CHECK(encode_frame(m) == expected);

  frame_limits l = test_limits();
  l.max_bytes = std::numeric_limits<std::uint64_t>::max();
  CATCH_CHECK(decode_frame(expected.data(), expected.size(), l) == m);
}

CATCH_TEST_CASE("encode writes negatives as two's complement and validates only ndims", "[transport][frame]") {
  tensor_meta m;
  m.step = -2;
  m.microbatch = std::numeric_limits<std::int32_t>::min();
  m.shape = {-1};
  m.dtype = static_cast<wire_dtype>(200);
  const auto bytes = encode_frame(m);
  CATCH_REQUIRE(bytes.size() == 48);
  CATCH_CHECK(bytes[5] == 200);
  CATCH_CHECK(std::vector<std::uint8_t>(bytes.begin() + 8, bytes.begin() + 16) ==
              std::vector<std::uint8_t>{0xfe, 0xff, 0xff, 0xff, 0x00, 0x00, 0x00, 0x80});
  CATCH_CHECK(std::vector<std::uint8_t>(bytes.begin() + 40, bytes.end()) == std::vector<std::uint8_t>(8, 0xff));

  m.shape.assign(255, 1);
  CATCH_CHECK(encode_frame(m).size() == 40 + 8 * 255);
  m.shape.assign(256, 1);
  CATCH_CHECK_THROWS_AS(encode_frame(m), std::invalid_argument);
  CATCH_CHECK_THROWS_WITH(encode_frame(m), Catch::Contains("256 dims"));
}

CATCH_TEST_CASE("decode rejects each malformed field with a named error", "[transport][frame]") {
  const auto good = encode_frame(base_meta());
  CATCH_REQUIRE(good.size() == 56);
  CATCH_REQUIRE(decode(good) == base_meta());

  // Sizes: below the fixed header, below header + shape, trailing bytes.
  CATCH_CHECK_THROWS_AS(decode(std::vector<std::uint8_t>(good.begin(), good.begin() + 12)), frame_error);
  CATCH_CHECK_THROWS_WITH(decode(std::vector<std::uint8_t>(good.begin(), good.begin() + 12)),
                          "frame: 12 bytes, need at least 40");
  CATCH_CHECK_THROWS_WITH(decode_frame(nullptr, 0, test_limits()), "frame: 0 bytes, need at least 40");
  CATCH_CHECK_THROWS_WITH(decode(std::vector<std::uint8_t>(good.begin(), good.begin() + 48)),
                          "frame: 48 bytes, need at least 56 for ndims=2");
  {
    auto b = good;
    b.push_back(0);
    CATCH_CHECK_THROWS_WITH(decode(b), "frame: 57 bytes, 1 past the 56-byte frame for ndims=2");
  }
  // Header bytes.
  {
    auto b = good;
    b[3] = '2';
    CATCH_CHECK_THROWS_WITH(decode(b), "frame: bad magic 0x41 0x50 0x46 0x32 (expected \"APF1\")");
  }
  {
    auto b = good;
    b[4] = 2;
    CATCH_CHECK_THROWS_WITH(decode(b), "frame: unknown version 2 (expected 1)");
  }
  {
    auto b = good;
    b[5] = 9;
    CATCH_CHECK_THROWS_WITH(decode(b), "frame: unknown dtype 9");
    b[5] = 0;
    CATCH_CHECK_THROWS_WITH(decode(b), "frame: unknown dtype 0");
  }
  {
    auto b = good;
    b[6] = 0;
    CATCH_CHECK_THROWS_WITH(decode(b), "frame: unknown kind 0");
    b[6] = 10;
    CATCH_CHECK_THROWS_WITH(decode(b), "frame: unknown kind 10");
  }
  {  // A frame cut to its fixed header claims a scalar: its nbytes are the original shape's.
    auto b = std::vector<std::uint8_t>(good.begin(), good.begin() + 40);
    b[7] = 0;
    CATCH_CHECK_THROWS_WITH(decode(b), Catch::Contains("frame: nbytes=") && Catch::Contains("does not match f32 [] = 4 bytes"));
  }
  // A parameter may be a scalar (batch norm's num_batches_tracked, gathered for --save-final),
  // and so may a layer's output at a cut; a tensor may have no elements (a parameter of shape
  // [0], an activation with a zero-size dimension). Both crossed processes as a send error
  // that crashed the run (the frame wanted ndims >= 1 and every dimension > 0).
  for (const tensor_kind kind : {tensor_kind::parameter, tensor_kind::activation, tensor_kind::gradient}) {
    auto m = base_meta();
    m.kind = kind;
    m.microbatch = 0;  // the parameter's index, or the microbatch
    m.shape = {};
    m.nbytes = 4;
    const tensor_meta back = decode_meta(m);
    CATCH_CHECK(back.shape.empty());
    CATCH_CHECK(back.nbytes == 4);
    m.shape = {4, 0, 3};
    m.nbytes = 0;
    CATCH_CHECK(decode_meta(m).shape == std::vector<std::int64_t>{4, 0, 3});
    m.shape = {0};
    CATCH_CHECK(decode_meta(m).nbytes == 0);
    m.nbytes = 4;
    CATCH_CHECK_THROWS_WITH(decode_meta(m), "frame: nbytes=4 does not match f32 [0] = 0 bytes");
  }
  {
    auto m = base_meta();
    m.shape = {1, 2, 2, 2, 4};
    m.nbytes = 4 * 64;
    CATCH_CHECK_THROWS_WITH(decode_meta(m), "frame: ndims=5 is above max_dims=4");
  }
  // Shape.
  {
    auto m = base_meta();
    m.shape = {4, 8, -4};
    CATCH_CHECK_THROWS_WITH(decode_meta(m), "frame: shape[2]=-4 must be >= 0");
    m.shape = {4, std::numeric_limits<std::int64_t>::min()};
    CATCH_CHECK_THROWS_WITH(decode_meta(m), "frame: shape[1]=-9223372036854775808 must be >= 0");
    // No elements, but dimensions no tensor's strides hold.
    m.shape = {0, std::int64_t{1} << 40, std::int64_t{1} << 40};
    m.nbytes = 0;
    CATCH_CHECK_THROWS_WITH(decode_meta(m), "frame: shape [0, 1099511627776, 1099511627776] element count overflows 64 "
                                            "bits at shape[2]");
  }
  {
    auto m = base_meta();
    m.shape = {std::int64_t{1} << 32, std::int64_t{1} << 32};
    CATCH_CHECK_THROWS_WITH(decode_meta(m),
                            "frame: shape [4294967296, 4294967296] element count overflows 64 bits at shape[1]");
    m.shape = {std::int64_t{1} << 62};  // fits as a count, overflows as f32 bytes
    CATCH_CHECK_THROWS_WITH(decode_meta(m), "frame: f32 [4611686018427387904] byte count overflows 64 bits");
  }
  // Step and ranges against the limits.
  {
    auto m = base_meta();
    m.step = -1;
    CATCH_CHECK_THROWS_WITH(decode_meta(m), "frame: step=-1 must be >= 0");
  }
  {
    auto m = base_meta();
    m.microbatch = 16;
    CATCH_CHECK_THROWS_WITH(decode_meta(m), "frame: microbatch=16 outside [0, 16)");
    m.microbatch = -1;
    CATCH_CHECK_THROWS_WITH(decode_meta(m), "frame: microbatch=-1 outside [0, 16)");
  }
  {
    auto m = base_meta();
    m.virtual_stage = 8;
    CATCH_CHECK_THROWS_WITH(decode_meta(m), "frame: virtual_stage=8 outside [0, 8)");
    m.virtual_stage = -3;
    CATCH_CHECK_THROWS_WITH(decode_meta(m), "frame: virtual_stage=-3 outside [0, 8)");
  }
  {
    auto m = base_meta();
    m.source_rank = 4;
    CATCH_CHECK_THROWS_WITH(decode_meta(m), "frame: source_rank=4 outside [0, 4)");
    m.source_rank = std::numeric_limits<std::int32_t>::min();
    CATCH_CHECK_THROWS_WITH(decode_meta(m), "frame: source_rank=-2147483648 outside [0, 4)");
  }
  // Byte count.
  {
    auto m = base_meta();
    m.nbytes = 1024;
    CATCH_CHECK_THROWS_WITH(decode_meta(m), "frame: nbytes=1024 does not match f32 [4, 8] = 128 bytes");
    m.dtype = wire_dtype::i64;
    m.nbytes = 128;
    CATCH_CHECK_THROWS_WITH(decode_meta(m), "frame: nbytes=128 does not match i64 [4, 8] = 256 bytes");
  }
  {
    auto m = base_meta();
    m.shape = {1024, 1024};
    m.nbytes = 4u << 20;
    CATCH_CHECK_THROWS_WITH(decode_meta(m), "frame: nbytes=4194304 exceeds max_bytes=1048576");
    m.shape = {512, 512};  // exactly max_bytes is allowed
    m.nbytes = 1u << 20;
    CATCH_CHECK(decode_meta(m) == m);
  }
}

CATCH_TEST_CASE("fuzzed frames are accepted whole or rejected with frame_error", "[transport][frame][fuzz]") {
  std::mt19937_64 rng(0x41504631u);  // fixed seed: "APF1"
  // Raw rng() with modulo keeps the case sequence identical across standard libraries.
  auto below = [&](std::uint64_t n) { return n == 0 ? 0 : rng() % n; };

  std::vector<frame_limits> limit_sets;
  limit_sets.push_back(test_limits());
  {
    frame_limits l;  // the defaults: one rank, one stage, one microbatch
    limit_sets.push_back(l);
  }
  {
    frame_limits l;
    l.ranks = 64;
    l.virtual_stages = 128;
    l.microbatches = 512;
    l.max_dims = 8;
    l.max_bytes = std::numeric_limits<std::uint64_t>::max();
    limit_sets.push_back(l);
  }

  auto random_meta = [&](const frame_limits& l) {
    tensor_meta m;
    m.dtype = static_cast<wire_dtype>(1 + below(6));
    m.kind = static_cast<tensor_kind>(1 + below(6));
    m.step = static_cast<std::int32_t>(below(1u << 20));
    m.microbatch = static_cast<std::int32_t>(below(l.microbatches));
    m.virtual_stage = static_cast<std::int32_t>(below(l.virtual_stages));
    m.source_rank = static_cast<std::int32_t>(below(l.ranks));
    m.tag = rng();
    m.shape.resize(1 + below(l.max_dims));
    std::uint64_t elements = 1;
    for (auto& d : m.shape) {
      d = static_cast<std::int64_t>(1 + below(std::uint64_t{1} << below(6)));
      elements *= static_cast<std::uint64_t>(d);
    }
    m.nbytes = elements * element_size(m.dtype);
    return m;
  };

  // Offsets and widths of the fixed fields, for targeted overwrites.
  struct field { std::size_t offset; int width; };
  const field fields[] = {{0, 1}, {1, 1}, {2, 1}, {3, 1}, {4, 1},  {5, 1},  {6, 1},
                          {7, 1}, {8, 4}, {12, 4}, {16, 4}, {20, 4}, {24, 8}, {32, 8}};
  auto interesting = [&](int width, const frame_limits& l) -> std::uint64_t {
    const std::uint64_t mask = width == 8 ? ~0ull : (1ull << (8 * width)) - 1;
    switch (below(10)) {
      case 0: return 0;
      case 1: return 1;
      case 2: return mask;  // -1 for signed fields
      case 3: return mask >> 1;  // max signed
      case 4: return (mask >> 1) + 1;  // min signed
      case 5: return static_cast<std::uint64_t>(l.ranks) & mask;
      case 6: return static_cast<std::uint64_t>(l.microbatches - 1) & mask;
      case 7: return below(300) & mask;
      default: return rng() & mask;
    }
  };

  // Every decode rule must fire somewhere in the run.
  const std::vector<std::string> rules = {
      "need at least", "past the",    "bad magic",   "unknown version",         "unknown dtype",
      "unknown kind",  "is above max_dims", "must be >= 0", "element count overflows", "byte count overflows",
      "step=",         "microbatch=", "virtual_stage=", "source_rank=",         "does not match",
      "exceeds max_bytes"};
  std::vector<int> rule_hits(rules.size(), 0);

  const int cases = 240000;
  int accepted = 0, rejected = 0, failures = 0, clean_valid = 0;
  std::string first_failure;
  auto failed = [&](int i, const std::string& why) {
    if (failures++ == 0) first_failure = "case " + std::to_string(i) + ": " + why;
  };

  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < cases; ++i) {
    const frame_limits& l = limit_sets[below(limit_sets.size())];
    const tensor_meta original = random_meta(l);
    std::vector<std::uint8_t> bytes = encode_frame(original);
    const int mode = static_cast<int>(below(6));
    switch (mode) {
      case 0: {  // random bytes, half of them behind a plausible header to reach deeper checks
        bytes.assign(below(121), 0);
        for (auto& b : bytes) b = static_cast<std::uint8_t>(rng());
        if (below(2) && bytes.size() >= 8) {
          const std::uint8_t head[5] = {'A', 'P', 'F', '1', 1};
          std::memcpy(bytes.data(), head, 5);
          bytes[5] = static_cast<std::uint8_t>(below(7));
          bytes[6] = static_cast<std::uint8_t>(below(6));
          bytes[7] = static_cast<std::uint8_t>(below(10));
        }
        break;
      }
      case 1: {  // bit flips
        const int flips = 1 + static_cast<int>(below(4));
        for (int f = 0; f < flips; ++f) {
          bytes[below(bytes.size())] ^= static_cast<std::uint8_t>(1u << below(8));
        }
        break;
      }
      case 2:  // truncation
        bytes.resize(below(bytes.size()));
        break;
      case 3: {  // extension
        const std::size_t extra = 1 + below(16);
        for (std::size_t e = 0; e < extra; ++e) bytes.push_back(static_cast<std::uint8_t>(rng()));
        break;
      }
      case 4: {  // field overwrite: a fixed field or a shape dim
        const std::size_t ndims = original.shape.size();
        if (below(4) == 0) {  // grow one dim with nbytes kept consistent, to probe max_bytes
          tensor_meta m = original;
          m.shape[below(ndims)] = static_cast<std::int64_t>(1 + below(1u << 24));
          std::uint64_t elements = 1;
          for (std::int64_t d : m.shape) elements *= static_cast<std::uint64_t>(d);
          m.nbytes = elements * element_size(m.dtype);
          bytes = encode_frame(m);
          break;
        }
        const std::size_t pick = below(14 + ndims);
        if (pick < 14) {
          put_le(bytes, fields[pick].offset, interesting(fields[pick].width, l), fields[pick].width);
        } else {
          put_le(bytes, 40 + 8 * (pick - 14), interesting(8, l), 8);
        }
        break;
      }
      default:  // untouched: must decode to the original
        break;
    }

    // Exact-size heap copy so a read past the end is a sanitizer-visible overflow.
    std::unique_ptr<std::uint8_t[]> buf(new std::uint8_t[bytes.size()]);
    if (!bytes.empty()) std::memcpy(buf.get(), bytes.data(), bytes.size());
    try {
      const tensor_meta got = decode_frame(buf.get(), bytes.size(), l);
      ++accepted;
      if (encode_frame(got) != bytes) failed(i, "accepted frame re-encodes differently");
      if (!satisfies_limits(got, l)) failed(i, "accepted frame breaks the limits");
      if (mode == 5) {
        ++clean_valid;
        if (!(got == original)) failed(i, "untouched frame decoded to a different meta");
        if (!satisfies_limits(original, l)) failed(i, "untouched frame over the limits accepted");
      }
    } catch (const frame_error& e) {
      ++rejected;
      const std::string what = e.what();
      if (what.rfind("frame: ", 0) != 0) failed(i, "bad message: " + what);
      for (std::size_t r = 0; r < rules.size(); ++r) {
        if (what.find(rules[r]) != std::string::npos) ++rule_hits[r];
      }
      if (mode == 5 && satisfies_limits(original, l)) {
        failed(i, std::string("untouched valid frame rejected: ") + e.what());
      }
    } catch (const std::exception& e) {
      failed(i, std::string("unexpected exception: ") + e.what());
    } catch (...) {
      failed(i, "unexpected non-std exception");
    }
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

  CATCH_INFO("first failure: " << first_failure);
  CATCH_INFO("accepted " << accepted << ", rejected " << rejected << " in " << seconds << " s");
  CATCH_CHECK(failures == 0);
  CATCH_CHECK(accepted + rejected == cases);
  // The mutations must reach both outcomes often, or the fuzz run proves little.
  CATCH_CHECK(clean_valid > cases / 10);
  CATCH_CHECK(accepted > cases / 8);
  CATCH_CHECK(rejected > cases / 2);
  for (std::size_t r = 0; r < rules.size(); ++r) {
    CATCH_INFO("rule \"" << rules[r] << "\" fired " << rule_hits[r] << " times");
    CATCH_CHECK(rule_hits[r] > 0);
  }
}
