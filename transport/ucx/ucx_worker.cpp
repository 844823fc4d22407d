// ucx_worker: UCX context + single-threaded worker behind a progress thread that sleeps on the
// worker's event fd when idle. All UCX calls happen on that thread; public calls queue tasks.
#include "transport/ucx/ucx_worker.hpp"

#include <ucp/api/ucp.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <future>
#include <sstream>
#include <stdexcept>

namespace actorpipe::transport::ucx {

namespace {

constexpr int idle_poll_ms = 50;                       // upper bound on one idle sleep
constexpr auto shutdown_grace = std::chrono::seconds(2);  // flush/cancel budget in ~ucx_worker

[[noreturn]] void throw_status(const char* what, ucs_status_t status) {
  throw std::runtime_error(std::string("ucx_worker: ") + what + " failed: " +
                           ucs_status_string(status));
}

// The UCX variables that choose transports, as set ("UCX_TLS=bogus"; "" when none is).
std::string transport_settings() {
  std::string out;
  for (const char* name : {"UCX_TLS", "UCX_NET_DEVICES"})
    if (const char* v = std::getenv(name)) out += (out.empty() ? "" : " ") + std::string(name) + "=" + v;
  return out;
}

// UCX's TCP transport listens on a port of UCX_TCP_PORT_RANGE (a firewall's opening, often
// shared by jobs on one machine); with every port of it taken, ucp_worker_create tried them
// again and again for ever (a job hung, no word, past --join-timeout and a first Ctrl-C).
// Refused instead, where TCP may be in use and not one port of the range can be bound.
void check_tcp_port_range(const std::vector<std::pair<std::string, std::string>>& settings) {
  std::string range;
  if (const char* v = std::getenv("UCX_TCP_PORT_RANGE")) range = v;
  for (const auto& [name, value] : settings)
    if (name == "TCP_PORT_RANGE") range = value;
  const char* tls = std::getenv("UCX_TLS");
  for (const auto& [name, value] : settings)
    if (name == "TLS") tls = value.c_str();
  if (range.empty() || (tls && std::string(tls).find("tcp") == std::string::npos && std::string(tls) != "all" &&
                        std::string(tls).rfind('^', 0) != 0))
    return;
  unsigned first = 0, last = 0;
  char dash = 0, rest = 0;
  if (std::sscanf(range.c_str(), "%u%c%u%c", &first, &dash, &last, &rest) != 3 || dash != '-' || first == 0 ||
      first > last || last > 65535)
    return;  // UCX says what it makes of it
  for (unsigned port = first; port <= last; ++port) {
    const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return;
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_ANY);
    a.sin_port = htons(static_cast<std::uint16_t>(port));
    const int one = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);  // as UCX binds: TIME_WAIT is no use
    const bool free = ::bind(fd, reinterpret_cast<const sockaddr*>(&a), sizeof a) == 0;
    const int why = errno;
    ::close(fd);
    if (free || why != EADDRINUSE) return;
  }
  throw std::invalid_argument("UCX_TCP_PORT_RANGE=" + range + ": every port in it is in use on this machine (by " +
                              "another job, or this job's other processes): UCX would wait for one for ever; give each "
                              "job on a machine a range of its own, wide enough for its processes there");
}

std::string describe(const char* what, std::uint64_t tag, ucs_status_t status) {
  std::ostringstream out;
  out << "ucx " << what << " (tag 0x" << std::hex << tag << ") failed: "
      << ucs_status_string(status);
  return out.str();
}

}  // namespace

struct ucx_worker::operation {
  ucx_worker* owner = nullptr;
  void* request = nullptr;
  bool is_receive = false;
  bool abandoned = false;  // done already ran (shutdown timed out), its request released
  int peer_id = -1;
  std::uint64_t tag = 0;
  send_callback send_done;
  tagged_receive_callback receive_done;
};

struct ucx_worker::peer {
  ucx_worker* owner = nullptr;
  int id = -1;
  ucp_ep_h ep = nullptr;
  bool failed = false;
  bool closed = false;  // disconnect()ed: forgotten, failures no longer reported
  std::string reason;
};

