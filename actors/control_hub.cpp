// The control plane's hub, on process 0: listens on MASTER_ADDR:MASTER_PORT, challenges every
// connection for the job token, admits each process once with a matching job fingerprint,
// sends every process all transport addresses when all joined, then relays envelopes between
// processes and delivers those for process 0. A lost process is reported to the supervisor.
#include <caf/io/all.hpp>

#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <chrono>
#include <map>
#include <memory>
#include <set>
#include <vector>

#include "actors/control_role.hpp"
#include "core/job_token.hpp"
#include "core/log.hpp"
#include "core/text_file.hpp"

namespace actorpipe {
namespace msg {
namespace {
// Hub -> itself.
struct handshake_deadline {
  caf::io::connection_handle hdl;
  bool after_hello = false;  // the join's deadline, from the token proven
};
struct hub_join_deadline {};
struct shutdown_deadline {};
struct hub_heartbeat_tick {};
}  // namespace
}  // namespace msg
}  // namespace actorpipe

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(actorpipe::msg::handshake_deadline)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(actorpipe::msg::hub_join_deadline)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(actorpipe::msg::shutdown_deadline)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(actorpipe::msg::hub_heartbeat_tick)

namespace actorpipe {
namespace {

using caf::io::connection_handle;

// Why binding addr:port fails, in words ("" when it does not, or the address does not
// resolve): CAF's error says only that the socket could not be made.
std::string bind_error(const std::string& addr, int port) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* found = nullptr;
  if (getaddrinfo(addr.c_str(), std::to_string(port).c_str(), &hints, &found) != 0 || found == nullptr) return "";
  std::string why;
  const int fd = ::socket(found->ai_family, found->ai_socktype | SOCK_CLOEXEC, found->ai_protocol);
  if (fd >= 0) {
    const int one = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (::bind(fd, found->ai_addr, found->ai_addrlen) != 0) {
      const int err = errno;
      why = std::strerror(err);
      if (err == EADDRINUSE) why += " (another job, or another program, listens there: give this job its own port)";
      if (err == EADDRNOTAVAIL) why += " (not an address of this host: process 0 runs where MASTER_ADDR points)";
    }
    ::close(fd);
  }
  freeaddrinfo(found);
  return why;
}

class hub final : public control_role {
 public:
  using control_role::control_role;

  // Listens, and forms the job at once when it has one process.
  void start() {
    auto listening = self_->add_tcp_doorman(static_cast<std::uint16_t>(o_.master_port), o_.master_addr.c_str(), true);
    if (!listening) {
      const std::string why = bind_error(o_.master_addr, o_.master_port);
      fail_setup("cannot listen on " + master() +
                 " (MASTER_ADDR / MASTER_PORT, or --master-addr / --master-port of actorpipe launch): " +
                 (why.empty() ? self_->system().render(listening.error()) : why),
                 true);
    } else if (o_.processes == 1) {
      all_joined();
    } else {
      log_info("listening on " + master() + " for the other " + std::to_string(o_.processes - 1) +
               (o_.processes == 2 ? " process" : " processes") + " of the job");
    }
    self_->delayed_send(self_, seconds_span(o_.join_timeout_s), msg::hub_join_deadline{});
  }

