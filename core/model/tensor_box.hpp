// An opaque, cheaply copyable handle to a tensor (shared ownership, no copy of the data).
// Code that only routes tensors (actors, transport) includes this; code that computes
// includes core/model/tensor_box_torch.hpp to get the at::Tensor back.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

namespace actorpipe {

class tensor_box {
 public:
  struct impl;
  tensor_box() = default;
  explicit tensor_box(std::shared_ptr<const impl> p) : impl_(std::move(p)) {}

  bool defined() const;
  std::vector<std::int64_t> shape() const;
  std::size_t nbytes() const;
  const std::shared_ptr<const impl>& get() const { return impl_; }

 private:
  std::shared_ptr<const impl> impl_;
};

}  // namespace actorpipe
