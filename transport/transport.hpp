// The interface the actors use to move a tensor to another process of the job and to be told
// when one arrived. Backends live beside it: local/ (one process: a hand-off), ucx/ (CPU memory
// over tcp, shared memory, rdma); transport_factory.hpp is the one place that names them.
// (nccl/ is a GPU channel of its own, not a tensor_transport.) Peers are process indices; what
// a tensor is (kind, step, microbatch, virtual stage) rides in its tensor_meta.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/model/tensor_box.hpp"
#include "transport/tensor_frame.hpp"

namespace actorpipe::transport {

// Called once per arrived tensor, on a transport thread (local: the sender's thread).
using receive_handler = std::function<void(const tensor_meta& meta, tensor_box tensor)>;
// Called when a peer process can no longer be reached, or sent something malformed (its
// connection is closed first). `reason` is for a user: it names the peer and what happened.
using failure_handler = std::function<void(int process, const std::string& reason)>;

class tensor_transport {
 public:
  virtual ~tensor_transport() = default;

  // "local", "ucx", ...
  virtual std::string name() const = 0;

  // What another process needs to reach this one (opaque bytes, handed to every peer through
  // the control plane before connect). A backend without peers returns none.
  virtual std::vector<std::uint8_t> address() const = 0;

  // addresses[p] is process p's address() (own entry ignored): reach every peer. Call once,
  // after set_handlers and before the first send to a peer. Peers may send to us before it;
  // a receive handler that answers then has its send held until connect.
  virtual void connect(const std::vector<std::vector<std::uint8_t>>& addresses) = 0;

  // Installs the handlers; call before the first send, and before peers may send to us.
  virtual void set_handlers(receive_handler on_receive, failure_handler on_failure) = 0;

  // Moves `tensor` to process `dest` (this process included). The transport fills meta's dtype,
  // shape, nbytes and tag from the tensor; the caller fills kind, step, microbatch,
  // virtual_stage and source_rank. Asynchronous: the transport keeps the tensor alive until
  // the bytes are out. A failure is reported through the failure handler, never thrown from a
  // transport thread; send itself throws std::invalid_argument for a bad dest or tensor.
  virtual void send(int dest, tensor_meta meta, tensor_box tensor) = 0;
};

}  // namespace actorpipe::transport
