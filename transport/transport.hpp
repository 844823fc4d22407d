// The interface the actors use to move a tensor to another process of the job and to be told
// when one arrived. Backends live beside it: local/ (one process: a hand-off), ucx/ (CPU memory
// over tcp, shared memory, rdma), nccl/ (GPU memory). Peers are process indices; what a tensor
// is (kind, step, microbatch, virtual stage) rides in its tensor_meta.
#pragma once

#include <functional>
#include <memory>
#include <string>

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
