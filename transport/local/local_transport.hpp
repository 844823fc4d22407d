// The one-process backend: a tensor "sent" to this process is handed to the receive handler
// at once, zero copy (the tensor_box is shared, not copied).
#pragma once

#include <memory>

#include "transport/transport.hpp"

namespace actorpipe::transport {

std::shared_ptr<tensor_transport> make_local_transport();

}  // namespace actorpipe::transport