ucx_worker::ucx_worker(const std::vector<std::pair<std::string, std::string>>& settings) {
  ucp_config_t* config = nullptr;
  ucs_status_t status = ucp_config_read(nullptr, nullptr, &config);
  if (status != UCS_OK) throw_status("ucp_config_read", status);
  for (const auto& [name, value] : settings) {
    status = ucp_config_modify(config, name.c_str(), value.c_str());
    if (status != UCS_OK) {
      ucp_config_release(config);
      throw_status(("ucp_config_modify " + name + "=" + value).c_str(), status);
    }
  }

  ucp_params_t params{};
  params.field_mask = UCP_PARAM_FIELD_FEATURES;
  params.features = UCP_FEATURE_TAG | UCP_FEATURE_WAKEUP;
  status = ucp_init(&params, config, &context_);
  ucp_config_release(config);
  if (status != UCS_OK) {
    // A setting that leaves no transport is the environment's: a restart meets it again.
    if (const std::string set = transport_settings(); !set.empty())
      throw std::invalid_argument("ucx_worker: ucp_init failed: " + std::string(ucs_status_string(status)) + " with " +
                                  set + ": no usable transport in it (keep tcp, or unset it)");
    throw_status("ucp_init", status);
  }

  auto cleanup = [this] {
    if (wake_fd_ >= 0) ::close(wake_fd_);
    if (worker_ != nullptr) ucp_worker_destroy(worker_);
    ucp_cleanup(context_);
  };

  try {
    check_tcp_port_range(settings);
  } catch (...) {
    ucp_cleanup(context_);
    throw;
  }
  ucp_worker_params_t worker_params{};
  worker_params.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
  worker_params.thread_mode = UCS_THREAD_MODE_SINGLE;  // only the progress thread touches it
  status = ucp_worker_create(context_, &worker_params, &worker_);
  if (status != UCS_OK) {
    worker_ = nullptr;
    cleanup();
    throw_status("ucp_worker_create", status);
  }

  ucp_address_t* address = nullptr;
  std::size_t length = 0;
  status = ucp_worker_get_address(worker_, &address, &length);
  if (status != UCS_OK) {
    cleanup();
    throw_status("ucp_worker_get_address", status);
  }
  auto* bytes = reinterpret_cast<const std::uint8_t*>(address);
  address_.assign(bytes, bytes + length);
  ucp_worker_release_address(worker_, address);

  status = ucp_worker_get_efd(worker_, &event_fd_);
  if (status != UCS_OK) {
    cleanup();
    throw_status("ucp_worker_get_efd", status);
  }
  wake_fd_ = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (wake_fd_ < 0) {
    const int err = errno;
    cleanup();
    throw std::runtime_error(std::string("ucx_worker: eventfd failed: ") + std::strerror(err));
  }

  // The constructor's accesses happen-before the thread starts, so SINGLE mode holds.
  thread_ = std::thread([this] { progress_loop(); });
}

void ucx_worker::stop() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  wake();
  if (thread_.joinable() && !on_progress_thread()) thread_.join();
}

ucx_worker::~ucx_worker() {
  stop();
  // The thread has exited: this thread now owns the worker.
  ucp_worker_destroy(worker_);
  pending_.clear();  // abandoned operations: their requests were released before the worker went
  ucp_cleanup(context_);
  ::close(wake_fd_);
}

std::vector<std::uint8_t> ucx_worker::address() const { return address_; }

std::string ucx_worker::address_problem(const std::vector<std::uint8_t>& peer_address) const {
  // A packed address begins [header: format version in its low 4 bits, flags above | worker
  // uuid, 8 bytes]; the version is one per UCX release that changed the format.
  constexpr std::size_t least = 1 + 8;
  if (peer_address.size() < least)
    return "a worker address of " + std::to_string(peer_address.size()) + " bytes (UCX's have at least " +
           std::to_string(least) + ")";
  const unsigned theirs = peer_address[0] & 0x0fu, ours = address_.empty() ? 0u : address_[0] & 0x0fu;
  if (theirs != ours)
    return "a worker address of format version " + std::to_string(theirs) + ", where this process's UCX writes " +
           std::to_string(ours) + " (do all nodes run the same UCX build? or was the address damaged on its way?)";
  return "";
}

