// The control plane of a process other than 0 (a member): connects to the hub on process 0
// (retrying until --join-timeout), answers its challenge with the job token, sends its join
// (job fingerprint, transport address), and once welcomed exchanges envelopes with the hub.
// Losing the hub ends this process's run.
#include <caf/io/all.hpp>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <memory>

#include "actors/control_role.hpp"
#include "core/job_token.hpp"
#include "core/log.hpp"
#include "core/number_text.hpp"

namespace actorpipe {
namespace msg {
namespace {
// Member -> itself.
struct member_join_deadline {};
struct retry_connect {};
struct member_heartbeat_tick {};
struct member_silence_tick {};
}  // namespace
}  // namespace msg
}  // namespace actorpipe

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(actorpipe::msg::member_join_deadline)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(actorpipe::msg::retry_connect)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(actorpipe::msg::member_heartbeat_tick)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(actorpipe::msg::member_silence_tick)

namespace actorpipe {
namespace {

using caf::io::connection_handle;

// A TCP connection to host:port, or -1 and why not, within `limit`: the connect runs
// non-blocking. CAF's own connect blocks until the kernel gives up (minutes, where process 0's
// port takes no connections: a full backlog, dropped SYNs), on the thread that must also notice
// a stop signal and the join deadline.
int connect_within(const std::string& host, int port, std::chrono::milliseconds limit, std::string& why) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV;
  addrinfo* found = nullptr;
  if (const int e = ::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found); e != 0 || !found) {
    why = std::string("cannot resolve '") + host + "': " + (e != 0 ? ::gai_strerror(e) : "no address");
    return -1;
  }
  std::unique_ptr<addrinfo, void (*)(addrinfo*)> addresses(found, ::freeaddrinfo);
  const auto deadline = std::chrono::steady_clock::now() + limit;
  for (const addrinfo* a = found; a != nullptr; a = a->ai_next) {
    const int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) {
      why = std::string("socket: ") + std::strerror(errno);
      continue;
    }
    int error = ::connect(fd, a->ai_addr, a->ai_addrlen) == 0 ? 0 : errno;
    if (error == EINPROGRESS) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
      pollfd p{fd, POLLOUT, 0};
      const int ready = ::poll(&p, 1, static_cast<int>(std::max<long long>(left.count(), 0)));
      socklen_t size = sizeof error;
      if (ready == 1) ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &size);
      else error = ready == 0 ? ETIMEDOUT : errno;
    }
    if (error == 0) return fd;  // CAF sets the flags it wants when the scribe takes it
    ::close(fd);
    why = error == ETIMEDOUT ? "no answer within " + std::to_string(limit.count()) + " ms" : std::strerror(error);
  }
  return -1;
}

class member final : public control_role {
 public:
  using control_role::control_role;

  void start() {
    deadline_ = std::chrono::steady_clock::now() +
                std::chrono::duration_cast<std::chrono::steady_clock::duration>(std::chrono::duration<double>(o_.join_timeout_s));
    log_debug("joining the job of process 0 at " + master() + " (retrying for up to " + join_timeout_text() +
              " s, --join-timeout)");
    try_connect();
    self_->delayed_send(self_, seconds_span(o_.join_timeout_s), msg::member_join_deadline{});
  }

