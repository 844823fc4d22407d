// ucx_transport: see ucx_transport.hpp. All per-peer state lives on the worker's progress
// thread (sends are queued to it with ucx_worker::execute), so nothing here takes a lock but
// the handler swap and the receive pool. No torch headers: tensors are reached through
// tensor_box only.
#include "transport/ucx/ucx_transport.hpp"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <deque>
#include <map>
#include <new>
#include <exception>
#include <future>
#include <mutex>
#include <sstream>
#include <stdexcept>
#include <unordered_map>
#include <utility>

#include "core/log.hpp"
#include "transport/ucx/ucx_worker.hpp"

namespace actorpipe::transport {

namespace {

// A failed send or receive, worded as a lost peer is ("UCX says 'Endpoint timeout' (the
// process died, ...)"), not as the operation's own text with its tag: the status after the
// operation's "failed: " (or "has failed: " for a peer already lost).
std::string lost_peer_reason(const std::string& error, const char* while_doing) {
  const auto at = error.rfind("failed: ");
  const std::string status = at == std::string::npos ? error : error.substr(at + 8);
  return "UCX says '" + status + "' " + while_doing + " (the process died, was killed or cannot be reached)";
}

constexpr std::uint64_t header_type = 1;
constexpr std::uint64_t payload_type = 2;
constexpr int type_shift = 56;
constexpr int source_shift = 40;
constexpr std::uint64_t source_mask = 0xffff;
constexpr std::uint64_t sequence_mask = (std::uint64_t{1} << source_shift) - 1;
constexpr std::uint64_t type_bits = std::uint64_t{0xff} << type_shift;
constexpr int max_processes = 1 << 16;
// A frame is 40 + 8 * ndims bytes and ndims travels as one byte: anything longer is malformed.
constexpr std::size_t header_buffer_bytes = 4096;
constexpr std::uintptr_t huge_page = std::uintptr_t{2} << 20;
constexpr std::size_t huge_page_hint_from = std::size_t{4} << 20;

std::uint64_t make_tag(std::uint64_t type, int source, std::uint64_t sequence) {
  return (type << type_shift) | ((static_cast<std::uint64_t>(source) & source_mask) << source_shift) |
         (sequence & sequence_mask);
}

std::string hex(std::uint64_t v) {
  std::ostringstream out;
  out << "0x" << std::hex << v;
  return out.str();
}

// A fresh receive tensor is new memory: UCX's first write faults every page in, and with 4 KiB
// pages that alone costs about as much as the transfer (~1.7 GB/s on a VM). Asking for
// transparent huge pages on its 2 MiB-aligned interior cuts the faults 512-fold. Only a hint:
// where THP is off, or the memory was already faulted in, nothing changes.
void hint_huge_pages(void* data, std::size_t nbytes) {
  if (nbytes < huge_page_hint_from) return;
  const auto start = reinterpret_cast<std::uintptr_t>(data);
  const std::uintptr_t begin = (start + huge_page - 1) & ~(huge_page - 1);
  const std::uintptr_t end = (start + nbytes) & ~(huge_page - 1);
  if (end > begin) ::madvise(reinterpret_cast<void*>(begin), end - begin, MADV_HUGEPAGE);
}

std::size_t page_bytes() {
  static const std::size_t page = [] {
    const long p = ::sysconf(_SC_PAGESIZE);
    return p > 0 ? static_cast<std::size_t>(p) : std::size_t{4096};
  }();
  return page;
}

// Whole pages, and above 8 pages steps of an eighth of the power of two at or below the size
// (at most 12.5% more than asked), so tensors of nearby sizes share buffers.
std::size_t size_class(std::size_t nbytes) {
  const std::size_t page = page_bytes();
  std::size_t step = page;
  if (nbytes > 8 * page) {
    std::size_t top = std::size_t{1} << (63 - __builtin_clzll(static_cast<unsigned long long>(nbytes)));
    step = std::max(page, top / 8);
  }
  return (nbytes + step - 1) / step * step;
}

// Page-aligned memory of `bytes` (a whole number of pages), from 4 MiB 2 MiB-aligned and marked
// for transparent huge pages. From malloc, not mmap: a buffer the pool cannot keep goes back
// to malloc, which hands that memory, already faulted in, to the next allocation of any size.
void* allocate_buffer(std::size_t bytes) {
  const bool huge = bytes >= huge_page_hint_from;
  void* p = nullptr;
  if (::posix_memalign(&p, huge ? huge_page : page_bytes(), bytes) != 0) throw std::bad_alloc();
  if (huge) ::madvise(p, bytes, MADV_HUGEPAGE);
  return p;
}

// Receive buffers by size class. take() runs on the progress thread; a buffer comes back from
// the deleter of the tensor over it, on any thread and possibly after the transport is gone:
// that deleter holds a shared_ptr to the pool.
class receive_pool : public std::enable_shared_from_this<receive_pool> {
 public:
  explicit receive_pool(ucx_receive_pool_options options) : options_(options) {}
  receive_pool(const receive_pool&) = delete;
  receive_pool& operator=(const receive_pool&) = delete;
  ~receive_pool() { free_idle(); }

