// Makes this process's tensor_transport by kind. The one place that names the backends: a new
// backend is a folder beside local/ and ucx/ plus one entry in transport_factory.cpp, and
// nothing above transport/ learns its name.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "transport/tensor_frame.hpp"
#include "transport/transport.hpp"

namespace actorpipe::transport {

struct transport_options {
  std::string kind = "local";  // one of tensor_transport_kinds()
  int process = 0;             // this process's index in [0, processes)
  int processes = 1;
  frame_limits limits;         // what an incoming frame may claim (backends with peers check it)
  // About how many received bytes may be alive at once (e.g. every microbatch's activation):
  // a backend that pools receive buffers keeps at least this much idle for reuse.
  std::size_t in_flight_bytes = 0;
};

// The kind a job of `processes` processes gets unless told otherwise: "local" for one process,
// "ucx" for several.
std::string default_transport_kind(int processes);

// Every kind make_tensor_transport knows, in the order it lists them in errors.
std::vector<std::string> tensor_transport_kinds();

// Throws std::invalid_argument naming the option and value for an unknown kind or a kind that
// cannot serve `processes` (local: one process only); what the backend itself throws passes on
// (ucx: std::runtime_error when UCX refuses).
std::shared_ptr<tensor_transport> make_tensor_transport(const transport_options& options);

}  // namespace actorpipe::transport