void ucx_worker::on_peer_failure(failure_callback callback) {
  std::lock_guard<std::mutex> lock(mutex_);
  failure_callback_ = std::move(callback);
}

bool ucx_worker::on_progress_thread() const {
  return std::this_thread::get_id() == thread_.get_id();
}

void ucx_worker::wake() {
  const std::uint64_t one = 1;
  // A failed write means the counter is saturated: the thread is being woken anyway.
  [[maybe_unused]] auto written = ::write(wake_fd_, &one, sizeof one);
}

void ucx_worker::enqueue(task t) {
  if (on_progress_thread()) {
    // From a completion callback: run inline, the worker is ours (and not mid-iteration).
    t();
    return;
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    tasks_.push_back(std::move(t));
  }
  wake();
}

int ucx_worker::connect(const std::vector<std::uint8_t>& peer_address) {
  if (peer_address.empty()) {
    throw std::invalid_argument("ucx_worker::connect: empty peer address");
  }
  if (const std::string why = address_problem(peer_address); !why.empty())
    throw std::invalid_argument("ucx_worker::connect: " + why);
  const int id = next_peer_id_.fetch_add(1);
  if (on_progress_thread()) return connect_on_progress_thread(id, peer_address);

  auto result = std::make_shared<std::promise<int>>();
  auto future = result->get_future();
  enqueue([this, id, peer_address, result] {
    try {
      result->set_value(connect_on_progress_thread(id, peer_address));
    } catch (...) {
      result->set_exception(std::current_exception());
    }
  });
  return future.get();
}

int ucx_worker::connect_on_progress_thread(int id, const std::vector<std::uint8_t>& peer_address) {
  if (shutting_down_) throw std::runtime_error("ucx_worker::connect: worker is shutting down");
  auto p = std::make_unique<peer>();
  p->owner = this;
  p->id = id;

  ucp_ep_params_t params{};
  params.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                      UCP_EP_PARAM_FIELD_ERR_HANDLER;
  params.address = reinterpret_cast<const ucp_address_t*>(peer_address.data());
  // Asking once per worker keeps UCX's "no peer failure handler" error line to one.
  bool detects_failure = !peer_mode_refused_;
  params.err_mode = detects_failure ? UCP_ERR_HANDLING_MODE_PEER : UCP_ERR_HANDLING_MODE_NONE;
  params.err_handler.arg = p.get();
  // Runs inside ucp_worker_progress: only record; handle_failures closes and notifies.
  params.err_handler.cb = [](void* arg, ucp_ep_h, ucs_status_t status) {
    auto* failed = static_cast<peer*>(arg);
    if (failed->failed) return;
    failed->failed = true;
    failed->reason = ucs_status_string(status);
    failed->owner->newly_failed_.push_back(failed->id);
  };
  ucs_status_t status = ucp_ep_create(worker_, &params, &p->ep);
  if (status == UCS_ERR_UNREACHABLE && detects_failure) {
    // UCX 1.13 shm transports (posix, sysv, cma) cannot detect peer failure, so they are
    // refused under UCP_ERR_HANDLING_MODE_PEER. Connect without it: the bytes still move,
    // but a dead peer of this endpoint is not reported.
    params.err_mode = UCP_ERR_HANDLING_MODE_NONE;
    detects_failure = false;
    peer_mode_refused_ = true;
    status = ucp_ep_create(worker_, &params, &p->ep);
  }
  if (status == UCS_ERR_UNREACHABLE) {
    const std::string set = transport_settings();
    throw std::invalid_argument("ucx_worker: ucp_ep_create failed: " + std::string(ucs_status_string(status)) +
                                " (no transport " + (set.empty() ? "UCX found" : "in " + set) +
                                " reaches this peer: keep tcp in UCX_TLS)");
  }
  if (status != UCS_OK) throw_status("ucp_ep_create", status);
  peers_.emplace(id, std::move(p));
  {
    std::lock_guard<std::mutex> lock(peer_modes_mutex_);
    detects_failure_[id] = detects_failure;
  }
  return id;
}