  // Process 0 may not listen yet: retry every 200 ms until the join deadline, each attempt
  // given at most connect_attempt_limit.
  static constexpr std::chrono::milliseconds connect_attempt_limit{2000};
  void try_connect() {
    if (connected_ || failed_) return;
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline_ - std::chrono::steady_clock::now());
    const int fd = connect_within(o_.master_addr, o_.master_port,
                                  std::clamp(left, std::chrono::milliseconds(10), connect_attempt_limit), connect_error_);
    if (fd < 0) {
      if (std::chrono::steady_clock::now() >= deadline_) {
        fail_setup("could not reach process 0 at " + master() + " within " + join_timeout_text() +
                   " s (--join-timeout): " + connect_error_);
        return;
      }
      self_->delayed_send(self_, std::chrono::milliseconds(200), msg::retry_connect{});
      return;
    }
    server_ = self_->add_scribe(fd);
    connected_ = true;
    log_debug("connected to process 0 at " + master() + "; proving the job token");
    conns_[server_].remote = "process 0";
    start_reading(server_);
  }

  void on_data(const caf::io::new_data_msg& m) {
    auto it = conns_.find(m.handle);
    if (it == conns_.end()) return;
    control_connection& c = it->second;
    heard(m.handle);
    std::string why;
    switch (read_frame(m.handle, c, m, control_wire::frame_cap, why)) {
      case read_step::length: return;
      case read_step::bad_length: drop_malformed(m.handle, why); return;
      case read_step::body:
        on_frame(m.handle, m.buf);
        if (conns_.count(m.handle)) start_reading(m.handle);
        return;
    }
  }

  void on_connection_closed(const caf::io::connection_closed_msg& m) {
    auto it = conns_.find(m.handle);
    if (it == conns_.end()) return;
    conns_.erase(it);
    connected_ = false;
    if (!ready_)
      // Also when this process had joined and others had not: process 0 gave up waiting.
      fail_setup("process 0 closed the connection before the job formed (it stopped, or gave up waiting for the other "
                 "processes: its log says which)");
    else
      report_failure("lost the connection to process 0 (the supervisor, at " + master() + ")");
  }

  void on_join_deadline() {
    if (ready_ || failed_) return;
    if (crowded_times_ > 0 && !(connected_ && challenged_)) {
      fail_setup("process 0 at " + master() + " did not admit this process within " + join_timeout_text() +
                 " s (--join-timeout): it closed its connection " + std::to_string(crowded_times_) +
                 (crowded_times_ == 1 ? " time" : " times") + " for newer ones (the last: " +
                 control_wire::peer_text(crowded_why_) + ")");
    } else if (!connected_) {
      fail_setup("could not reach process 0 at " + master() + " within " + join_timeout_text() +
                 " s (--join-timeout; is process 0 running, and are MASTER_ADDR and MASTER_PORT right?): " +
                 connect_error_);
    } else if (!challenged_) {
      // Something accepted the connection and said nothing: not an actorpipe process 0, which
      // sends its challenge at once (it read "the other processes did not all join").
      fail_setup("the program at " + master() + " accepted the connection but sent nothing of actorpipe's handshake "
                 "within " + join_timeout_text() + " s (--join-timeout): is another program listening on MASTER_PORT?");
    } else {
      fail_setup("process 0 at " + master() + " did not admit this process within " + join_timeout_text() +
                 " s (--join-timeout): the other processes did not all join");
    }
  }

  // Process 0 gets a heartbeat; silent for --heartbeat-timeout, it is lost, which ends this
  // process's run. Until the run is over.
  void on_heartbeat_tick() {
    if (finished_ || !connected_) return;
    if (beat_and_check(server_)) {
      hang_up_on_silent_process_0(silence_text());
      return;
    }
    self_->delayed_send(self_, heartbeat_interval(), msg::member_heartbeat_tick{});
  }

  // With heartbeats off, process 0 still says something every step (a step's start, the
  // optimizer's turn): silent past the limit the runtime gives (twice --step-timeout and a
  // margin), it is frozen, and nothing else would end this process's wait.
  void on_silence_tick() {
    if (finished_ || !connected_) return;
    if (const double silent = silent_for(server_); silent > o_.member_silence_limit_s) {
      hang_up_on_silent_process_0("nothing heard from it for " + number_text(std::floor(silent)) +
                                  " s, where it speaks at every step (twice --step-timeout and 10 s; with "
                                  "--heartbeat-timeout 0 nothing watches it sooner): it is stopped, frozen or cut off");
      return;
    }
    self_->delayed_send(self_, seconds_span(std::min(1.0, o_.member_silence_limit_s / 4)), msg::member_silence_tick{});
  }

  // A local proxy's message for another process: the hub delivers or relays it.
  void on_forward(msg::forward& f) {
    if (connected_) write_envelope(server_, f.target, f.process, f.index, std::move(f.content));
  }

 private:
  void on_frame(connection_handle hdl, const std::vector<char>& buf) {
    const char* data = buf.data() + 1;
    const std::size_t size = buf.size() - 1;
    switch (buf[0]) {
      case control_wire::challenge: answer_challenge_and_join(hdl, std::vector<std::uint8_t>(data, data + size)); break;
      case control_wire::refusal: {
        const std::string why(data, size);
        if (why.rfind(control_wire::refusal_crowded, 0) == 0 && !ready_) {
          connect_again_after_crowding(hdl, why);
          break;
        }
        fail_setup("process 0 (" + master() + ") refused this process: " + control_wire::peer_text(why),
                   control_wire::refusal_is_final(why));
        break;
      }
      case control_wire::envelope: on_envelope(hdl, data, size); break;
      case control_wire::heartbeat: break;  // heard (on_data)
      default:
        drop_malformed(hdl, "a frame of unknown type '" + control_wire::frame_type_text(buf[0]) + "'");
        break;
    }
  }

  // Process 0 closed this connection before it proved the token, for a newer one: it does so
  // under a flood of connections, which can reach this process's connection within its
  // handshake. Connect again until the join deadline (it failed the job's formation at once).
  void connect_again_after_crowding(connection_handle hdl, const std::string& why) {
    self_->close(hdl);
    conns_.erase(hdl);
    connected_ = false;
    challenged_ = false;
    if (crowded_times_++ == 0)
      log_warn("process 0 (" + master() + ") closed this process's connection: " + control_wire::peer_text(why) +
               "; connecting again until --join-timeout");
    crowded_why_ = why;
    self_->delayed_send(self_, std::chrono::milliseconds(50 + 50 * std::min(crowded_times_, 10)), msg::retry_connect{});
  }

  void answer_challenge_and_join(connection_handle hdl, const std::vector<std::uint8_t>& challenge) {
    challenged_ = true;
    char host[256] = {0};
    gethostname(host, sizeof host - 1);
    control_wire::hello_frame h;
    h.process = o_.process;
    h.joiner = std::string(host) + ":" + std::to_string(getpid()) + ":process " + std::to_string(o_.process);
    if (challenge.size() != 32) {  // not actorpipe's hub
      drop_malformed(hdl, "a challenge of " + std::to_string(challenge.size()) + " bytes (actorpipe's are 32)");
      return;
    }
    try {
      h.answer = answer_challenge(o_.token, challenge, h.joiner);
    } catch (const std::exception& e) {  // this process's own token (the runtime checks it first)
      fail_setup(e.what(), true);
      return;
    }
    write_frame(hdl, control_wire::hello, control_wire::encode_hello(h));
    write_envelope(hdl, static_cast<std::uint8_t>(target_kind::control), 0, 0,
                   caf::make_message(msg::join{o_.fingerprint, addresses_[o_.process], host, o_.held}));
  }

  // An envelope from the hub: the welcome, the end of the run, or for one of our actors.
  void on_envelope(connection_handle hdl, const char* data, std::size_t size) {
    control_envelope e;
    if (auto why = decode_envelope(self_->system(), data, size, o_.processes, e); !why.empty()) {
      drop_malformed(hdl, why);
      return;
    }
    if (e.target == static_cast<std::uint8_t>(target_kind::control)) {
      if (e.content.match_elements<msg::welcome>()) on_welcome(e.content.get_mutable_as<msg::welcome>(0));
      return;
    }
    if (e.target == static_cast<std::uint8_t>(target_kind::runtime)) finished_ = true;
    deliver(e.target, e.index, std::move(e.content));
  }

  void on_welcome(msg::welcome& w) {
    if (static_cast<int>(w.addresses.size()) != o_.processes) {
      fail_setup("process 0 sent " + std::to_string(w.addresses.size()) + " addresses for " +
                 std::to_string(o_.processes) + " processes (is every process started with the same WORLD_SIZE?)");
      return;
    }
    ready_ = true;
    log_info("joined the job of process 0 at " + master() + " as process " + std::to_string(o_.process) + " (" +
             ranks_label(o_.process) + ")");
    self_->send(owner_, msg::cluster_ready{std::move(w.addresses), w.clock, "", w.epoch_ns, std::move(w.boot_id), false,
                                           std::move(w.run_mark)});
    if (heartbeats_on())
      on_heartbeat_tick();
    else if (o_.member_silence_limit_s > 0)
      on_silence_tick();
  }

  // Process 0 went silent (`why`): hang up and end this process's run, naming it.
  void hang_up_on_silent_process_0(const std::string& why) {
    self_->close(server_);
    conns_.erase(server_);
    connected_ = false;
    report_failure("lost process 0 (the supervisor, at " + master() + "): " + why);
  }

  // The hub sent something malformed: hang up and end this process's run. Before the job has
  // formed nothing acts on the run's end: the setup fails at once, naming it (the member waited
  // out --join-timeout, then blamed the other processes).
  void drop_malformed(connection_handle hdl, const std::string& why) {
    self_->close(hdl);
    if (!ready_) {
      conns_.erase(hdl);
      connected_ = false;
      fail_setup("process 0 at " + master() + " sent " + why +
                 " before the job formed: a protocol error (is another program listening on MASTER_PORT, or a process 0 of "
                 "another actorpipe version?)");
      return;
    }
    report_failure("process 0 sent " + why);
  }

  void report_failure(std::string what) {
    if (finished_) return;
    finished_ = true;
    self_->send(owner_, msg::run_finished{std::move(what)});
  }

  connection_handle server_;  // the connection to process 0
  bool connected_ = false;
  bool challenged_ = false;  // process 0 sent its challenge (an actorpipe process 0 answers at once)
  bool finished_ = false;  // the owner was told the run is over
  std::chrono::steady_clock::time_point deadline_;
  std::string connect_error_;  // why the last attempt to reach process 0 failed
  int crowded_times_ = 0;      // process 0 closed this process's connection for a newer one
  std::string crowded_why_;    // what it said the last time
};

}  // namespace

caf::behavior control_member(caf::io::broker* self, cluster_options o, std::vector<std::uint8_t> own_address,
                             caf::actor owner) {
  auto m = std::make_shared<member>(self, std::move(o), std::move(own_address), std::move(owner));
  m->start();
  return {
      [m](const caf::io::new_data_msg& d) { m->on_data(d); },
      [m](const caf::io::connection_closed_msg& c) { m->on_connection_closed(c); },
      [m](const msg::member_join_deadline&) { m->on_join_deadline(); },
      [m](const msg::retry_connect&) { m->try_connect(); },
      [m](const msg::member_heartbeat_tick&) { m->on_heartbeat_tick(); },
      [m](const msg::member_silence_tick&) { m->on_silence_tick(); },
      [m](msg::set_targets& t) { m->on_set_targets(t); },
      [m](msg::forward& f) { m->on_forward(f); },
      // Only process 0 shuts the cluster down; a member has no process to wait for.
      [self](const msg::shutdown_cluster&) {
        self->send(caf::actor_cast<caf::actor>(self->current_sender()), msg::cluster_closed{});
      },
  };
}

}  // namespace actorpipe
