// core/wire_bytes.hpp: little-endian on the wire whatever the host, two's complement for
// signed values, and char and uint8_t buffers read alike.
#include <catch2/catch.hpp>

#include <cstdint>
#include <limits>
#include <vector>

#include "core/wire_bytes.hpp"

using namespace actorpipe;

CATCH_TEST_CASE("wire bytes are little-endian and round-trip", "[core][wire]") {
  std::vector<std::uint8_t> out;
  wire::put_u32(out, 0x01020304u);
  CATCH_CHECK(out == std::vector<std::uint8_t>{4, 3, 2, 1});
  CATCH_CHECK(wire::get_u32(out.data()) == 0x01020304u);

  std::vector<char> chars;
  wire::put_u32(chars, 0xfffffffeu);  // bytes above 0x7f in a (signed) char buffer
  CATCH_CHECK(wire::get_u32(chars.data()) == 0xfffffffeu);
  CATCH_CHECK(wire::get_i32(chars.data()) == -2);

  for (std::int32_t v : {0, 1, -1, std::numeric_limits<std::int32_t>::min(), std::numeric_limits<std::int32_t>::max()}) {
    std::vector<char> b;
    wire::put_i32(b, v);
    CATCH_CHECK(wire::get_i32(b.data()) == v);
  }
  for (std::int64_t v : {std::int64_t{0}, std::int64_t{-1}, std::numeric_limits<std::int64_t>::min(),
                         std::numeric_limits<std::int64_t>::max()}) {
    std::vector<std::uint8_t> b;
    wire::put_i64(b, v);
    CATCH_CHECK(b.size() == 8);
    CATCH_CHECK(wire::get_i64(b.data()) == v);
  }
  // 8 and 16 bits (a Megatron dataset's tokens): read only.
  const std::vector<char> small{'\x34', '\x12', '\xfe', '\xff', '\x80'};
  CATCH_CHECK(wire::get_u16(small.data()) == 0x1234);
  CATCH_CHECK(wire::get_i16(small.data()) == 0x1234);
  CATCH_CHECK(wire::get_u16(small.data() + 2) == 0xfffe);
  CATCH_CHECK(wire::get_i16(small.data() + 2) == -2);
  CATCH_CHECK(wire::get_i8(small.data() + 4) == -128);
  CATCH_CHECK(wire::get_i8(small.data()) == 0x34);
  std::vector<std::uint8_t> b;
  wire::put_u64(b, 0x0102030405060708ull);
  CATCH_CHECK(b.front() == 8);
  CATCH_CHECK(b.back() == 1);
}