bool ucx_worker::detects_peer_failure(int peer_id) const {
  std::lock_guard<std::mutex> lock(peer_modes_mutex_);
  auto found = detects_failure_.find(peer_id);
  return found != detects_failure_.end() && found->second;
}

void ucx_worker::disconnect(int peer_id) {
  enqueue([this, peer_id] {
    auto found = peers_.find(peer_id);
    if (found == peers_.end()) return;
    // The peer object stays (UCX may still hold it as the error handler's argument); only
    // the endpoint goes.
    found->second->closed = true;
    if (found->second->reason.empty()) found->second->reason = "disconnected";
    close_endpoint(*found->second, true);
  });
}

void ucx_worker::execute(std::function<void()> work) { enqueue(std::move(work)); }

void ucx_worker::send(int peer_id, std::uint64_t tag, const void* data, std::size_t nbytes,
                      send_callback done) {
  enqueue([this, peer_id, tag, data, nbytes, done = std::move(done)]() mutable {
    start_send(peer_id, tag, data, nbytes, std::move(done));
  });
}

void ucx_worker::receive(std::uint64_t tag, void* data, std::size_t nbytes,
                         receive_callback done) {
  receive(tag, ~std::uint64_t{0}, data, nbytes,
          [done = std::move(done)](std::string error, std::size_t received, std::uint64_t) {
            done(std::move(error), received);
          });
}

void ucx_worker::receive(std::uint64_t tag, std::uint64_t tag_mask, void* data,
                         std::size_t nbytes, tagged_receive_callback done) {
  enqueue([this, tag, tag_mask, data, nbytes, done = std::move(done)]() mutable {
    start_receive(tag, tag_mask, data, nbytes, std::move(done));
  });
}

void ucx_worker::start_send(int peer_id, std::uint64_t tag, const void* data, std::size_t nbytes,
                            send_callback done) {
  if (shutting_down_) {
    done("ucx send: worker is shutting down");
    return;
  }
  auto found = peers_.find(peer_id);
  if (found == peers_.end()) {
    done("ucx send: unknown peer id " + std::to_string(peer_id));
    return;
  }
  peer& p = *found->second;
  if (p.closed) {
    done("ucx send: peer " + std::to_string(peer_id) + " was disconnected");
    return;
  }
  if (p.failed || p.ep == nullptr) {
    done("ucx send: peer " + std::to_string(peer_id) + " has failed: " + p.reason);
    return;
  }

  auto op = std::make_unique<operation>();
  op->owner = this;
  op->peer_id = peer_id;
  op->tag = tag;
  op->send_done = std::move(done);

  ucp_request_param_t param{};
  param.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA |
                       UCP_OP_ATTR_FIELD_MEMORY_TYPE;
  param.memory_type = UCS_MEMORY_TYPE_HOST;
  param.user_data = op.get();
  param.cb.send = [](void* request, ucs_status_t status, void* user_data) {
    auto* o = static_cast<operation*>(user_data);
    o->request = request;
    o->owner->finish(o, status == UCS_OK ? std::string() : describe("send", o->tag, status), 0, 0);
  };

  operation* key = track(std::move(op));
  ucs_status_ptr_t request = ucp_tag_send_nbx(p.ep, data, nbytes, tag, &param);
  if (UCS_PTR_IS_PTR(request)) {
    auto tracked = pending_.find(key);
    if (tracked != pending_.end()) tracked->second->request = request;
  } else {
    const ucs_status_t status = UCS_PTR_STATUS(request);
    finish(key, status == UCS_OK ? std::string() : describe("send", tag, status), 0, 0);
  }
}

