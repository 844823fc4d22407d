// Little-endian integers on the wire, one byte at a time, so a format never depends on host
// endianness, struct padding or alignment. The one owner of this codec: the control plane's
// frames, the tensor metadata frame, the job token's HMAC message and the token files of a
// Megatron dataset (its index, and tokens of 1, 2, 4 or 8 bytes) all use it.
// Header-only, no CAF, no torch.
#pragma once

#include <cstdint>
#include <limits>
#include <type_traits>
#include <vector>

namespace actorpipe::wire {

// Byte is char or std::uint8_t: the control plane writes into char buffers (CAF's broker
// API), the tensor frame and the job token into std::uint8_t ones.
template <class Byte>
void put_u8(std::vector<Byte>& out, std::uint8_t v) {
  static_assert(sizeof(Byte) == 1, "wire bytes are single bytes");
  out.push_back(static_cast<Byte>(v));
}

template <class Byte>
void put_u32(std::vector<Byte>& out, std::uint32_t v) {
  static_assert(sizeof(Byte) == 1, "wire bytes are single bytes");
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<Byte>((v >> (8 * i)) & 0xffu));
}

template <class Byte>
void put_u64(std::vector<Byte>& out, std::uint64_t v) {
  static_assert(sizeof(Byte) == 1, "wire bytes are single bytes");
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<Byte>((v >> (8 * i)) & 0xffu));
}

// Signed -> unsigned conversion is defined modulo 2^N, so this is two's complement everywhere.
template <class Byte>
void put_i32(std::vector<Byte>& out, std::int32_t v) {
  put_u32(out, static_cast<std::uint32_t>(v));
}
template <class Byte>
void put_i64(std::vector<Byte>& out, std::int64_t v) {
  put_u64(out, static_cast<std::uint64_t>(v));
}

// Readers: callers check once that the bytes are there; these only assemble them.
template <class Byte>
std::uint16_t get_u16(const Byte* p) {
  static_assert(sizeof(Byte) == 1, "wire bytes are single bytes");
  return static_cast<std::uint16_t>(static_cast<std::uint8_t>(p[0]) | (static_cast<std::uint8_t>(p[1]) << 8));
}

template <class Byte>
std::uint32_t get_u32(const Byte* p) {
  static_assert(sizeof(Byte) == 1, "wire bytes are single bytes");
  std::uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = (v << 8) | static_cast<std::uint8_t>(p[i]);
  return v;
}

template <class Byte>
std::uint64_t get_u64(const Byte* p) {
  static_assert(sizeof(Byte) == 1, "wire bytes are single bytes");
  std::uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | static_cast<std::uint8_t>(p[i]);
  return v;
}

// Unsigned -> signed of an out-of-range value is implementation-defined before C++20; do the
// two's complement reinterpretation arithmetically instead.
template <class Byte>
std::int8_t get_i8(const Byte* p) {
  static_assert(sizeof(Byte) == 1, "wire bytes are single bytes");
  const int u = static_cast<std::uint8_t>(p[0]);
  return static_cast<std::int8_t>(u <= 0x7f ? u : u - 0x100);
}

template <class Byte>
std::int16_t get_i16(const Byte* p) {
  const int u = get_u16(p);
  return static_cast<std::int16_t>(u <= 0x7fff ? u : u - 0x10000);
}

template <class Byte>
std::int32_t get_i32(const Byte* p) {
  const std::uint32_t u = get_u32(p);
  if (u <= 0x7fffffffu) return static_cast<std::int32_t>(u);
  return static_cast<std::int32_t>(static_cast<std::int64_t>(u) - (std::int64_t{1} << 32));
}

template <class Byte>
std::int64_t get_i64(const Byte* p) {
  const std::uint64_t u = get_u64(p);
  if (u <= static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())) return static_cast<std::int64_t>(u);
  return -static_cast<std::int64_t>(~u) - 1;
}

}  // namespace actorpipe::wire
