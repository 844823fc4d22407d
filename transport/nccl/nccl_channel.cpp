// nccl_channel: an NCCL communicator in non-blocking mode plus its own CUDA stream. Non-blocking
// mode is what makes every wait boundable: creation, connection setup and completion are all
// polled (ncclCommGetAsyncError, cudaStreamQuery) against a deadline, and ncclCommAbort ends
// whatever a dead peer left hanging, including kernels spinning on the GPU.
#include "transport/nccl/nccl_channel.hpp"

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <cstring>
#include <stdexcept>
#include <thread>

namespace actorpipe::transport::nccl {
namespace {

static_assert(NCCL_UNIQUE_ID_BYTES == sizeof(ncclUniqueId), "ncclUniqueId is its bytes");

using clock_type = std::chrono::steady_clock;

const char* nccl_result_name(ncclResult_t result) {
  switch (result) {
    case ncclSuccess: return "ncclSuccess";
    case ncclUnhandledCudaError: return "ncclUnhandledCudaError";
    case ncclSystemError: return "ncclSystemError";
    case ncclInternalError: return "ncclInternalError";
    case ncclInvalidArgument: return "ncclInvalidArgument";
    case ncclInvalidUsage: return "ncclInvalidUsage";
    case ncclRemoteError: return "ncclRemoteError";
    case ncclInProgress: return "ncclInProgress";
    default: return "ncclResult";
  }
}

// "remote process exited or there was a network error (ncclRemoteError; NCCL: <last error>)".
std::string nccl_text(ncclResult_t result, ncclComm_t comm) {
  std::string text = std::string(ncclGetErrorString(result)) + " (" + nccl_result_name(result);
  const char* last = ncclGetLastError(comm);
  if (last != nullptr && *last != '\0') text += "; NCCL: " + std::string(last);
  return text + ")";
}

std::string cuda_text(cudaError_t error) {
  return std::string(cudaGetErrorString(error)) + " (" + cudaGetErrorName(error) + ")";
}

// "NCCL 2.28" from the linked library, not the header we compiled against.
std::string nccl_version_text() {
  int code = 0;
  if (ncclGetVersion(&code) != ncclSuccess || code <= 0) return "NCCL";
  // Codes are MAJOR*10000 + MINOR*100 + PATCH since 2.9 (MAJOR*1000 + MINOR*100 + PATCH before).
  const int major = code >= 10000 ? code / 10000 : code / 1000;
  const int minor = code >= 10000 ? (code / 100) % 100 : (code / 100) % 10;
  return "NCCL " + std::to_string(major) + "." + std::to_string(minor);
}

std::string describe(const p2p_op& op) {
  return op.dir == p2p_op::direction::send
             ? "send " + std::to_string(op.bytes) + " bytes to rank " + std::to_string(op.peer)
             : "receive " + std::to_string(op.bytes) + " bytes from rank " + std::to_string(op.peer);
}

// Short sleeps first: most waits end within microseconds; a hung one need not burn a core.
void back_off(int& round) {
  if (round < 50) {
    std::this_thread::yield();
  } else {
    std::this_thread::sleep_for(std::chrono::microseconds(round < 200 ? 50 : 1000));
  }
  ++round;
}

constexpr std::size_t max_listed_pending = 8;

}  // namespace

std::string nccl_unavailable_reason(int local_ranks) {
  int count = 0;
  const cudaError_t error = cudaGetDeviceCount(&count);
  if (error != cudaSuccess) {
    std::string reason = "no usable CUDA device: cudaGetDeviceCount: " + cuda_text(error);
    if (error == cudaErrorInsufficientDriver) {
      int runtime = 0;
      cudaRuntimeGetVersion(&runtime);
      reason += ": no NVIDIA driver is loaded, or it is older than this CUDA " +
                std::to_string(runtime / 1000) + "." + std::to_string(runtime % 1000 / 10) + " runtime";
    } else if (error == cudaErrorNoDevice) {
      reason += ": no GPU on this host, or CUDA_VISIBLE_DEVICES hides them all";
    }
    return reason;
  }
  if (count <= 0) return "no usable CUDA device: cudaGetDeviceCount found none";
  if (count < local_ranks) {
    return std::to_string(count) + " CUDA device" + (count == 1 ? "" : "s") + " for " +
           std::to_string(local_ranks) + " ranks on this host: " + nccl_version_text() +
           " refuses two ranks on one GPU (\"Duplicate GPU detected\"); run at most one rank "
           "per GPU";
  }
  return "";
}

std::vector<std::uint8_t> make_nccl_unique_id() {
  ncclUniqueId id;
  const ncclResult_t result = ncclGetUniqueId(&id);
  if (result != ncclSuccess) {
    throw std::runtime_error("nccl: ncclGetUniqueId (making the id rank 0 hands to every rank) "
                             "failed: " + nccl_text(result, nullptr));
  }
  const auto* bytes = reinterpret_cast<const std::uint8_t*>(id.internal);
  return std::vector<std::uint8_t>(bytes, bytes + sizeof(id.internal));
}

nccl_channel::nccl_channel(int rank, int world_size, const std::vector<std::uint8_t>& unique_id,
                           nccl_channel_options options)
    : rank_(rank), world_size_(world_size), options_(options) {
  // Arguments first, before any CUDA call (so they are checkable without a GPU).
  if (world_size < 1) {
    throw std::invalid_argument("nccl channel: world size must be >= 1: got " + std::to_string(world_size));
  }
  if (rank < 0 || rank >= world_size) {
    throw std::invalid_argument("nccl channel: rank must be in [0, " + std::to_string(world_size) +
                                "): got " + std::to_string(rank));
  }
  if (unique_id.size() != NCCL_UNIQUE_ID_BYTES) {
    throw std::invalid_argument(prefix() + "the unique id must be " + std::to_string(NCCL_UNIQUE_ID_BYTES) +
                                " bytes (from make_nccl_unique_id on rank 0): got " +
                                std::to_string(unique_id.size()));
  }
  if (options_.local_ranks < 0) options_.local_ranks = world_size;
  if (options_.local_rank < 0) options_.local_rank = rank;
  if (options_.local_ranks < 1 || options_.local_rank >= options_.local_ranks) {
    throw std::invalid_argument(prefix() + "local rank must be in [0, local ranks): got local rank " +
                                std::to_string(options_.local_rank) + ", local ranks " +
                                std::to_string(options_.local_ranks));
  }
  if (options_.timeout.count() <= 0) {
    throw std::invalid_argument(prefix() + "timeout must be > 0 ms: got " +
                                std::to_string(options_.timeout.count()));
  }

  const std::string unavailable = nccl_unavailable_reason(1);
  if (!unavailable.empty()) throw std::runtime_error(prefix() + unavailable);

  int count = 0;
  cudaGetDeviceCount(&count);  // succeeded just above
  // Fewer devices than local ranks is fine when each process sees its own GPU
  // (CUDA_VISIBLE_DEVICES per rank), so it is only a hint on an NCCL error, not a refusal.
  std::string hint;
  if (count < options_.local_ranks) {
    hint = " [" + nccl_unavailable_reason(options_.local_ranks) +
           ", unless CUDA_VISIBLE_DEVICES gives each process its own]";
  }
  device_ = options_.local_rank % count;
  cudaError_t error = cudaSetDevice(device_);
  if (error != cudaSuccess) {
    throw std::runtime_error(prefix() + "cudaSetDevice(" + std::to_string(device_) + "): " + cuda_text(error));
  }
  cudaStream_t stream = nullptr;
  error = cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
  if (error != cudaSuccess) {
    throw std::runtime_error(prefix() + "cudaStreamCreateWithFlags: " + cuda_text(error));
  }
  stream_ = stream;

  try {
    ncclUniqueId id;
    std::memcpy(id.internal, unique_id.data(), sizeof(id.internal));
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;  // every call returns at once; we poll with a deadline
    ncclComm_t comm = nullptr;
    const auto deadline = clock_type::now() + options_.timeout;
    const ncclResult_t result = ncclCommInitRankConfig(&comm, world_size, id, rank, &config);
    comm_ = comm;
    if (result != ncclSuccess && result != ncclInProgress) {
      fail("ncclCommInitRankConfig: " + nccl_text(result, comm) + hint);
    }
    wait_ready("ncclCommInitRankConfig (waiting for all " + std::to_string(world_size) +
                   " ranks to join with the same unique id)",
               deadline, hint);
  } catch (...) {
    if (comm_ != nullptr) ncclCommAbort(comm_);
    comm_ = nullptr;
    cudaStreamDestroy(stream_);
    stream_ = nullptr;
    throw;
  }
}

nccl_channel::~nccl_channel() {
  if (comm_ != nullptr) {
    // Unsynchronized work may be waiting on a peer that will never come: abort rather than
    // risk finalize blocking. Otherwise finalize (flush) within the timeout, then destroy.
    bool clean = pending_.empty() && pending_dropped_ == 0;
    if (clean) {
      cudaSetDevice(device_);
      ncclResult_t result = ncclCommFinalize(comm_);
      const auto deadline = clock_type::now() + options_.timeout;
      int round = 0;
      while (result == ncclInProgress && clock_type::now() < deadline) {
        back_off(round);
        if (ncclCommGetAsyncError(comm_, &result) != ncclSuccess) result = ncclInternalError;
      }
      clean = result == ncclSuccess;
    }
    if (clean) {
      ncclCommDestroy(comm_);
    } else {
      ncclCommAbort(comm_);
    }
    comm_ = nullptr;
  }
  if (stream_ != nullptr) cudaStreamDestroy(stream_);
}

std::string nccl_channel::prefix() const {
  std::string text = "nccl channel (rank " + std::to_string(rank_) + " of " + std::to_string(world_size_);
  if (device_ >= 0) text += ", cuda device " + std::to_string(device_);
  return text + "): ";
}

void nccl_channel::require_healthy(const char* what) const {
  if (!failure_.empty()) {
    throw std::runtime_error(prefix() + what + ": the channel was aborted earlier: " + failure_);
  }
}

void nccl_channel::check_op(const p2p_op& op, const char* what) const {
  const std::string where = prefix() + what + " (" + describe(op) + "): ";
  if (op.peer < 0 || op.peer >= world_size_) {
    throw std::invalid_argument(where + "peer must be in [0, " + std::to_string(world_size_) + ")");
  }
  if (op.bytes == 0) return;
  if (op.device_ptr == nullptr) throw std::invalid_argument(where + "device pointer is null");
  cudaPointerAttributes attributes{};
  const cudaError_t error = cudaPointerGetAttributes(&attributes, op.device_ptr);
  if (error != cudaSuccess) {
    cudaGetLastError();  // not sticky; do not let it leak into a later call
    throw std::invalid_argument(where + "cudaPointerGetAttributes: " + cuda_text(error));
  }
  if (attributes.type == cudaMemoryTypeUnregistered || attributes.type == cudaMemoryTypeHost) {
    throw std::invalid_argument(where + "the pointer is host memory; NCCL moves device memory "
                                "(cudaMalloc on cuda device " + std::to_string(device_) + ")");
  }
  if (attributes.type == cudaMemoryTypeDevice && attributes.device != device_) {
    throw std::invalid_argument(where + "the buffer is on cuda device " + std::to_string(attributes.device) +
                                ", this channel uses cuda device " + std::to_string(device_));
  }
}

void nccl_channel::send(int peer, const void* device_ptr, std::size_t bytes) {
  const p2p_op op = p2p_op::send(peer, device_ptr, bytes);
  if (peer == rank_) {
    throw std::invalid_argument(prefix() + "send (" + describe(op) +
                                "): a send to this rank itself needs its receive in the same "
                                "exchange()");
  }
  post({op}, "send");
}

void nccl_channel::receive(int peer, void* device_ptr, std::size_t bytes) {
  const p2p_op op = p2p_op::receive(peer, device_ptr, bytes);
  if (peer == rank_) {
    throw std::invalid_argument(prefix() + "receive (" + describe(op) +
                                "): a receive from this rank itself needs its send in the same "
                                "exchange()");
  }
  post({op}, "receive");
}

void nccl_channel::exchange(int peer, const void* send_ptr, void* receive_ptr, std::size_t bytes) {
  exchange({p2p_op::send(peer, send_ptr, bytes), p2p_op::receive(peer, receive_ptr, bytes)});
}

void nccl_channel::exchange(const std::vector<p2p_op>& ops) {
  // NCCL pairs a rank's sends to itself with its receives from itself in posting order; an
  // unpaired one would spin forever on the GPU, so refuse it here.
  std::vector<std::size_t> self_sends;
  std::vector<std::size_t> self_receives;
  for (const p2p_op& op : ops) {
    if (op.peer != rank_) continue;
    (op.dir == p2p_op::direction::send ? self_sends : self_receives).push_back(op.bytes);
  }
  if (self_sends != self_receives) {
    throw std::invalid_argument(prefix() + "exchange: sends to this rank itself must pair up, in order "
                                "and size, with receives from it: got " + std::to_string(self_sends.size()) +
                                " send(s) and " + std::to_string(self_receives.size()) + " receive(s)");
  }
  post(ops, "exchange");
}

void nccl_channel::post(const std::vector<p2p_op>& ops, const char* what) {
  require_healthy(what);
  for (const p2p_op& op : ops) check_op(op, what);
  if (ops.empty()) return;

  std::string listed;
  for (const p2p_op& op : ops) listed += (listed.empty() ? "" : ", ") + describe(op);
  const std::string call = std::string(what) + " (" + listed + ")";

  const cudaError_t error = cudaSetDevice(device_);
  if (error != cudaSuccess) fail(call + ": cudaSetDevice: " + cuda_text(error));
  const auto deadline = clock_type::now() + options_.timeout;
  ncclResult_t result = ncclGroupStart();
  if (result != ncclSuccess) fail(call + ": ncclGroupStart: " + nccl_text(result, comm_));
  for (const p2p_op& op : ops) {
    result = op.dir == p2p_op::direction::send
                 ? ncclSend(op.device_ptr, op.bytes, ncclUint8, op.peer, comm_, stream_)
                 : ncclRecv(op.device_ptr, op.bytes, ncclUint8, op.peer, comm_, stream_);
    if (result != ncclSuccess && result != ncclInProgress) {
      ncclGroupEnd();  // close the group before aborting
      fail(call + ": " + (op.dir == p2p_op::direction::send ? "ncclSend" : "ncclRecv") + ": " +
           nccl_text(result, comm_));
    }
  }
  result = ncclGroupEnd();
  if (result != ncclSuccess && result != ncclInProgress) fail(call + ": ncclGroupEnd: " + nccl_text(result, comm_));
  for (const p2p_op& op : ops) {
    if (pending_.size() < max_listed_pending) {
      pending_.push_back(describe(op));
    } else {
      ++pending_dropped_;
    }
  }
  // The first operation with a peer sets up the connection, which needs that peer to post too.
  wait_ready(call + ": enqueueing (connection setup needs the peer to post its matching op)", deadline);
}

void nccl_channel::wait_ready(const std::string& what, clock_type::time_point deadline,
                              const std::string& hint) {
  int round = 0;
  while (true) {
    ncclResult_t state = ncclSuccess;
    const ncclResult_t result = ncclCommGetAsyncError(comm_, &state);
    if (result != ncclSuccess) fail(what + ": ncclCommGetAsyncError: " + nccl_text(result, comm_) + hint);
    if (state == ncclSuccess) return;
    if (state != ncclInProgress) fail(what + ": " + nccl_text(state, comm_) + hint);
    if (clock_type::now() >= deadline) {
      fail(what + ": not done after " + std::to_string(options_.timeout.count()) +
           " ms (a rank died, never joined, or never posted its side)" + hint);
    }
    back_off(round);
  }
}

std::string nccl_channel::pending_text() const {
  std::string listed;
  for (const std::string& op : pending_) listed += (listed.empty() ? "" : ", ") + op;
  if (pending_dropped_ > 0) listed += " and " + std::to_string(pending_dropped_) + " more";
  return listed.empty() ? "nothing" : listed;
}

void nccl_channel::synchronize(std::chrono::milliseconds timeout) {
  require_healthy("synchronize");
  const auto deadline = clock_type::now() + timeout;
  int round = 0;
  while (true) {
    ncclResult_t state = ncclSuccess;
    const ncclResult_t result = ncclCommGetAsyncError(comm_, &state);
    if (result != ncclSuccess) {
      fail("synchronize (pending: " + pending_text() + "): ncclCommGetAsyncError: " + nccl_text(result, comm_));
    }
    if (state != ncclSuccess && state != ncclInProgress) {
      fail("synchronize (pending: " + pending_text() + "): " + nccl_text(state, comm_));
    }
    const cudaError_t error = cudaStreamQuery(stream_);
    if (error == cudaSuccess && state == ncclSuccess) break;
    if (error != cudaSuccess && error != cudaErrorNotReady) {
      fail("synchronize (pending: " + pending_text() + "): cudaStreamQuery: " + cuda_text(error));
    }
    if (clock_type::now() >= deadline) {
      fail("synchronize: not complete after " + std::to_string(timeout.count()) + " ms (pending: " +
           pending_text() + "): a peer died, or never posted its matching send/receive");
    }
    back_off(round);
  }
  pending_.clear();
  pending_dropped_ = 0;
}

void nccl_channel::abort(const std::string& reason) {
  if (comm_ != nullptr) ncclCommAbort(comm_);  // frees the communicator, even if it returns an error
  comm_ = nullptr;
  if (failure_.empty()) failure_ = reason.empty() ? "aborted" : reason;
  pending_.clear();
  pending_dropped_ = 0;
}

void nccl_channel::fail(const std::string& message) {
  const std::string full = prefix() + message;
  abort(full);
  throw std::runtime_error(full + "; communicator aborted");
}

}  // namespace actorpipe::transport::nccl
