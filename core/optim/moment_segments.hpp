// AdamW state addressed by global parameter name, whatever shards held it: a checkpoint stores
// these runs, and any layout (stages, chunks, replicas, ZeRO stage) loads them back by
// stitching the runs each of its optimizers needs. No torch here.
#pragma once

#include <string>
#include <vector>

#include "core/model/tensor_box.hpp"

namespace actorpipe {

// Elements [offset, offset + length) of one parameter's flattened AdamW moments.
struct moment_segment {
  std::string parameter;  // global name
  long long offset = 0;
  tensor_box exp_avg, exp_avg_sq;  // 1-D float32 of `length` elements
  long long steps = 0;             // AdamW updates the parameter has had (bias correction)
};

}  // namespace actorpipe
