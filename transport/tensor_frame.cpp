// Tensor metadata frames: byte-by-byte little-endian encoding and a bounds-checked decoder that
// rejects every malformed or out-of-limits frame with a frame_error naming the field.
//
// Frame layout (all integers little-endian, written and read one byte at a time so the wire
// format never depends on host endianness, struct padding or alignment):
//
//   offset  size  field
//   0       4     magic "APF1"
//   4       1     version (u8) = 1
//   5       1     dtype (u8, wire_dtype)
//   6       1     kind (u8, tensor_kind)
//   7       1     ndims (u8)
//   8       4     step (i32)
//   12      4     microbatch (i32)
//   16      4     virtual_stage (i32)
//   20      4     source_rank (i32)
//   24      8     tag (u64)
//   32      8     nbytes (u64)
//   40      8*n   shape (ndims x i64)
//
// A frame is exactly 40 + 8 * ndims bytes; anything after that is an error, not padding.
#include "transport/tensor_frame.hpp"

#include <cstddef>
#include <cstdint>
#include <limits>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/wire_bytes.hpp"

namespace actorpipe {

namespace {

constexpr std::uint8_t frame_magic[4] = {'A', 'P', 'F', '1'};
constexpr std::uint8_t frame_version = 1;
constexpr std::size_t fixed_header_bytes = 40;
constexpr std::size_t dim_bytes = 8;
constexpr std::size_t max_wire_dims = 255;  // ndims travels as one byte

using wire::get_i32;
using wire::get_i64;
using wire::get_u64;
using wire::put_i32;
using wire::put_i64;
using wire::put_u64;
using wire::put_u8;

bool known_dtype(std::uint8_t v) { return v >= 1 && v <= 6; }
bool known_kind(std::uint8_t v) { return v >= 1 && v <= 9; }

const char* dtype_name(wire_dtype dtype) {
  switch (dtype) {
    case wire_dtype::f32: return "f32";
    case wire_dtype::f16: return "f16";
    case wire_dtype::bf16: return "bf16";
    case wire_dtype::i64: return "i64";
    case wire_dtype::i32: return "i32";
    case wire_dtype::f64: return "f64";
  }
  return "?";
}

std::string shape_text(const std::vector<std::int64_t>& shape) {
  std::ostringstream os;
  os << '[';
  for (std::size_t i = 0; i < shape.size(); ++i) os << (i ? ", " : "") << shape[i];
  os << ']';
  return os.str();
}

[[noreturn]] void fail(const std::string& what) { throw frame_error("frame: " + what); }

void check_range(const char* field, std::int32_t value, int limit) {
  if (value < 0 || value >= limit) {
    fail(std::string(field) + "=" + std::to_string(value) + " outside [0, " + std::to_string(limit) + ")");
  }
}

}  // namespace

std::size_t element_size(wire_dtype dtype) {
  switch (dtype) {
    case wire_dtype::f32: return 4;
    case wire_dtype::f16: return 2;
    case wire_dtype::bf16: return 2;
    case wire_dtype::i64: return 8;
    case wire_dtype::i32: return 4;
    case wire_dtype::f64: return 8;
  }
  throw std::invalid_argument("element_size: unknown wire_dtype " +
                              std::to_string(static_cast<unsigned>(dtype)));
}

std::vector<std::uint8_t> encode_frame(const tensor_meta& meta) {
  if (meta.shape.size() > max_wire_dims) {
    throw std::invalid_argument("encode_frame: shape has " + std::to_string(meta.shape.size()) +
                                " dims, the frame holds at most " + std::to_string(max_wire_dims));
  }
  std::vector<std::uint8_t> out;
  out.reserve(fixed_header_bytes + dim_bytes * meta.shape.size());
  for (std::uint8_t b : frame_magic) put_u8(out, b);
  put_u8(out, frame_version);
  put_u8(out, static_cast<std::uint8_t>(meta.dtype));
  put_u8(out, static_cast<std::uint8_t>(meta.kind));
  put_u8(out, static_cast<std::uint8_t>(meta.shape.size()));
  put_i32(out, meta.step);
  put_i32(out, meta.microbatch);
  put_i32(out, meta.virtual_stage);
  put_i32(out, meta.source_rank);
  put_u64(out, meta.tag);
  put_u64(out, meta.nbytes);
  for (std::int64_t d : meta.shape) put_i64(out, d);
  return out;
}

tensor_meta decode_frame(const std::uint8_t* data, std::size_t size, const frame_limits& limits) {
  // Every read below is at an offset < fixed_header_bytes (checked here) or inside the shape
  // block (checked against the exact frame size before the first dim is read).
  if (data == nullptr && size != 0) fail("null data with size " + std::to_string(size));
  if (size < fixed_header_bytes) {
    fail(std::to_string(size) + " bytes, need at least " + std::to_string(fixed_header_bytes));
  }
  if (data[0] != frame_magic[0] || data[1] != frame_magic[1] || data[2] != frame_magic[2] ||
      data[3] != frame_magic[3]) {
    std::ostringstream os;
    os << "bad magic";
    for (int i = 0; i < 4; ++i) os << " 0x" << std::hex << static_cast<unsigned>(data[i]);
    os << " (expected \"APF1\")";
    fail(os.str());
  }
  if (data[4] != frame_version) {
    fail("unknown version " + std::to_string(data[4]) + " (expected " + std::to_string(frame_version) + ")");
  }
  if (!known_dtype(data[5])) fail("unknown dtype " + std::to_string(data[5]));
  if (!known_kind(data[6])) fail("unknown kind " + std::to_string(data[6]));
  const std::size_t ndims = data[7];
  // A tensor may be a scalar (a batch norm's num_batches_tracked gathered for --save-final, a
  // layer's 0-d output at a cut) and may have no elements (a zero-size dimension).
  if (ndims > static_cast<std::size_t>(limits.max_dims < 0 ? 0 : limits.max_dims)) {
    fail("ndims=" + std::to_string(ndims) + " is above max_dims=" + std::to_string(limits.max_dims));
  }
  const std::size_t frame_bytes = fixed_header_bytes + dim_bytes * ndims;
  if (size < frame_bytes) {
    fail(std::to_string(size) + " bytes, need at least " + std::to_string(frame_bytes) + " for ndims=" +
         std::to_string(ndims));
  }
  if (size > frame_bytes) {
    fail(std::to_string(size) + " bytes, " + std::to_string(size - frame_bytes) + " past the " +
         std::to_string(frame_bytes) + "-byte frame for ndims=" + std::to_string(ndims));
  }

  tensor_meta meta;
  meta.dtype = static_cast<wire_dtype>(data[5]);
  meta.kind = static_cast<tensor_kind>(data[6]);
  meta.step = get_i32(data + 8);
  meta.microbatch = get_i32(data + 12);
  meta.virtual_stage = get_i32(data + 16);
  meta.source_rank = get_i32(data + 20);
  meta.tag = get_u64(data + 24);
  meta.nbytes = get_u64(data + 32);
  meta.shape.resize(ndims);
  for (std::size_t i = 0; i < ndims; ++i) meta.shape[i] = get_i64(data + fixed_header_bytes + dim_bytes * i);

  for (std::size_t i = 0; i < ndims; ++i) {
    if (meta.shape[i] < 0) {
      fail("shape[" + std::to_string(i) + "]=" + std::to_string(meta.shape[i]) + " must be >= 0");
    }
  }
  // A zero-size dimension makes no elements, but the others must still multiply within a signed
  // 64-bit count (a tensor of shape [0, 2^40, 2^40] has strides no tensor library holds).
  std::int64_t nonzero_product = 1;
  bool empty = false;
  for (std::size_t i = 0; i < ndims; ++i) {
    if (meta.shape[i] == 0) {
      empty = true;
      continue;
    }
    if (__builtin_mul_overflow(nonzero_product, meta.shape[i], &nonzero_product)) {
      fail("shape " + shape_text(meta.shape) + " element count overflows 64 bits at shape[" +
           std::to_string(i) + "]");
    }
  }
  const std::uint64_t elements = empty ? 0 : static_cast<std::uint64_t>(nonzero_product);
  const std::size_t esize = element_size(meta.dtype);
  std::uint64_t expected_bytes = 0;
  if (__builtin_mul_overflow(elements, static_cast<std::uint64_t>(esize), &expected_bytes)) {
    fail(std::string(dtype_name(meta.dtype)) + " " + shape_text(meta.shape) + " byte count overflows 64 bits");
  }

  if (meta.step < 0) fail("step=" + std::to_string(meta.step) + " must be >= 0");
  if (meta.kind == tensor_kind::parameter)
    check_range("parameter index", meta.microbatch, limits.max_parameters);
  else if (meta.kind == tensor_kind::tied_gradient)
    check_range("tied slot", meta.microbatch, limits.max_parameters);
  else if (is_shard_slice(meta.kind))
    check_range("bucket", meta.microbatch, limits.max_parameters);
  else
    check_range("microbatch", meta.microbatch, limits.microbatches);
  check_range("virtual_stage", meta.virtual_stage, limits.virtual_stages);
  check_range("source_rank", meta.source_rank, limits.ranks);

  if (meta.nbytes != expected_bytes) {
    fail("nbytes=" + std::to_string(meta.nbytes) + " does not match " + dtype_name(meta.dtype) + " " +
         shape_text(meta.shape) + " = " + std::to_string(expected_bytes) + " bytes");
  }
  if (meta.nbytes > limits.max_bytes) {
    fail("nbytes=" + std::to_string(meta.nbytes) + " exceeds max_bytes=" + std::to_string(limits.max_bytes));
  }
  return meta;
}

}  // namespace actorpipe