  // A stranger connected: challenge it, and give it 10 s to prove the token. At most
  // max_waiting() connections wait to join: each held a file for its 10 s, and a flood of them
  // used up this process's open files (its next checkpoint failed, and the job with it). Past
  // that the oldest that has not proven the token is closed for the new one: a process of the
  // job proves it within moments of connecting, so it gets in while a flood goes on (closing
  // the newest kept the flood's first connections and turned the job's members away).
  void on_new_connection(const caf::io::new_connection_msg& m) {
    const std::string remote = endpoint_text(self_->remote_addr(m.handle), self_->remote_port(m.handle));
    if (conns_.size() - by_process_.size() >= max_waiting()) {
      auto oldest = conns_.end();
      for (auto it = conns_.begin(); it != conns_.end(); ++it)
        if (!it->second.authenticated && (oldest == conns_.end() || it->second.arrival < oldest->second.arrival)) oldest = it;
      const std::string why = std::to_string(max_waiting()) + " connections wait to join already, the most process 0 "
                                                              "keeps (a flood of connections?)";
      ++crowded_out_;
      if (oldest == conns_.end()) {  // all of them token holders that have not joined yet
        self_->close(m.handle);
        log_refusal(remote, why);
        return;
      }
      refuse(oldest->first, control_wire::refusal_crowded + why);
    }
    auto& c = conns_[m.handle];
    c.arrival = ++arrivals_;
    c.remote = remote;
    c.challenge = make_challenge();
    write_frame(m.handle, control_wire::challenge, std::vector<char>(c.challenge.begin(), c.challenge.end()));
    start_reading(m.handle);
    self_->delayed_send(self_, std::chrono::seconds(10), msg::handshake_deadline{m.handle});
  }

  void on_data(const caf::io::new_data_msg& m) {
    auto it = conns_.find(m.handle);
    if (it == conns_.end()) return;
    control_connection& c = it->second;
    if (c.authenticated) heard(m.handle);
    std::string why;
    switch (read_frame(m.handle, c, m, c.authenticated ? control_wire::frame_cap : control_wire::pre_auth_cap, why)) {
      case read_step::length: return;
      case read_step::bad_length:
        if (c.authenticated)
          drop_malformed(m.handle, why);
        else
          refuse(m.handle, why);
        return;
      case read_step::body:
        on_frame(m.handle, c, m.buf);
        if (conns_.count(m.handle)) start_reading(m.handle);
        return;
    }
  }

  void on_connection_closed(const caf::io::connection_closed_msg& m) {
    auto it = conns_.find(m.handle);
    if (it == conns_.end()) return;
    const control_connection c = it->second;
    conns_.erase(it);
    if (c.process < 1 || !c.authenticated) return;  // a stranger or a refused process left
    // A connection that proved the token and never joined is not the process: the one that
    // joined as it may still be here (closing the other stopped a running job, blaming it).
    if (!joined_as(m.handle, c.process)) return;
    by_process_.erase(c.process);
    if (shutting_down_) {
      if (by_process_.empty()) reply_closed();
      return;
    }
    if (!ready_) {
      joined_.erase(c.process);
      held_.erase(c.process);
      left_.insert(c.process);
      log_warn("process " + std::to_string(c.process) + " left while the job was forming");
      return;
    }
    report_failure("lost " + process_name(c.process) + ": its control connection closed (the process died or was killed)");
  }

  // A hello within 10 s of connecting, and a join within 10 s of proving the token (a peer
  // that proved it and said nothing more was kept for ever, holding its process index).
  void on_handshake_deadline(const msg::handshake_deadline& d) {
    auto it = conns_.find(d.hdl);
    if (it == conns_.end()) return;
    if (!d.after_hello && !it->second.authenticated) {
      refuse(d.hdl, "no valid hello within 10 s");
      return;
    }
    if (d.after_hello && !joined_as(d.hdl, it->second.process))
      refuse(d.hdl, "proved the job token as process " + std::to_string(it->second.process) + " but sent no join within 10 s");
  }