void ucx_worker::start_receive(std::uint64_t tag, std::uint64_t tag_mask, void* data,
                               std::size_t nbytes, tagged_receive_callback done) {
  if (shutting_down_) {
    done("ucx receive: worker is shutting down", 0, 0);
    return;
  }
  auto op = std::make_unique<operation>();
  op->owner = this;
  op->is_receive = true;
  op->tag = tag;
  op->receive_done = std::move(done);

  // UCX 1.13.1 leaves recv_info.tag_info unfilled when a receive completes immediately (an
  // already-arrived eager message), so the length would be lost: force completion through the
  // callback, which always gets the tag info.
  ucp_request_param_t param{};
  param.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA |
                       UCP_OP_ATTR_FIELD_MEMORY_TYPE | UCP_OP_ATTR_FLAG_NO_IMM_CMPL;
  param.memory_type = UCS_MEMORY_TYPE_HOST;
  param.user_data = op.get();
  param.cb.recv = [](void* request, ucs_status_t status, const ucp_tag_recv_info_t* tag_info,
                     void* user_data) {
    auto* o = static_cast<operation*>(user_data);
    o->request = request;
    const std::size_t length = tag_info != nullptr ? tag_info->length : 0;
    std::string error;
    std::uint64_t sender_tag = 0;
    if (status == UCS_ERR_MESSAGE_TRUNCATED) {
      error = describe("receive", o->tag, status) + " (message is larger than the posted buffer)";
    } else if (status != UCS_OK) {
      error = describe("receive", o->tag, status);
    }
    // A cancelled request's tag info was never filled in.
    if ((status == UCS_OK || status == UCS_ERR_MESSAGE_TRUNCATED) && tag_info != nullptr) {
      sender_tag = tag_info->sender_tag;
    }
    o->owner->finish(o, std::move(error), status == UCS_OK ? length : 0, sender_tag);
  };

  operation* key = track(std::move(op));
  ucs_status_ptr_t request = ucp_tag_recv_nbx(worker_, data, nbytes, tag, tag_mask, &param);
  if (UCS_PTR_IS_PTR(request)) {
    auto found = pending_.find(key);
    if (found != pending_.end()) found->second->request = request;
  } else {
    // NO_IMM_CMPL makes UCS_OK unreachable here; only immediate errors arrive.
    const ucs_status_t status = UCS_PTR_STATUS(request);
    std::string error;
    if (status == UCS_ERR_MESSAGE_TRUNCATED) {
      error = describe("receive", tag, status) + " (message is larger than the posted buffer)";
    } else if (status != UCS_OK) {
      error = describe("receive", tag, status);
    }
    finish(key, std::move(error), 0, 0);
  }
}

// Registered before the UCX call, so a callback fired inside that call still finds it.
ucx_worker::operation* ucx_worker::track(std::unique_ptr<operation> op) {
  operation* key = op.get();
  pending_.emplace(key, std::move(op));
  ++pending_count_;
  return key;
}

void ucx_worker::finish(operation* op, std::string error, std::size_t received,
                        std::uint64_t sender_tag) {
  auto found = pending_.find(op);
  if (found == pending_.end()) return;  // cannot happen: every in-flight request is tracked
  std::unique_ptr<operation> owned = std::move(found->second);
  pending_.erase(found);
  if (owned->request != nullptr) ucp_request_free(owned->request);
  if (owned->abandoned) return;
  --pending_count_;
  if (owned->is_receive) {
    owned->receive_done(std::move(error), received, sender_tag);
  } else {
    owned->send_done(std::move(error));
  }
}

void ucx_worker::run_tasks() {
  std::deque<task> batch;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    batch.swap(tasks_);
  }
  for (auto& t : batch) t();
}

void ucx_worker::close_endpoint(peer& p, bool force) {
  if (p.ep == nullptr) return;
  ucp_request_param_t param{};
  if (force) {
    param.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    param.flags = UCP_EP_CLOSE_FLAG_FORCE;
  }
  ucs_status_ptr_t request = ucp_ep_close_nbx(p.ep, &param);
  p.ep = nullptr;
  if (UCS_PTR_IS_PTR(request)) closing_.push_back(request);
}

void ucx_worker::sweep_close_requests() {
  for (std::size_t i = 0; i < closing_.size();) {
    if (ucp_request_check_status(closing_[i]) != UCS_INPROGRESS) {
      ucp_request_free(closing_[i]);
      closing_[i] = closing_.back();
      closing_.pop_back();
    } else {
      ++i;
    }
  }
}

