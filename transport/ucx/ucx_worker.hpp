// One UCX context + worker driven by its own progress thread: the data plane's raw byte mover.
// Worker addresses travel over the control plane; tagged messages then go peer to peer.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

// Opaque UCX handles, so users of this header do not need <ucp/api/ucp.h>.
struct ucp_context;
struct ucp_worker;
struct ucp_ep;

namespace actorpipe::transport::ucx {

/// Thread-safe front for a single-threaded UCX worker. Every public call hands its work to the
/// progress thread (the only thread that touches the ucp_worker); completion callbacks run on
/// that thread, so they must be short and must not destroy this object.
class ucx_worker {
public:
  using send_callback = std::function<void(std::string error)>;
  using receive_callback = std::function<void(std::string error, std::size_t received)>;
  /// sender_tag: the matched message's full tag (valid when error is empty or the message was
  /// truncated; 0 when UCX reported none).
  using tagged_receive_callback =
      std::function<void(std::string error, std::size_t received, std::uint64_t sender_tag)>;
  using failure_callback = std::function<void(int peer, std::string reason)>;

  /// Creates the UCX context (TAG + WAKEUP features) and worker and starts the progress thread.
  /// `settings` override the UCX environment's for this context ({"TLS", "tcp"} is UCX_TLS=tcp).
  /// Throws std::runtime_error when UCX refuses (message carries ucs_status_string).
  explicit ucx_worker(const std::vector<std::pair<std::string, std::string>>& settings = {});
  ~ucx_worker();
  /// Ends the progress thread and waits for it (the destructor does too): afterwards no callback
  /// runs but from this object's destruction. For an owner whose callbacks use its pointer to
  /// this worker: destroying it through that pointer (unique_ptr::reset) nulls it first.
  void stop();

  ucx_worker(const ucx_worker&) = delete;
  ucx_worker& operator=(const ucx_worker&) = delete;

  /// This worker's address blob, to hand to peers through the control plane.
  std::vector<std::uint8_t> address() const;

  /// Why UCX could not read `peer_address` as a worker address of its own build, or "" (the
  /// header's format version against this worker's, and a least length). UCX asserts on one it
  /// cannot read, aborting the process: connect refuses it first (std::invalid_argument).
  std::string address_problem(const std::vector<std::uint8_t>& peer_address) const;

  /// Creates an endpoint to a peer's address blob. Returns the peer id. Peer error handling is
  /// on when the transports allow it; UCX 1.13's shared-memory transports refuse it, so with
  /// UCX_TLS naming only those (no tcp, no rdma) the endpoint is made without it and a dead
  /// peer of that endpoint goes unreported (see detects_peer_failure).
  int connect(const std::vector<std::uint8_t>& peer_address);

  /// Whether the endpoint of this peer id reports peer failure (false for an unknown id).
  bool detects_peer_failure(int peer) const;

  /// Closes a peer's endpoint at once (in-flight sends to it complete with errors) and
  /// forgets it: later sends to it fail, and its failure is no longer reported.
  void disconnect(int peer);

  /// Runs work on the progress thread, in order with the other calls made from this thread;
  /// inline when called on the progress thread (from a completion callback).
  void execute(std::function<void()> work);

  /// Whether the caller is this worker's progress thread (a completion callback or a task).
  bool on_progress_thread() const;

  /// Sends nbytes from data under tag. data must stay valid until done runs; error is empty on
  /// success.
  void send(int peer, std::uint64_t tag, const void* data, std::size_t nbytes, send_callback done);

  /// Receives one message with exactly this tag straight into data (no staging copy). A message
  /// longer than nbytes completes with an error, never a crash.
  void receive(std::uint64_t tag, void* data, std::size_t nbytes, receive_callback done);

  /// Receives one message whose tag matches `tag` on the bits set in tag_mask (0 bits are
  /// wildcards); done gets the sender's full tag.
  void receive(std::uint64_t tag, std::uint64_t tag_mask, void* data, std::size_t nbytes,
               tagged_receive_callback done);

  /// Called on the progress thread when UCX reports a peer's endpoint as failed.
  void on_peer_failure(failure_callback callback);

  /// Sends and receives posted but not yet completed (for tests and diagnostics).
  std::size_t pending_operations() const { return pending_count_.load(); }

private:
  struct operation;
  struct peer;
  using task = std::function<void()>;

  void enqueue(task t);
  void wake();
  void progress_loop();
  void run_tasks();
  void shutdown_on_progress_thread();
  int connect_on_progress_thread(int id, const std::vector<std::uint8_t>& peer_address);
  void start_send(int peer_id, std::uint64_t tag, const void* data, std::size_t nbytes,
                  send_callback done);
  void start_receive(std::uint64_t tag, std::uint64_t tag_mask, void* data, std::size_t nbytes,
                     tagged_receive_callback done);
  void handle_failures();
  operation* track(std::unique_ptr<operation> op);
  void finish(operation* op, std::string error, std::size_t received, std::uint64_t sender_tag);

  void sweep_close_requests();
  void close_endpoint(peer& p, bool force);

  ucp_context* context_ = nullptr;
  ucp_worker* worker_ = nullptr;
  int event_fd_ = -1;   // the worker's own fd (from ucp_worker_get_efd)
  int wake_fd_ = -1;    // eventfd: other threads poke the progress thread through it
  std::vector<std::uint8_t> address_;

  mutable std::mutex mutex_;  // guards tasks_, stopping_, failure_callback_
  std::deque<task> tasks_;
  bool stopping_ = false;
  failure_callback failure_callback_;

  std::atomic<int> next_peer_id_{0};
  std::atomic<std::size_t> pending_count_{0};
  mutable std::mutex peer_modes_mutex_;
  std::unordered_map<int, bool> detects_failure_;  // peer id -> endpoint in peer error mode

  // Progress-thread-only state.
  bool shutting_down_ = false;
  bool peer_mode_refused_ = false;  // UCX refused peer error handling once: do not ask again
  std::unordered_map<int, std::unique_ptr<peer>> peers_;
  std::unordered_map<operation*, std::unique_ptr<operation>> pending_;
  std::vector<int> newly_failed_;
  std::vector<void*> closing_;  // ucp_ep_close_nbx requests still in flight

  std::thread thread_;
};

}  // namespace actorpipe::transport::ucx
