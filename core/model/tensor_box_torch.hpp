// The torch side of tensor_box: wrap and unwrap an at::Tensor.
#pragma once

#include <torch/torch.h>

#include "core/model/tensor_box.hpp"

namespace actorpipe {

struct tensor_box::impl {
  at::Tensor tensor;
};

inline tensor_box box(at::Tensor t) { return tensor_box(std::make_shared<const tensor_box::impl>(tensor_box::impl{std::move(t)})); }

inline const at::Tensor& unbox(const tensor_box& b) {
  static const at::Tensor undefined;
  return b.get() ? b.get()->tensor : undefined;
}

}  // namespace actorpipe
