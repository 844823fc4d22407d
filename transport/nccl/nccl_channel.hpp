// A point-to-point NCCL channel between the processes of a job: the GPU data plane's raw byte
// mover (device buffers in, device buffers out; what the bytes mean rides in a tensor_meta over
// the control plane). Every wait is bounded: a dead peer gives an error, never a hang.
//
// Raw device pointers, not torch tensors: the LibTorch on the build machines is CPU-only. Wiring
// GPU tensors (tensor.data_ptr() plus a stream hand-off) needs a CUDA build of LibTorch.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

// Opaque CUDA / NCCL handles, so users of this header need neither cuda_runtime_api.h nor nccl.h
// (cudaStream_t is CUstream_st*, ncclComm_t is ncclComm*).
struct CUstream_st;
struct ncclComm;

namespace actorpipe::transport::nccl {

/// "" when this process can use a GPU for NCCL with `local_ranks` ranks of the job on this host,
/// each seeing the same devices; otherwise why not, for a user ("no usable CUDA device:
/// cudaGetDeviceCount: CUDA driver version is insufficient ... (cudaErrorInsufficientDriver): no
/// NVIDIA driver is loaded ...", "1 CUDA device for 2 ranks on this host: NCCL 2.28 refuses two
/// ranks on one GPU ..."). Initializes the CUDA runtime: call it after fork(), never in a parent
/// that will fork CUDA users.
std::string nccl_unavailable_reason(int local_ranks = 1);

/// A fresh ncclUniqueId (NCCL_UNIQUE_ID_BYTES bytes) for rank 0 to hand to every rank through
/// the control plane. Needs no GPU. Throws std::runtime_error with ncclGetErrorString.
std::vector<std::uint8_t> make_nccl_unique_id();

struct nccl_channel_options {
  /// This process's index among the job's processes on this host (LOCAL_RANK); picks the
  /// device: local_rank % device count. -1: rank (every rank on this host).
  int local_rank = -1;
  /// Processes of the job on this host (LOCAL_WORLD_SIZE). -1: world size (one host).
  int local_ranks = -1;
  /// Bound on communicator creation, on enqueueing (connection setup with a peer) and on
  /// synchronize(); past it the communicator is aborted and the call throws.
  std::chrono::milliseconds timeout{std::chrono::seconds(120)};
};

/// One send or receive of a group: all ops of one exchange() are posted together
/// (ncclGroupStart/End), so a send and a receive that pair up across ranks cannot deadlock.
struct p2p_op {
  enum class direction { send, receive };
  direction dir = direction::send;
  int peer = 0;
  void* device_ptr = nullptr;  // read for send, written for receive
  std::size_t bytes = 0;

  static p2p_op send(int peer, const void* device_ptr, std::size_t bytes) {
    return {direction::send, peer, const_cast<void*>(device_ptr), bytes};
  }
  static p2p_op receive(int peer, void* device_ptr, std::size_t bytes) {
    return {direction::receive, peer, device_ptr, bytes};
  }
};

/// An NCCL communicator over the job's processes plus its own CUDA stream. Sends and receives
/// are asynchronous: they are enqueued on stream() and complete in order; synchronize() waits
/// for all of them. Buffers must stay valid and untouched until then. One thread drives a
/// channel (not thread-safe). After an error the communicator is aborted and every later call
/// throws std::runtime_error naming the first error.
class nccl_channel {
 public:
  /// Joins the communicator of `world_size` ranks as `rank`, with the unique id bytes from
  /// make_nccl_unique_id() on rank 0. Selects the device (cudaSetDevice) and creates a
  /// non-blocking stream and communicator; returns once every rank has joined. Throws
  /// std::invalid_argument for bad arguments and std::runtime_error when there is no usable
  /// device or NCCL fails or times out (a rank that never joins) -- the message says which rank,
  /// which call and why (cudaGetErrorString / ncclGetErrorString / ncclGetLastError), and notes
  /// NCCL's one-rank-per-GPU rule when this host has fewer devices than local ranks.
  nccl_channel(int rank, int world_size, const std::vector<std::uint8_t>& unique_id,
               nccl_channel_options options = {});
  /// Flushes (ncclCommFinalize, bounded by options.timeout) and destroys the communicator;
  /// aborts it instead when unsynchronized work remains or the flush does not finish.
  ~nccl_channel();

  nccl_channel(const nccl_channel&) = delete;
  nccl_channel& operator=(const nccl_channel&) = delete;

  int rank() const { return rank_; }
  int world_size() const { return world_size_; }
  int device() const { return device_; }
  /// The channel's CUDA stream (a cudaStream_t): make it wait on the producer's stream before a
  /// send, and the consumer wait on it after a receive.
  CUstream_st* stream() const { return stream_; }

  /// Sends `bytes` from device memory to `peer` (ncclSend). Alone it completes only once the
  /// peer posts the matching receive; use exchange() when both sides send and receive.
  void send(int peer, const void* device_ptr, std::size_t bytes);
  /// Receives exactly `bytes` from `peer` into device memory (ncclRecv).
  void receive(int peer, void* device_ptr, std::size_t bytes);

  /// Posts all ops in one NCCL group: pipeline patterns (send to next, receive from previous)
  /// and swaps. A send to and receive from this rank itself are allowed here (a local copy).
  void exchange(const std::vector<p2p_op>& ops);
  /// Swap with one peer: sends `bytes` from send_ptr and receives as many into receive_ptr.
  void exchange(int peer, const void* send_ptr, void* receive_ptr, std::size_t bytes);

  /// Waits until everything posted so far has completed. Polls the stream and
  /// ncclCommGetAsyncError; on an NCCL error, a CUDA error, or `timeout` passing, aborts the
  /// communicator (ncclCommAbort, which also stops kernels waiting on a dead peer) and throws
  /// std::runtime_error naming what was pending.
  void synchronize(std::chrono::milliseconds timeout);
  void synchronize() { synchronize(options_.timeout); }

  /// Aborts the communicator now (idempotent). Later calls throw with `reason`.
  void abort(const std::string& reason = "aborted by the caller");
  bool aborted() const { return !failure_.empty(); }

 private:
  void require_healthy(const char* what) const;
  void check_op(const p2p_op& op, const char* what) const;
  void post(const std::vector<p2p_op>& ops, const char* what);
  void wait_ready(const std::string& what, std::chrono::steady_clock::time_point deadline,
                  const std::string& hint = "");
  [[noreturn]] void fail(const std::string& message);
  std::string prefix() const;
  std::string pending_text() const;

  int rank_ = 0;
  int world_size_ = 0;
  int device_ = -1;
  nccl_channel_options options_;
  CUstream_st* stream_ = nullptr;
  ncclComm* comm_ = nullptr;
  std::string failure_;               // first error; non-empty once aborted
  std::vector<std::string> pending_;  // ops posted since the last synchronize, for messages
  std::size_t pending_dropped_ = 0;   // ops not listed in pending_ (kept short)
};

}  // namespace actorpipe::transport::nccl