  void on_join_deadline() {
    if (ready_ || failed_) return;
    say_quiet_refusals(std::chrono::steady_clock::now());
    std::string missing, left;
    for (int p = 1; p < o_.processes; ++p) {
      if (joined_.count(p)) continue;
      std::string& list = left_.count(p) ? left : missing;
      list += (list.empty() ? "" : ", ") + std::to_string(p);
    }
    // One that joined and gave up waiting (its own --join-timeout ran out a moment sooner) is
    // not one that never came.
    if (!left.empty())
      missing += (missing.empty() ? "" : "; ") + left + " (joined, then left: its own --join-timeout ran out first?)";
    // Where this process turned one away, that is most likely why it is missing.
    fail_setup("only " + std::to_string(joined_.size() + 1) + " of " + std::to_string(o_.processes) +
               " processes joined within " + join_timeout_text() + " s (--join-timeout); missing: " + missing +
               (!last_refusal_.empty() ? "; the last process refused: " + last_refusal_
                : crowded_out_ > 0
                    ? "; meanwhile " + std::to_string(crowded_out_) + " connections were closed for newer ones, past " +
                          std::to_string(max_waiting()) + " waiting at once: a flood of connections may have kept the "
                          "missing processes out"
                    : std::string(". Check that every process got the same MASTER_ADDR, MASTER_PORT, WORLD_SIZE and "
                                  "ACTORPIPE_JOB_TOKEN")));
  }

  // A local proxy's message for another process.
  void on_forward(msg::forward& f) {
    auto it = by_process_.find(f.process);
    if (it != by_process_.end()) write_envelope(it->second, f.target, f.process, f.index, std::move(f.content));
  }

  // The run is over: tell every process, and answer once they all hung up (or after 5 s).
  void on_shutdown(const msg::shutdown_cluster& s) {
    say_quiet_refusals(std::chrono::steady_clock::now());
    shutting_down_ = true;
    run_failed_ = !s.error.empty();
    shutdown_reply_to_ = caf::actor_cast<caf::actor>(self_->current_sender());
    for (auto& [p, hdl] : by_process_)
      write_envelope(hdl, static_cast<std::uint8_t>(target_kind::runtime), p, 0,
                     caf::make_message(msg::run_finished{s.error, s.stopped_by_signal, s.certain}));
    if (by_process_.empty()) {
      reply_closed();
      return;
    }
    self_->delayed_send(self_, std::chrono::seconds(5), msg::shutdown_deadline{});
  }

  // Every process that joined gets a heartbeat; one silent for --heartbeat-timeout is lost
  // (its connection closed), which stops the job. Until the run is over.
  void on_heartbeat_tick() {
    if (shutting_down_) return;
    if (const auto now = std::chrono::steady_clock::now(); now - refusal_window_ >= std::chrono::minutes(1))
      say_quiet_refusals(now);
    std::vector<int> silent;
    for (auto& [p, hdl] : by_process_)
      if (beat_and_check(hdl)) silent.push_back(p);
    for (const int p : silent) {
      const connection_handle hdl = by_process_[p];
      const std::string name = process_name(p);
      self_->close(hdl);
      conns_.erase(hdl);
      by_process_.erase(p);
      report_failure("lost " + name + ": " + silence_text() + "; its control connection is closed");
    }
    self_->delayed_send(self_, heartbeat_interval(), msg::hub_heartbeat_tick{});
  }

  void on_shutdown_deadline() {
    if (!shutdown_reply_to_) return;
    std::string left;
    for (auto& [p, hdl] : by_process_) left += (left.empty() ? "" : ", ") + std::to_string(p);
    // After a failure (a lost or frozen process, a timeout) a process that does not answer is
    // part of what the run's error says, which comes after this: only a detail then.
    const std::string text = "process(es) " + left + " did not hang up within 5 s of the end of the run";
    if (run_failed_)
      log_info(text + " (it failed: its error follows)");
    else
      log_warn(text);
    reply_closed();
  }

 private:
  // Before the token is proven only a hello is read; after, only envelopes are acted on.
  void on_frame(connection_handle hdl, control_connection& c, const std::vector<char>& buf) {
    const char type = buf[0];
    const char* data = buf.data() + 1;
    const std::size_t size = buf.size() - 1;
    if (!c.authenticated) {
      if (type == control_wire::hello)
        on_hello(hdl, c, data, size);
      else
        refuse(hdl, "a '" + control_wire::frame_type_text(type) + "' frame before proving the job token (protocol error)");
      return;
    }
    if (type == control_wire::envelope) on_envelope(hdl, c, data, size);
  }