void ucx_worker::handle_failures() {
  sweep_close_requests();
  if (newly_failed_.empty()) return;
  std::vector<int> failed;
  failed.swap(newly_failed_);
  failure_callback callback;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    callback = failure_callback_;
  }
  for (int id : failed) {
    auto found = peers_.find(id);
    if (found == peers_.end()) continue;
    // A failed endpoint must be force-closed; its in-flight sends complete with errors.
    close_endpoint(*found->second, true);
    if (callback && !shutting_down_ && !found->second->closed) callback(id, found->second->reason);
  }
}

void ucx_worker::progress_loop() {
  pollfd fds[2] = {{event_fd_, POLLIN, 0}, {wake_fd_, POLLIN, 0}};
  for (;;) {
    run_tasks();
    while (ucp_worker_progress(worker_) != 0) {
    }
    handle_failures();
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (stopping_) break;
      if (!tasks_.empty()) continue;
    }
    // Arm only when UCX has nothing left to do; BUSY means more events arrived meanwhile.
    const ucs_status_t status = ucp_worker_arm(worker_);
    if (status == UCS_ERR_BUSY) continue;
    // Any other arm failure: fall back to the bounded poll below (it is only a sleep).
    ::poll(fds, 2, idle_poll_ms);
    std::uint64_t drained = 0;
    [[maybe_unused]] auto r = ::read(wake_fd_, &drained, sizeof drained);
  }
  shutdown_on_progress_thread();
}

void ucx_worker::shutdown_on_progress_thread() {
  shutting_down_ = true;
  run_tasks();  // queued sends/receives/connects fail with "shutting down"

  // Receives: cancel (callbacks get UCS_ERR_CANCELED, possibly right inside the call).
  std::vector<operation*> receives;
  std::unordered_map<int, bool> has_pending_send;
  for (auto& entry : pending_) {
    if (entry.first->is_receive) {
      receives.push_back(entry.first);
    } else {
      has_pending_send[entry.first->peer_id] = true;
    }
  }
  for (operation* op : receives) {
    if (pending_.count(op) != 0) ucp_request_cancel(worker_, op->request);
  }
  // A receive the cancel did not end is matched and under way (a rendezvous pulling its data
  // from a peer that may be stopped): its endpoint is not known here, and a flush on it is
  // never acknowledged, which left requests on it when the worker was destroyed (UCX asserts
  // there: SIGABRT in ucp_ep_destroy_base). Every endpoint is forced then; a run that ended
  // well has no such receive, and flushes.
  bool receive_under_way = false;
  for (int round = 0; round < 16; ++round) {  // a cancel may complete on the next progress
    receive_under_way = false;
    for (operation* op : receives) receive_under_way = receive_under_way || pending_.count(op) != 0;
    if (!receive_under_way) break;
    ucp_worker_progress(worker_);
  }
  // Endpoints: flush when idle (peer gets what we sent); force when sends are stuck, which
  // completes them with errors instead of waiting for a receive that may never be posted.
  for (auto& entry : peers_) close_endpoint(*entry.second, receive_under_way || has_pending_send.count(entry.first) != 0);

  const auto deadline = std::chrono::steady_clock::now() + shutdown_grace;
  while ((!closing_.empty() || pending_count_.load() != 0) &&
         std::chrono::steady_clock::now() < deadline) {
    ucp_worker_progress(worker_);
    sweep_close_requests();
  }
  sweep_close_requests();
  newly_failed_.clear();

  // Whatever UCX did not complete in time (a peer that is stopped or cut off acknowledges
  // nothing): report it ourselves, and hand every request still held back to UCX, which
  // asserts, when the worker destroys their endpoints, that none is held (it aborted the
  // process: SIGABRT in ucp_ep_destroy_base). Released, they call back no more.
  for (auto& entry : pending_) {
    operation& op = *entry.second;
    if (op.request != nullptr) {
      ucp_request_free(op.request);
      op.request = nullptr;
    }
    if (op.abandoned) continue;
    op.abandoned = true;
    --pending_count_;
    if (op.is_receive) {
      op.receive_done("ucx receive: worker shut down before the message arrived", 0, 0);
    } else {
      op.send_done("ucx send: worker shut down before the send completed");
    }
  }
  for (void* request : closing_) ucp_request_free(request);  // endpoints still flushing to such a peer
  closing_.clear();
}

}  // namespace actorpipe::transport::ucx