  // An uninitialised tensor of `shape` (nbytes bytes) for a payload to land in.
  tensor_box take(tensor_dtype dtype, const std::vector<std::int64_t>& shape, std::size_t nbytes) {
    if (nbytes < options_.min_tensor_bytes) {
      {
        std::lock_guard<std::mutex> lock(mutex_);
        ++stats_.unpooled;
      }
      tensor_box plain = tensor_box::empty(dtype, shape);
      hint_huge_pages(plain.data(), nbytes);
      return plain;
    }
    const std::size_t bytes = size_class(nbytes);
    void* data = nullptr;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      auto found = idle_.find(bytes);
      if (found != idle_.end()) {
        data = found->second.back().data;  // the most recently used: likeliest still in cache
        found->second.pop_back();
        if (found->second.empty()) idle_.erase(found);
        stats_.idle_bytes -= bytes;
        ++stats_.reused;
        stats_.in_use_bytes += bytes;
      }
    }
    if (!data) {
      data = allocate_buffer(bytes);
      std::lock_guard<std::mutex> lock(mutex_);
      ++stats_.fresh;
      stats_.in_use_bytes += bytes;
    }
    std::shared_ptr<receive_pool> self = shared_from_this();
    // adopt gives the buffer back itself if it throws.
    return tensor_box::adopt(dtype, shape, data, [self, bytes](void* p) { self->give_back(p, bytes); });
  }

  // The transport is gone: free what is idle, and from now on every buffer that comes back.
  void close() {
    std::lock_guard<std::mutex> lock(mutex_);
    closed_ = true;
    free_idle();
  }

  ucx_receive_pool_stats stats() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return stats_;
  }

 private:
  struct idle_buffer {
    void* data;
    std::uint64_t returned_at;  // clock_ when it came back: the oldest are freed first
  };

  // Runs in a tensor deleter: must not throw. Frees under the lock (rare: past the cap, or
  // after close), which keeps it free of allocations that could fail.
  void give_back(void* data, std::size_t bytes) noexcept {
    std::lock_guard<std::mutex> lock(mutex_);
    stats_.in_use_bytes -= bytes;
    if (closed_ || bytes > options_.max_idle_bytes) {
      free_buffer(data);
      return;
    }
    while (stats_.idle_bytes + bytes > options_.max_idle_bytes && evict_oldest()) {
    }
    try {
      idle_[bytes].push_back(idle_buffer{data, ++clock_});
    } catch (...) {
      auto found = idle_.find(bytes);
      if (found != idle_.end() && found->second.empty()) idle_.erase(found);
      free_buffer(data);
      return;
    }
    stats_.idle_bytes += bytes;
    ++stats_.kept;
  }