  void on_hello(connection_handle hdl, control_connection& c, const char* data, std::size_t size) {
    control_wire::hello_frame h;
    if (auto why = control_wire::decode_hello(data, size, h); !why.empty()) {
      refuse(hdl, why);
      return;
    }
    if (!verify_answer(o_.token, c.challenge, h.joiner, h.answer)) {
      // Its joiner is the sender's text: quoted escaped, and not at any length.
      refuse(hdl,
             std::string(control_wire::refusal_wrong_token) + " (from '" + shown_text(h.joiner, 200) +
                 "'; check ACTORPIPE_JOB_TOKEN, or whether this is another job's process 0 on the same "
                 "MASTER_PORT: give each job its own --master-port)",
             true);
      return;
    }
    if (h.process < 1 || h.process >= o_.processes) {
      refuse(hdl, control_wire::refusal_bad_index + std::to_string(h.process) + " outside [1, " + std::to_string(o_.processes) +
                      ") (is every process started with the same WORLD_SIZE?)",
             true);
      return;
    }
    // Another connection that proved the token as this process and has not joined does not
    // hold the index: the first join takes it (on_join), and the other is refused at its join
    // or its join's deadline.
    if (joined_.count(h.process)) {
      // Also what nodes launched with different --nproc-per-node look like: node 1's first
      // process takes a rank node 0's already holds.
      refuse(hdl, "process " + std::to_string(h.process) + " has already joined (two processes with RANK=" +
                      std::to_string(h.process) + "? or nodes launched with different --nproc-per-node, or processes "
                      "with different WORLD_SIZE: this job has " + std::to_string(o_.processes) +
                      "; or this is a process 0 left from an earlier attempt, stopped or frozen, that still counts "
                      "the process it lost)",
             true);
      return;
    }
    c.authenticated = true;
    c.process = h.process;
    self_->delayed_send(self_, std::chrono::seconds(10), msg::handshake_deadline{hdl, true});
  }

  // An envelope from an admitted process: its join, a relay to another process, or for us.
  void on_envelope(connection_handle hdl, control_connection& c, const char* data, std::size_t size) {
    control_envelope e;
    if (auto why = decode_envelope(self_->system(), data, size, o_.processes, e); !why.empty()) {
      drop_malformed(hdl, why);
      return;
    }
    if (e.target == static_cast<std::uint8_t>(target_kind::control)) {
      if (e.content.match_elements<msg::join>()) on_join(hdl, c, e.content.get_mutable_as<msg::join>(0));
      return;
    }
    // Until it joined, a connection speaks for no process: what it sends is not relayed or acted on.
    if (!joined_as(hdl, c.process)) {
      refuse(hdl, "sent a message before joining (protocol error)");
      return;
    }
    if (e.process != 0) {  // relay between two other processes
      auto it = by_process_.find(e.process);
      if (it != by_process_.end()) write_envelope(it->second, e.target, e.process, e.index, std::move(e.content));
      return;
    }
    deliver(e.target, e.index, std::move(e.content));
  }

  void on_join(connection_handle hdl, control_connection& c, msg::join& j) {
    c.host = j.host;
    if (ready_) {
      refuse(hdl, "the job has already formed", true);
      return;
    }
    if (joined_.count(c.process)) {  // a second join on the connection, or a race with another
      refuse(hdl, "process " + std::to_string(c.process) + " has already joined", true);
      return;
    }
    if (j.fingerprint != o_.fingerprint) {
      // Another world size a restart would bring again (final: exit 2, not restarted); other
      // differences may pass while a job's nodes restart one by one.
      const std::string difference = describe_job_difference(j.fingerprint, o_.fingerprint);
      const bool size = difference.find("WORLD_SIZE=") != std::string::npos;
      refuse(hdl, std::string(size ? control_wire::refusal_world_size : "") + "process " + std::to_string(c.process) +
                      " runs a different job: " + difference,
             true);
      return;
    }
    addresses_[c.process] = j.address;
    for (held_name& h : j.held) h.process = c.process;
    held_[c.process] = std::move(j.held);
    by_process_[c.process] = hdl;
    joined_.insert(c.process);
    log_info(process_name(c.process) + " joined (" + std::to_string(joined_.size() + 1) + " of " +
             std::to_string(o_.processes) + " processes)");
    if (static_cast<int>(joined_.size()) == o_.processes - 1) all_joined();
  }

