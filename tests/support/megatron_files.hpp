// Megatron-LM datasets for tests: the bytes of an index (.idx, MMIDIDX version 1) and of
// tokens, laid out as Megatron's writer lays them out. Header-only, no torch.
#pragma once

#include <algorithm>
#include <cstdint>
#include <fstream>
#include <string>
#include <vector>

#include "core/wire_bytes.hpp"

namespace actorpipe::testing {

// `value`'s low `width` bytes (1, 2, 4 or 8), little-endian, appended to `out`.
inline void put_le(std::vector<unsigned char>& out, std::uint64_t value, int width) {
  for (int k = 0; k < width; ++k) wire::put_u8(out, static_cast<std::uint8_t>(value >> (8 * k)));
}

// `tokens` of `width` bytes each.
inline std::vector<unsigned char> token_bytes(const std::vector<std::int64_t>& tokens, int width) {
  std::vector<unsigned char> out;
  for (const std::int64_t t : tokens) put_le(out, static_cast<std::uint64_t>(t), width);
  return out;
}

// Byte offsets of sequences of `lengths` tokens of `width` bytes, end to end from 0.
inline std::vector<std::int64_t> end_to_end(const std::vector<std::int64_t>& lengths, int width) {
  std::vector<std::int64_t> offsets;
  std::int64_t at = 0;
  for (const std::int64_t n : lengths) offsets.push_back(at), at += n * width;
  return offsets;
}

// An index of token type `code` (4 int32, 8 uint16, ...): the sequences' lengths and byte
// offsets, then `doc_entries` document starts (0, 1, ..., each at most the sequence count: one
// document a sequence). `magic` and `version` as given, for a damaged index.
inline std::vector<unsigned char> megatron_index(int code, const std::vector<std::int64_t>& lengths,
                                                 const std::vector<std::int64_t>& offsets, std::size_t doc_entries,
                                                 const std::string& magic = std::string("MMIDIDX\0\0", 9),
                                                 std::uint64_t version = 1) {
  std::vector<unsigned char> x(magic.begin(), magic.end());
  wire::put_u64(x, version);
  wire::put_u8(x, static_cast<std::uint8_t>(code));
  wire::put_u64(x, lengths.size());
  wire::put_u64(x, doc_entries);
  for (const std::int64_t n : lengths) wire::put_i32(x, static_cast<std::int32_t>(n));
  for (const std::int64_t p : offsets) wire::put_i64(x, p);
  for (std::size_t d = 0; d < doc_entries; ++d) wire::put_u64(x, std::min(d, lengths.size()));
  return x;
}

inline void write_bytes(const std::string& path, const std::vector<unsigned char>& bytes) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

}  // namespace actorpipe::testing