  // Frees the idle buffer that came back first; false when none is idle.
  bool evict_oldest() {
    auto oldest = idle_.end();
    for (auto it = idle_.begin(); it != idle_.end(); ++it) {
      if (oldest == idle_.end() || it->second.front().returned_at < oldest->second.front().returned_at) oldest = it;
    }
    if (oldest == idle_.end()) return false;
    const std::size_t bytes = oldest->first;
    free_buffer(oldest->second.front().data);
    oldest->second.pop_front();
    if (oldest->second.empty()) idle_.erase(oldest);
    stats_.idle_bytes -= bytes;
    return true;
  }

  void free_buffer(void* data) {
    std::free(data);
    ++stats_.freed;
  }

  void free_idle() {
    for (auto& entry : idle_) {
      for (const idle_buffer& b : entry.second) free_buffer(b.data);
    }
    idle_.clear();
    stats_.idle_bytes = 0;
  }

  const ucx_receive_pool_options options_;
  mutable std::mutex mutex_;
  bool closed_ = false;
  std::uint64_t clock_ = 0;
  std::map<std::size_t, std::deque<idle_buffer>> idle_;  // by size class, oldest first
  ucx_receive_pool_stats stats_;
};

struct handler_pair {
  receive_handler on_receive;
  failure_handler on_failure;
};

// A tensor whose header arrived; handed over once its payload is in and every earlier tensor
// from the same process has been handed over.
struct arrival {
  tensor_meta meta;
  tensor_box tensor;
  bool done = false;
};

struct source_state {
  bool closed = false;  // reported through the failure handler: ignore it from now on
  std::deque<std::shared_ptr<arrival>> in_order;
};

}  // namespace

struct ucx_transport::state {
  int self = 0;
  int processes = 0;
  frame_limits limits;
  std::shared_ptr<receive_pool> pool;  // shared with the tensors over its buffers
  std::unique_ptr<ucx::ucx_worker> worker;
  std::atomic<bool> stopping{false};
  std::atomic<bool> connected{false};

  mutable std::mutex handlers_mutex;
  std::shared_ptr<const handler_pair> handlers;

  // Progress-thread-only from here on.
  std::vector<int> peer_of_process;  // worker peer id, -1 for self
  // connect() maps processes to peers in a task on this thread. A send that gets here first
  // (one made by a receive handler before connect, or while connect is under way) waits here,
  // and goes in order once the mapping exists.
  bool mapped = false;
  struct held_send {
    int dest;
    tensor_meta meta;
    tensor_box tensor;
  };
  std::vector<held_send> held_sends;
  std::unordered_map<int, int> process_of_peer;
  std::vector<std::uint64_t> next_sequence;  // per destination
  std::vector<source_state> sources;
  std::vector<std::uint8_t> header_buffer = std::vector<std::uint8_t>(header_buffer_bytes);
  bool posting_header = false;
  bool repost_header = false;

  std::shared_ptr<const handler_pair> current_handlers() const {
    std::lock_guard<std::mutex> lock(handlers_mutex);
    return handlers;
  }

  // Handlers run inside UCX callbacks: an exception must not unwind through C frames.
  void report_failure(int process, const std::string& reason) {
    auto h = current_handlers();
    if (!h || !h->on_failure) return;
    try {
      h->on_failure(process, reason);
    } catch (const std::exception& e) {
      log_error(std::string("ucx transport: failure handler threw: ") + e.what());
    } catch (...) {
      log_error("ucx transport: failure handler threw");
    }
  }

  void hand_over(const tensor_meta& meta, tensor_box tensor) {
    auto h = current_handlers();
    if (!h || !h->on_receive) return;  // contract: handlers are set before peers may send
    try {
      h->on_receive(meta, std::move(tensor));
    } catch (const std::exception& e) {
      log_error(std::string("ucx transport: receive handler threw: ") + e.what());
    } catch (...) {
      log_error("ucx transport: receive handler threw");
    }
  }

  // Closes the connection to a process and reports it, once.
  void close_source(int process, const std::string& reason) {
    source_state& source = sources[process];
    if (source.closed) return;
    source.closed = true;
    source.in_order.clear();  // pending payload receives keep their own tensors alive
    const int peer = peer_of_process[process];
    if (peer >= 0) worker->disconnect(peer);
    report_failure(process, reason);
  }

