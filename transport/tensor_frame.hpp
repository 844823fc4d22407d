// Tensor metadata as it crosses processes: what a receiver needs to accept bytes for a tensor
// (dtype, shape, step, microbatch, virtual stage, kind, transport tag, byte length). Encoded as
// a small little-endian frame; decoding checks every field against the job's limits and
// throws frame_error naming the field, so a malformed or oversized frame closes that peer's
// connection instead of crashing the process. Tensor bytes never travel in this frame.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/model/tensor_box.hpp"

namespace actorpipe {

// tied_gradient: a tied parameter's gradient sent to another holder of its tie key
// (microbatch holds its slot: tie group, tensor, sender); parameter: a final parameter
// gathered to process 0 (microbatch holds the parameter's index in its chunk). Data parallel,
// between the optimizer shards of one virtual stage in different replicas (microbatch holds
// the bucket): gradient_slice, a replica's slice of a gradient bucket to the slice's owner;
// reduced_slice, an owner's reduced slice to the others (ZeRO-0); parameter_slice, an
// owner's updated parameters to the others (ZeRO-1).
enum class tensor_kind : std::uint8_t {
  activation = 1,
  gradient = 2,
  targets = 3,
  tokens = 4,
  tied_gradient = 5,
  parameter = 6,
  gradient_slice = 7,
  reduced_slice = 8,
  parameter_slice = 9
};
inline bool is_shard_slice(tensor_kind k) {
  return k == tensor_kind::gradient_slice || k == tensor_kind::reduced_slice || k == tensor_kind::parameter_slice;
}
using wire_dtype = tensor_dtype;

struct tensor_meta {
  wire_dtype dtype = wire_dtype::f32;
  tensor_kind kind = tensor_kind::activation;
  std::int32_t step = 0;
  std::int32_t microbatch = 0;
  std::int32_t virtual_stage = 0;  // receiving virtual stage
  std::int32_t source_rank = 0;
  std::uint64_t tag = 0;           // transport tag the bytes arrive under
  std::vector<std::int64_t> shape;
  std::uint64_t nbytes = 0;        // must equal element size * product(shape)

  friend bool operator==(const tensor_meta& a, const tensor_meta& b) {
    return a.dtype == b.dtype && a.kind == b.kind && a.step == b.step && a.microbatch == b.microbatch &&
           a.virtual_stage == b.virtual_stage && a.source_rank == b.source_rank && a.tag == b.tag &&
           a.shape == b.shape && a.nbytes == b.nbytes;
  }
};

// What a well-formed frame may hold in this job.
struct frame_limits {
  int ranks = 1;
  int virtual_stages = 1;
  int microbatches = 1;
  int max_dims = 8;
  int max_parameters = 1 << 16;  // kinds parameter, tied_gradient and the slices: microbatch is an index below this
  std::uint64_t max_bytes = 1ull << 32;  // per tensor
};

class frame_error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

std::size_t element_size(wire_dtype dtype);

std::vector<std::uint8_t> encode_frame(const tensor_meta& meta);

// Throws frame_error ("frame: shape[2]=-4 must be >= 0", "frame: 12 bytes, need at least 40",
// "frame: nbytes=1024 does not match f32 [4, 8] = 128 bytes", ...).
tensor_meta decode_frame(const std::uint8_t* data, std::size_t size, const frame_limits& limits);

}  // namespace actorpipe
