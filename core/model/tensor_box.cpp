// tensor_box accessors: the only part of the handle that needs torch.
#include "core/model/tensor_box.hpp"

#include "core/model/tensor_box_torch.hpp"

#include <stdexcept>
#include <string>

namespace actorpipe {

bool tensor_box::defined() const { return impl_ && impl_->tensor.defined(); }

std::vector<std::int64_t> tensor_box::shape() const {
  if (!defined()) return {};
  const auto sizes = impl_->tensor.sizes();
  return std::vector<std::int64_t>(sizes.begin(), sizes.end());
}

std::size_t tensor_box::nbytes() const { return defined() ? impl_->tensor.nbytes() : 0; }

tensor_dtype tensor_box::dtype() const {
  if (!defined()) throw std::invalid_argument("tensor_box::dtype: undefined tensor");
  switch (impl_->tensor.scalar_type()) {
    case at::kFloat: return tensor_dtype::f32;
    case at::kDouble: return tensor_dtype::f64;
    case at::kHalf: return tensor_dtype::f16;
    case at::kBFloat16: return tensor_dtype::bf16;
    case at::kLong: return tensor_dtype::i64;
    case at::kInt: return tensor_dtype::i32;
    default:
      throw std::invalid_argument(std::string("tensor_box::dtype: element type ") +
                                  c10::toString(impl_->tensor.scalar_type()) + " cannot cross processes");
  }
}

void* tensor_box::data() const {
  if (!defined()) throw std::invalid_argument("tensor_box::data: undefined tensor");
  const at::Tensor& t = impl_->tensor;
  if (!t.is_contiguous() || !t.device().is_cpu())
    throw std::invalid_argument("tensor_box::data: needs a contiguous CPU tensor");
  return t.data_ptr();
}

tensor_box tensor_box::contiguous() const {
  if (!defined() || impl_->tensor.is_contiguous()) return *this;
  return box(impl_->tensor.contiguous());
}

namespace {

at::ScalarType scalar_type_of(tensor_dtype dtype) {
  switch (dtype) {
    case tensor_dtype::f32: return at::kFloat;
    case tensor_dtype::f16: return at::kHalf;
    case tensor_dtype::bf16: return at::kBFloat16;
    case tensor_dtype::i64: return at::kLong;
    case tensor_dtype::i32: return at::kInt;
    case tensor_dtype::f64: return at::kDouble;
  }
  return at::kFloat;
}

}  // namespace

tensor_box tensor_box::empty(tensor_dtype dtype, const std::vector<std::int64_t>& shape) {
  return box(at::empty(shape, at::TensorOptions().dtype(scalar_type_of(dtype))));
}

tensor_box tensor_box::adopt(tensor_dtype dtype, const std::vector<std::int64_t>& shape, void* data,
                             std::function<void(void*)> release) {
  // Whoever empties `once` first calls release: torch's deleter once the storage holds the
  // pointer, or the catch below when from_blob threw before it took the pointer over.
  std::shared_ptr<std::function<void(void*)>> once;
  try {
    once = std::make_shared<std::function<void(void*)>>(std::move(release));
  } catch (...) {
    if (release) release(data);
    throw;
  }
  const auto run_once = [](std::function<void(void*)>& f, void* p) {
    std::function<void(void*)> taken = std::move(f);
    f = nullptr;
    if (taken) taken(p);
  };
  try {
    for (const std::int64_t d : shape) {
      if (d < 0) throw std::invalid_argument("tensor_box::adopt: negative dimension " + std::to_string(d));
    }
    return box(at::from_blob(data, shape, [once, run_once](void* p) { run_once(*once, p); },
                             at::TensorOptions().dtype(scalar_type_of(dtype)).device(at::kCPU)));
  } catch (...) {
    run_once(*once, data);
    throw;
  }
}

}  // namespace actorpipe
