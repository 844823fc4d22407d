// The UCX backend of tensor_transport: tensors move between processes as a metadata frame
// followed by the raw payload bytes, both as UCX tagged messages, received straight into the
// tensor handed over (no staging copy). Payloads of at least min_tensor_bytes land in buffers
// from a receive pool, which the tensor gives back when its last reference goes: memory written
// for the first time costs a page fault per page, about as much as the transfer itself.
//
// Tags are 64 bits: [8 message type: 1 header, 2 payload][16 source process][40 sequence],
// the sequence counting per sender and destination. The receiver keeps one header receive
// posted with a mask on the type bits only (any source, any sequence).
//
// Guarantees: tensors from one process to another are handed over in the order send() was
// called (sends ordered by happens-before; concurrent calls from two threads have no order).
// After a peer is reported through the failure handler, nothing more from it is delivered and
// sends to it are dropped. Peer failure is detected only where UCX allows it on the endpoint:
// with UCX_TLS naming shared-memory transports alone (no tcp, no rdma) it refuses, and a dead
// peer goes unreported.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "transport/transport.hpp"

namespace actorpipe::transport {

namespace ucx {
class ucx_worker;
}

// The receive pool: buffers by size class (page-aligned; transparent huge pages asked for from
// 4 MiB), kept for reuse when the tensor over them is released, on whatever thread, also after
// the transport is gone (then they are freed instead).
struct ucx_receive_pool_options {
  std::size_t max_idle_bytes = std::size_t{256} << 20;  // kept for reuse; beyond, the oldest are freed
  std::size_t min_tensor_bytes = std::size_t{64} << 10;  // smaller payloads get a plain tensor
};

struct ucx_receive_pool_stats {
  std::uint64_t fresh = 0;     // receives that got a newly mapped buffer
  std::uint64_t reused = 0;    // receives that got a buffer back from an earlier tensor
  std::uint64_t unpooled = 0;  // receives below min_tensor_bytes (plain tensors)
  std::uint64_t kept = 0;      // released buffers kept for reuse
  std::uint64_t freed = 0;     // buffers freed (past max_idle_bytes, or the transport is gone)
  std::size_t idle_bytes = 0;    // now kept for reuse
  std::size_t in_use_bytes = 0;  // now under a tensor or a pending receive
};

class ucx_transport final : public tensor_transport {
 public:
  // Creates this process's UCX worker (progress thread). self_process = this process's index
  // in [0, processes), processes <= 65536; limits bound every incoming frame (frame_limits).
  // Throws std::invalid_argument for bad indices, std::runtime_error when UCX refuses.
  ucx_transport(int self_process, int processes, frame_limits limits, ucx_receive_pool_options pool = {});
  // Safe with receives still posted and peers dead; handlers are not called from here on.
  // Received tensors stay valid; their buffers are freed when they are released.
  ~ucx_transport() override;

  ucx_transport(const ucx_transport&) = delete;
  ucx_transport& operator=(const ucx_transport&) = delete;

  // This worker's address, to hand to the other processes through the control plane.
  std::vector<std::uint8_t> address() const override;

  // addresses[p] for every process p (own entry ignored): endpoints to every peer. Call once,
  // before the first send to a peer.
  void connect(const std::vector<std::vector<std::uint8_t>>& addresses) override;

  std::string name() const override { return "ucx"; }
  // Handlers run on the progress thread (a self-send: on the sender's thread). They may call
  // send(); they must not destroy this transport, and what they use must outlive it.
  void set_handlers(receive_handler on_receive, failure_handler on_failure) override;
  // Validates meta against the frame limits (std::invalid_argument, with the frame error, for
  // anything the receiver would reject), so a well-behaved process is never disconnected for
  // its own metadata.
  void send(int dest, tensor_meta meta, tensor_box tensor) override;

  // A snapshot of the receive pool's counters (any thread).
  ucx_receive_pool_stats receive_pool_stats() const;

 private:
  struct state;
  std::unique_ptr<state> state_;
};

}  // namespace actorpipe::transport