  void reject(int process, const std::string& what) {
    // The process is the one the message's tag names: a peer that has this process's UCX
    // address can send under any tag (UCX's ports take no token).
    close_source(process, "process " + std::to_string(process) + " sent a malformed frame: " + what +
                              " (or another peer, under its tag); its connection is closed");
  }

  void deliver(int process) {
    source_state& source = sources[process];
    while (!source.closed && !source.in_order.empty() && source.in_order.front()->done) {
      std::shared_ptr<arrival> next = std::move(source.in_order.front());
      source.in_order.pop_front();
      hand_over(next->meta, std::move(next->tensor));
    }
  }

  // Keeps exactly one header receive posted. A receive posted here may complete inside the
  // post (the header was already waiting): the completion then only asks for a re-post, which
  // this loop makes, so a backlog of headers never recurses.
  void post_header_receive() {
    if (posting_header) {
      repost_header = true;
      return;
    }
    posting_header = true;
    do {
      repost_header = false;
      if (stopping) break;
      worker->receive(make_tag(header_type, 0, 0), type_bits, header_buffer.data(), header_buffer.size(),
                      [this](std::string error, std::size_t received, std::uint64_t sender_tag) {
                        on_header(error, received, sender_tag);
                        post_header_receive();
                      });
    } while (repost_header);
    posting_header = false;
  }

  void on_header(const std::string& error, std::size_t received, std::uint64_t sender_tag) {
    if (stopping) return;
    const int process = static_cast<int>((sender_tag >> source_shift) & source_mask);
    const std::uint64_t sequence = sender_tag & sequence_mask;
    // Self-sends never travel through UCX; a process index outside the job has no connection
    // to close. Neither can come from a peer of this job that follows the protocol.
    const bool from_peer = sender_tag != 0 && process < processes && process != self;
    if (!error.empty()) {
      // Truncated: longer than any frame. Other errors (cancelled at shutdown) name no sender.
      if (from_peer && error.find("truncated") != std::string::npos && !sources[process].closed) {
        reject(process, "header of more than " + std::to_string(header_buffer_bytes) + " bytes");
      }
      return;
    }
    if (!from_peer || sources[process].closed) return;

    auto next = std::make_shared<arrival>();
    try {
      next->meta = decode_frame(header_buffer.data(), received, limits);
    } catch (const frame_error& e) {
      reject(process, e.what());
      return;
    }
    const std::uint64_t payload_tag = make_tag(payload_type, process, sequence);
    if (next->meta.tag != payload_tag) {
      reject(process, "frame tag " + hex(next->meta.tag) + " is not " + hex(payload_tag) +
                          ", the payload tag of its header " + hex(sender_tag));
      return;
    }
    const std::size_t nbytes = static_cast<std::size_t>(next->meta.nbytes);
    if (nbytes == 0) {  // no payload follows: a tensor with a zero-size dimension
      try {
        next->tensor = tensor_box::empty(next->meta.dtype, next->meta.shape);
      } catch (const std::exception& e) {
        reject(process, std::string("an empty tensor of its frame's shape: ") + e.what());
        return;
      }
      next->done = true;
      sources[process].in_order.push_back(std::move(next));
      deliver(process);
      return;
    }
    void* data = nullptr;
    try {
      next->tensor = pool->take(next->meta.dtype, next->meta.shape, nbytes);
      data = next->tensor.data();
    } catch (const std::exception& e) {
      close_source(process, "lost process " + std::to_string(process) + ": cannot allocate its " +
                                std::to_string(nbytes) + "-byte tensor: " + e.what());
      return;
    }
    sources[process].in_order.push_back(next);
    // The payload lands straight in the tensor; the callback keeps it alive until then.
    worker->receive(payload_tag, data, nbytes,
                    [this, process, next](std::string error, std::size_t got) {
                      on_payload(process, *next, error, got);
                    });
  }