  void all_joined() {
    // Names two virtual stages on different processes hold (each process is clear of its own):
    // every run of this job would train, then fail to save (exit 2: a restart meets it again).
    std::vector<held_name> held = o_.held;
    for (auto& [p, names] : held_) held.insert(held.end(), names.begin(), names.end());
    if (const std::string clash = held_name_clash(held, o_.replicas, o_.processes); !clash.empty()) {
      const std::string why = control_wire::refusal_model + clash;
      for (const auto& [p, hdl] : std::map<int, connection_handle>(by_process_)) refuse(hdl, why, true);
      by_process_.clear();
      fail_setup(why, true);
      return;
    }
    held_.clear();
    ready_ = true;
    if (o_.processes > 1) log_info("every process joined: the job has formed");
    const double clock = o_.clock ? o_.clock() : 0;
    for (auto& [p, hdl] : by_process_)
      write_envelope(hdl, static_cast<std::uint8_t>(target_kind::control), p, 0,
                     caf::make_message(msg::welcome{addresses_, clock, o_.epoch_ns, o_.boot_id, o_.run_mark}));
    self_->send(owner_, msg::cluster_ready{addresses_, clock, "", o_.epoch_ns, o_.boot_id, false, o_.run_mark});
    if (o_.processes > 1 && heartbeats_on()) on_heartbeat_tick();
  }

  // Tells a connection why it is turned away, and closes it. `process`: it spoke actorpipe's
  // hello (a process of another job, or with other settings): what the join timeout's message
  // names, where a stranger's garbage is not.
  void refuse(connection_handle hdl, const std::string& why, bool process = false) {
    log_refusal(conns_[hdl].remote, why);
    if (process) last_refusal_ = why;
    write_frame(hdl, control_wire::refusal, std::vector<char>(why.begin(), why.end()));
    self_->close(hdl);
    conns_.erase(hdl);
  }

  std::size_t max_waiting() const { return 64 + 2 * static_cast<std::size_t>(o_.processes); }

  // Whether `hdl` is the connection process `p` joined on (one that proved the token as p and
  // never joined is not process p, whatever it sends or however it goes).
  bool joined_as(connection_handle hdl, int p) const {
    const auto joined = by_process_.find(p);
    return joined != by_process_.end() && joined->second == hdl;
  }

  // A refusal's line, at most once a minute for each peer address and reason and 20 lines a
  // minute in all: a flood wrote one line a connection (32,840 in 25 s). The rest are counted,
  // and said by address when the minute is over (at the next refusal, heartbeat or the end).
  void log_refusal(const std::string& remote, const std::string& why) {
    const auto now = std::chrono::steady_clock::now();
    if (now - refusal_window_ >= std::chrono::minutes(1)) say_quiet_refusals(now);
    const std::string host = remote.substr(0, remote.rfind(':'));
    if (refusal_lines_ >= 20 || !refusals_said_.insert(host + "\n" + why).second) {
      ++quiet_refusals_[host];
      return;
    }
    ++refusal_lines_;
    log_warn("refused a connection from " + remote + ": " + why);
  }

  // The refusals not said one by one, by peer address; a new minute's count begins at `now`.
  void say_quiet_refusals(std::chrono::steady_clock::time_point now) {
    for (const auto& [host, n] : quiet_refusals_)
      log_warn("refused " + std::to_string(n) + " more connection" + (n == 1 ? "" : "s") + " from " + host +
               " (not each said: one line a minute for each address and reason)");
    quiet_refusals_.clear();
    refusals_said_.clear();
    refusal_lines_ = 0;
    refusal_window_ = now;
  }

