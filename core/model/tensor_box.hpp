// An opaque, cheaply copyable handle to a tensor (shared ownership, no copy of the data).
// Code that only routes tensors (actors, transport) includes this; code that computes
// includes core/model/tensor_box_torch.hpp to get the at::Tensor back.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

namespace actorpipe {

// Element types that cross process boundaries (values are part of the wire format).
enum class tensor_dtype : std::uint8_t { f32 = 1, f16 = 2, bf16 = 3, i64 = 4, i32 = 5, f64 = 6 };

class tensor_box {
 public:
  struct impl;
  tensor_box() = default;
  explicit tensor_box(std::shared_ptr<const impl> p) : impl_(std::move(p)) {}

  bool defined() const;
  std::vector<std::int64_t> shape() const;
  std::size_t nbytes() const;

  // For transports. dtype() throws std::invalid_argument for an element type that has no
  // tensor_dtype; data() is the first byte of a contiguous CPU tensor (throws otherwise).
  tensor_dtype dtype() const;
  void* data() const;
  tensor_box contiguous() const;  // itself when already contiguous
  static tensor_box empty(tensor_dtype dtype, const std::vector<std::int64_t>& shape);  // uninitialised CPU tensor
  // A contiguous CPU tensor over memory the caller provides (at least shape's bytes, aligned
  // for dtype). Ownership passes at the call: release(data) runs exactly once, on whichever
  // thread drops the last reference to the tensor, or before adopt returns when it throws
  // (std::invalid_argument for a negative dimension).
  static tensor_box adopt(tensor_dtype dtype, const std::vector<std::int64_t>& shape, void* data,
                          std::function<void(void*)> release);
  const std::shared_ptr<const impl>& get() const { return impl_; }

 private:
  std::shared_ptr<const impl> impl_;
};

}  // namespace actorpipe