  void on_payload(int process, arrival& arrived, const std::string& error, std::size_t received) {
    if (stopping || sources[process].closed) return;
    if (!error.empty()) {
      close_source(process, "lost process " + std::to_string(process) + ": " + lost_peer_reason(error, "receiving a tensor"));
      return;
    }
    if (received != arrived.meta.nbytes) {
      reject(process, "payload of " + std::to_string(received) + " bytes for a frame of nbytes=" +
                          std::to_string(arrived.meta.nbytes));
      return;
    }
    arrived.done = true;
    deliver(process);
  }

  void on_send_error(int process, const std::string& error) {
    if (stopping) return;
    close_source(process, "lost process " + std::to_string(process) + ": " + lost_peer_reason(error, "sending a tensor"));
  }

  void start_send(int dest, tensor_meta& meta, tensor_box& tensor) {
    if (stopping || sources[dest].closed) return;  // already reported: drop
    if (!mapped) {
      held_sends.push_back({dest, meta, tensor});
      return;
    }
    const int peer = peer_of_process[dest];
    const std::uint64_t sequence = next_sequence[dest]++ & sequence_mask;
    meta.tag = make_tag(payload_type, self, sequence);
    auto frame = std::make_shared<std::vector<std::uint8_t>>(encode_frame(meta));
    worker->send(peer, make_tag(header_type, self, sequence), frame->data(), frame->size(),
                 [this, dest, frame](std::string error) {
                   if (!error.empty()) on_send_error(dest, error);
                 });
    if (meta.nbytes == 0) return;
    const void* data = tensor.data();
    worker->send(peer, meta.tag, data, static_cast<std::size_t>(meta.nbytes),
                 [this, dest, tensor](std::string error) {
                   if (!error.empty()) on_send_error(dest, error);
                 });
  }
};

ucx_transport::ucx_transport(int self_process, int processes, frame_limits limits,
                             ucx_receive_pool_options pool)
    : state_(std::make_unique<state>()) {
  if (processes < 1 || processes > max_processes) {
    throw std::invalid_argument("ucx transport: processes=" + std::to_string(processes) + " outside [1, " +
                                std::to_string(max_processes) + "] (the tag holds 16 bits of process index)");
  }
  if (self_process < 0 || self_process >= processes) {
    throw std::invalid_argument("ucx transport: self_process=" + std::to_string(self_process) +
                                " outside [0, " + std::to_string(processes) + ")");
  }
  state& s = *state_;
  s.self = self_process;
  s.processes = processes;
  s.limits = limits;
  s.pool = std::make_shared<receive_pool>(pool);
  s.peer_of_process.assign(static_cast<std::size_t>(processes), -1);
  s.next_sequence.assign(static_cast<std::size_t>(processes), 0);
  s.sources.resize(static_cast<std::size_t>(processes));
  s.worker = std::make_unique<ucx::ucx_worker>();
  s.worker->on_peer_failure([&s](int peer, std::string reason) {
    if (s.stopping) return;
    auto found = s.process_of_peer.find(peer);
    if (found == s.process_of_peer.end()) return;
    s.close_source(found->second, "lost process " + std::to_string(found->second) + ": UCX says '" + reason +
                                      "' (the process died, was killed or cannot be reached)");
  });
  s.worker->execute([&s] { s.post_header_receive(); });
}

ucx_transport::~ucx_transport() {
  state_->stopping = true;
  // The progress thread ends first, the pointer to the worker still set: reset() nulls it before
  // the worker's destructor joins the thread, and a callback that had passed its `stopping`
  // check (a peer lost as the job ends) then called through null (ThreadSanitizer).
  state_->worker->stop();
  // Cancels what is posted; callbacks see `stopping` and touch nothing else. Buffers still held
  // by UCX die with the worker, not before.
  state_->worker.reset();
  // Tensors handed over may outlive us: their buffers are freed when they are released.
  state_->pool->close();
}

ucx_receive_pool_stats ucx_transport::receive_pool_stats() const { return state_->pool->stats(); }

std::vector<std::uint8_t> ucx_transport::address() const { return state_->worker->address(); }