  // An admitted process sent something malformed: close its connection and stop the job (or
  // its forming), naming it. Callers must not touch the connection's entry afterwards.
  void drop_malformed(connection_handle hdl, const std::string& why) {
    auto it = conns_.find(hdl);
    const int p = it != conns_.end() ? it->second.process : -1;
    // A connection that proved the token as p and never joined is not process p: the one
    // that joined was dropped and blamed for it, and the running job failed.
    if (p >= 1 && !joined_as(hdl, p)) {
      refuse(hdl, "sent " + why + " before joining");
      return;
    }
    self_->close(hdl);
    const std::string name = process_name(p);
    log_warn("closing the connection of " + name + ": " + why);
    conns_.erase(hdl);
    if (p < 1) return;
    by_process_.erase(p);
    if (ready_)
      report_failure(name + " sent " + why + "; its connection is closed");
    else
      fail_setup(name + " sent " + why);
  }

  void report_failure(std::string what) {
    deliver(static_cast<std::uint8_t>(target_kind::supervisor), 0, caf::make_message(msg::failure{std::move(what)}));
  }

  void reply_closed() {
    if (!shutdown_reply_to_) return;
    self_->send(shutdown_reply_to_, msg::cluster_closed{});
    shutdown_reply_to_ = caf::actor{};
  }

  // "process 2 (rank 2 on host-b)": the host while its connection is open.
  std::string process_name(int p) const {
    std::string name = "process " + std::to_string(p) + " (" + ranks_label(p);
    for (auto& [hdl, c] : conns_)
      if (c.process == p && !c.host.empty()) name += " on " + c.host;
    return name + ")";
  }

  std::map<int, connection_handle> by_process_;  // admitted processes that joined
  std::set<int> joined_;
  std::map<int, std::vector<held_name>> held_;  // each joined process's join::held
  std::set<int> left_;  // processes that joined and left while the job was forming
  std::uint64_t arrivals_ = 0;  // connections accepted so far
  std::string last_refusal_;  // why the last process was turned away, for the join timeout's message
  // Refusals said this minute (by peer address and reason), and those counted only, by address.
  std::chrono::steady_clock::time_point refusal_window_ = std::chrono::steady_clock::now();
  int refusal_lines_ = 0;
  std::set<std::string> refusals_said_;
  std::map<std::string, long long> quiet_refusals_;
  long long crowded_out_ = 0;  // connections closed past max_waiting() (a flood), for the join timeout's message
  bool shutting_down_ = false;
  bool run_failed_ = false;  // the run it shuts down for ended with an error
  caf::actor shutdown_reply_to_;
};

}  // namespace

caf::behavior control_hub(caf::io::broker* self, cluster_options o, std::vector<std::uint8_t> own_address,
                          caf::actor owner) {
  auto h = std::make_shared<hub>(self, std::move(o), std::move(own_address), std::move(owner));
  h->start();
  return {
      [h](const caf::io::new_connection_msg& m) { h->on_new_connection(m); },
      [h](const caf::io::new_data_msg& m) { h->on_data(m); },
      [h](const caf::io::connection_closed_msg& m) { h->on_connection_closed(m); },
      [](const caf::io::acceptor_closed_msg&) {},
      [h](const msg::handshake_deadline& d) { h->on_handshake_deadline(d); },
      [h](const msg::hub_join_deadline&) { h->on_join_deadline(); },
      [h](msg::set_targets& t) { h->on_set_targets(t); },
      [h](msg::forward& f) { h->on_forward(f); },
      [h](const msg::shutdown_cluster& s) { h->on_shutdown(s); },
      [h](const msg::shutdown_deadline&) { h->on_shutdown_deadline(); },
      [h](const msg::hub_heartbeat_tick&) { h->on_heartbeat_tick(); },
  };
}

}  // namespace actorpipe
