// tensor_box accessors: the only part of the handle that needs torch.
#include "core/model/tensor_box.hpp"

#include "core/model/tensor_box_torch.hpp"

namespace actorpipe {

bool tensor_box::defined() const { return impl_ && impl_->tensor.defined(); }

std::vector<std::int64_t> tensor_box::shape() const {
  if (!defined()) return {};
  const auto sizes = impl_->tensor.sizes();
  return std::vector<std::int64_t>(sizes.begin(), sizes.end());
}

std::size_t tensor_box::nbytes() const { return defined() ? impl_->tensor.nbytes() : 0; }

}  // namespace actorpipe