void ucx_transport::connect(const std::vector<std::vector<std::uint8_t>>& addresses) {
  state& s = *state_;
  if (addresses.size() != static_cast<std::size_t>(s.processes)) {
    throw std::invalid_argument("ucx transport: connect got " + std::to_string(addresses.size()) +
                                " addresses for " + std::to_string(s.processes) + " processes");
  }
  for (int p = 0; p < s.processes; ++p) {
    if (p != s.self && addresses[static_cast<std::size_t>(p)].empty()) {
      throw std::invalid_argument("ucx transport: empty address for process " + std::to_string(p));
    }
    // Before UCX reads it: one it cannot read aborted the process on an assertion ("this is a bug").
    if (p != s.self)
      if (const std::string why = s.worker->address_problem(addresses[static_cast<std::size_t>(p)]); !why.empty())
        throw std::invalid_argument("ucx transport: process " + std::to_string(p) + " sent " + why);
  }
  if (s.connected.exchange(true)) throw std::logic_error("ucx transport: connect called twice");
  // One task on the progress thread: a peer failure is never seen before its mapping exists.
  auto done = std::make_shared<std::promise<void>>();
  auto finished = done->get_future();
  s.worker->execute([&s, &addresses, done] {
    try {
      for (int p = 0; p < s.processes; ++p) {
        if (p == s.self) continue;
        const int peer = s.worker->connect(addresses[static_cast<std::size_t>(p)]);
        s.peer_of_process[static_cast<std::size_t>(p)] = peer;
        s.process_of_peer[peer] = p;
      }
      s.mapped = true;
      for (auto& h : std::exchange(s.held_sends, {})) s.start_send(h.dest, h.meta, h.tensor);
      done->set_value();
    } catch (...) {
      done->set_exception(std::current_exception());
    }
  });
  finished.get();
}

void ucx_transport::set_handlers(receive_handler on_receive, failure_handler on_failure) {
  auto next = std::make_shared<const handler_pair>(handler_pair{std::move(on_receive), std::move(on_failure)});
  std::lock_guard<std::mutex> lock(state_->handlers_mutex);
  state_->handlers = std::move(next);
}

void ucx_transport::send(int dest, tensor_meta meta, tensor_box tensor) {
  state& s = *state_;
  if (dest < 0 || dest >= s.processes) {
    throw std::invalid_argument("ucx transport: dest=" + std::to_string(dest) + " outside [0, " +
                                std::to_string(s.processes) + ")");
  }
  if (!tensor.defined()) throw std::invalid_argument("ucx transport: cannot send an undefined tensor");
  // A self-send hands over this very tensor; a remote one needs its bytes in one block.
  if (dest != s.self) tensor = tensor.contiguous();
  meta.dtype = tensor.dtype();
  meta.shape = tensor.shape();
  meta.nbytes = tensor.nbytes();
  meta.tag = 0;
  try {
    const auto frame = encode_frame(meta);
    decode_frame(frame.data(), frame.size(), s.limits);
  } catch (const std::exception& e) {
    throw std::invalid_argument("ucx transport: cannot send this tensor to process " + std::to_string(dest) +
                                ": " + e.what());
  }

  if (dest == s.self) {
    auto h = s.current_handlers();
    if (!h || !h->on_receive) throw std::logic_error("ucx transport: send before set_handlers");
    h->on_receive(meta, std::move(tensor));
    return;
  }
  // A peer may send to us before we call connect, so a receive handler may answer before it:
  // on the transport thread such a send is held until connect maps the processes (as one made
  // while connect is under way). From any other thread it is a misuse.
  if (!s.connected && !s.worker->on_progress_thread()) throw std::logic_error("ucx transport: send before connect");
  tensor.data();  // throws std::invalid_argument here, not on the progress thread, for a GPU tensor
  s.worker->execute([&s, dest, meta = std::move(meta), tensor = std::move(tensor)]() mutable {
    s.start_send(dest, meta, tensor);
  });
}

}  // namespace actorpipe::transport
