// The control plane: one io broker per process (see control_plane.hpp for the wire format).
#include "actors/control_plane.hpp"

#include <caf/io/all.hpp>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <set>

#include "actors/messages.hpp"
#include "core/job_token.hpp"
#include "core/log.hpp"
#include "core/process_layout.hpp"

namespace actorpipe {
namespace msg {
namespace {
// Broker -> itself.
struct handshake_deadline {
  caf::io::connection_handle hdl;
};
struct join_deadline {};
struct retry_connect {};
struct shutdown_deadline {};
}  // namespace
}  // namespace msg
}  // namespace actorpipe

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(actorpipe::msg::handshake_deadline)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(actorpipe::msg::join_deadline)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(actorpipe::msg::retry_connect)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(actorpipe::msg::shutdown_deadline)

namespace actorpipe {
namespace {

using caf::io::connection_handle;
using caf::io::receive_policy;

constexpr std::uint32_t pre_auth_cap = 4096;
constexpr std::uint32_t frame_cap = 64u << 20;
constexpr std::size_t answer_bytes = 32;

struct connection {
  bool reading_body = false;
  bool authenticated = false;
  bool refused = false;
  int process = -1;
  std::vector<std::uint8_t> challenge;
  std::string remote;  // "addr:port" (process 0) for logs
  std::string host;
};

struct control_state {
  cluster_options o;
  caf::actor owner;
  std::vector<std::uint8_t> own_address;
  std::map<connection_handle, connection> conns;
  std::map<int, connection_handle> by_process;  // process 0: joined processes
  std::vector<std::vector<std::uint8_t>> addresses;
  std::set<int> joined;
  bool ready = false, failed = false, finished = false, shutting_down = false;
  caf::actor shutdown_reply_to;
  std::map<std::pair<std::uint8_t, int>, caf::actor> targets;
  bool have_targets = false;
  std::vector<std::tuple<std::uint8_t, int, caf::message>> held;
  connection_handle server;  // processes other than 0: the connection to process 0
  bool connected = false;
  std::chrono::steady_clock::time_point deadline;
  std::string connect_error;  // why the last attempt to reach process 0 failed
};

std::string ranks_of(const cluster_options& o, int process) { return ranks_of_process(o.process_of_rank, process); }

std::string process_name(const control_state& st, int p) {
  std::string name = "process " + std::to_string(p) + " (rank" +
                     (ranks_of(st.o, p).find(',') != std::string::npos ? "s " : " ") + ranks_of(st.o, p);
  for (auto& [hdl, c] : st.conns)
    if (c.process == p && !c.host.empty()) name += " on " + c.host;
  return name + ")";
}

void put_u32(std::vector<char>& out, std::uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}
std::uint32_t get_u32(const char* p) {
  std::uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= std::uint32_t(static_cast<unsigned char>(p[i])) << (8 * i);
  return v;
}

void write_frame(caf::io::broker* self, connection_handle hdl, char type, const std::vector<char>& payload) {
  std::vector<char> frame;
  frame.reserve(5 + payload.size());
  put_u32(frame, static_cast<std::uint32_t>(payload.size() + 1));
  frame.push_back(type);
  frame.insert(frame.end(), payload.begin(), payload.end());
  self->write(hdl, frame.size(), frame.data());
  self->flush(hdl);
}

bool write_envelope(caf::io::broker* self, connection_handle hdl, std::uint8_t target, int process, int index,
                    caf::message content) {
  control_envelope e{target, process, index, std::move(content)};
  std::vector<char> body = encode_envelope(self->system(), e);
  if (body.empty()) {
    log_error("control plane: cannot serialize a message for process " + std::to_string(process));
    return false;
  }
  write_frame(self, hdl, 'M', body);
  return true;
}

}  // namespace

namespace {

// CAF's binary_deserializer trusts a sequence's length field: a byte vector is resized to it
// before its bytes are checked to be there, so a few corrupt bytes can ask for gigabytes.
// This one forwards everything to it but refuses a sequence longer than the bytes left
// (every element of every message type here takes at least one byte).
class bounded_deserializer final : public caf::deserializer {
 public:
  bounded_deserializer(caf::actor_system& sys, const char* data, std::size_t size)
      : caf::deserializer(sys), inner_(sys, data, size) {}

  std::size_t remaining() const { return inner_.remaining(); }

  caf::error begin_object(uint16_t& typenr, std::string& name) override { return inner_.begin_object(typenr, name); }
  caf::error end_object() override { return inner_.end_object(); }
  caf::error begin_sequence(size_t& size) override {
    if (auto err = inner_.begin_sequence(size)) return err;
    if (size > inner_.remaining()) return caf::sec::end_of_stream;
    return caf::none;
  }
  caf::error end_sequence() override { return inner_.end_sequence(); }
  caf::error apply_raw(size_t num_bytes, void* data) override { return inner_.apply_raw(num_bytes, data); }

 protected:
  caf::error apply_impl(int8_t& x) override { return inner_(x); }
  caf::error apply_impl(uint8_t& x) override { return inner_(x); }
  caf::error apply_impl(int16_t& x) override { return inner_(x); }
  caf::error apply_impl(uint16_t& x) override { return inner_(x); }
  caf::error apply_impl(int32_t& x) override { return inner_(x); }
  caf::error apply_impl(uint32_t& x) override { return inner_(x); }
  caf::error apply_impl(int64_t& x) override { return inner_(x); }
  caf::error apply_impl(uint64_t& x) override { return inner_(x); }
  caf::error apply_impl(float& x) override { return inner_(x); }
  caf::error apply_impl(double& x) override { return inner_(x); }
  caf::error apply_impl(long double& x) override { return inner_(x); }
  caf::error apply_impl(std::string& x) override { return inner_(x); }
  caf::error apply_impl(std::u16string& x) override { return inner_(x); }
  caf::error apply_impl(std::u32string& x) override { return inner_(x); }

 private:
  caf::binary_deserializer inner_;
};

}  // namespace

std::vector<char> encode_envelope(caf::actor_system& sys, control_envelope& e) {
  std::vector<char> body;
  caf::binary_serializer sink{sys, body};
  if (sink(e.target, e.process, e.index, e.content)) return {};
  return body;
}

std::string decode_envelope(caf::actor_system& sys, const char* data, std::size_t size, int processes,
                            control_envelope& out) {
  bounded_deserializer source{sys, data, size};
  out = control_envelope{};
  if (auto err = source(out.target, out.process, out.index, out.content))
    return "a malformed control message (" + sys.render(err) + ")";
  if (source.remaining() != 0)
    return "a control message with " + std::to_string(source.remaining()) + " bytes past its end";
  if (out.target > static_cast<std::uint8_t>(target_kind::runtime))
    return "a control message for unknown target kind " + std::to_string(out.target);
  if (out.process < 0 || out.process >= processes)
    return "a control message for process " + std::to_string(out.process) + " of " + std::to_string(processes);
  if (out.index < 0) return "a control message for index " + std::to_string(out.index);
  return "";
}

void add_control_plane_types(caf::actor_system_config& cfg) {
  cfg.add_message_type<msg::join>("actorpipe.join");
  cfg.add_message_type<msg::welcome>("actorpipe.welcome");
}

caf::behavior control_plane(caf::io::broker* self, std::shared_ptr<control_state> st) {
  const bool hub = st->o.process == 0;
  const int W = st->o.processes;
  st->addresses.assign(W, {});
  st->addresses[st->o.process] = st->own_address;
  st->deadline = std::chrono::steady_clock::now() + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                                         std::chrono::duration<double>(st->o.join_timeout_s));

  auto fail_setup = [=](std::string error) {
    if (st->ready || st->failed) return;
    st->failed = true;
    self->send(st->owner, msg::cluster_ready{{}, 0, std::move(error)});
  };
  auto deliver = [=](std::uint8_t target, int index, caf::message content) {
    if (!st->have_targets) {
      st->held.emplace_back(target, index, std::move(content));
      return;
    }
    auto it = st->targets.find({target, index});
    if (it == st->targets.end()) {
      log_warn("control plane: a message for an unknown actor (kind " + std::to_string(target) + ", index " +
               std::to_string(index) + ") was dropped");
      return;
    }
    it->second->enqueue(nullptr, caf::make_message_id(), std::move(content), self->context());
  };
  auto report_failure = [=](std::string what) {
    if (hub) {
      deliver(static_cast<std::uint8_t>(target_kind::supervisor), 0, caf::make_message(msg::failure{std::move(what)}));
    } else if (!st->finished) {
      st->finished = true;
      self->send(st->owner, msg::run_finished{std::move(what)});
    }
  };
  auto refuse = [=](connection_handle hdl, const std::string& why) {
    auto& c = st->conns[hdl];
    log_warn("refused a connection from " + c.remote + ": " + why);
    c.refused = true;
    std::vector<char> text(why.begin(), why.end());
    write_frame(self, hdl, 'R', text);
    self->close(hdl);
    st->conns.erase(hdl);
  };
  // A member of the job sent something malformed: close its connection and stop the job (or
  // its forming), naming it. Callers must not touch the connection's entry afterwards.
  auto drop_malformed = [=](connection_handle hdl, const std::string& why) {
    self->close(hdl);
    if (!hub) {
      report_failure("process 0 sent " + why);
      return;
    }
    auto it = st->conns.find(hdl);
    const int p = it != st->conns.end() ? it->second.process : -1;
    const std::string name = process_name(*st, p);
    log_warn("closing the connection of " + name + ": " + why);
    st->conns.erase(hdl);
    if (p < 1) return;
    st->by_process.erase(p);
    if (st->ready)
      report_failure(name + " sent " + why + "; its connection is closed");
    else
      fail_setup(name + " sent " + why);
  };
  auto all_joined = [=] {
    st->ready = true;
    if (W > 1) log_info("every process joined: the job has formed");
    const double clock = st->o.clock ? st->o.clock() : 0;
    for (auto& [p, hdl] : st->by_process)
      write_envelope(self, hdl, static_cast<std::uint8_t>(target_kind::control), p, 0,
                     caf::make_message(msg::welcome{st->addresses, clock}));
    self->send(st->owner, msg::cluster_ready{st->addresses, clock, ""});
  };
  auto on_envelope = [=](connection_handle hdl, connection& c, const char* data, std::size_t size) {
    control_envelope e;
    std::string why = decode_envelope(self->system(), data, size, W, e);
    const std::uint8_t target = e.target;
    const int process = e.process, index = e.index;
    caf::message& content = e.content;
    if (!why.empty()) {
      drop_malformed(hdl, why);
      return;
    }
    if (target == static_cast<std::uint8_t>(target_kind::control)) {
      if (hub && content.match_elements<msg::join>()) {
        auto& j = content.get_mutable_as<msg::join>(0);
        c.host = j.host;
        if (st->ready) {
          refuse(hdl, "the job has already formed");
          return;
        }
        if (j.fingerprint != st->o.fingerprint) {
          refuse(hdl, "process " + std::to_string(c.process) + " runs a different job: its options are '" +
                          j.fingerprint + "', process 0's are '" + st->o.fingerprint + "'");
          return;
        }
        st->addresses[c.process] = j.address;
        st->by_process[c.process] = hdl;
        st->joined.insert(c.process);
        log_info(process_name(*st, c.process) + " joined (" + std::to_string(st->joined.size() + 1) + " of " +
                 std::to_string(W) + " processes)");
        if (static_cast<int>(st->joined.size()) == W - 1) all_joined();
      } else if (!hub && content.match_elements<msg::welcome>()) {
        auto& w = content.get_mutable_as<msg::welcome>(0);
        if (static_cast<int>(w.addresses.size()) != W) {
          fail_setup("process 0 sent " + std::to_string(w.addresses.size()) + " addresses for " + std::to_string(W) +
                     " processes (is every process started with the same WORLD_SIZE?)");
          return;
        }
        st->ready = true;
        log_info("joined the job of process 0 at " + st->o.master_addr + ":" + std::to_string(st->o.master_port) +
                 " as process " + std::to_string(st->o.process) + " (rank" +
                 (ranks_of(st->o, st->o.process).find(',') != std::string::npos ? "s " : " ") +
                 ranks_of(st->o, st->o.process) + ")");
        self->send(st->owner, msg::cluster_ready{std::move(w.addresses), w.clock, ""});
      }
      return;
    }
    if (hub && process != 0) {  // relay between two other processes
      auto it = st->by_process.find(process);
      if (it != st->by_process.end()) write_envelope(self, it->second, target, process, index, std::move(content));
      return;
    }
    if (!hub && target == static_cast<std::uint8_t>(target_kind::runtime)) st->finished = true;
    deliver(target, index, std::move(content));
  };
  auto on_hello = [=](connection_handle hdl, connection& c, const char* data, std::size_t size) {
    if (size < answer_bytes + 4) {
      refuse(hdl, "a hello of " + std::to_string(size) + " bytes (protocol error)");
      return;
    }
    std::vector<std::uint8_t> answer(data, data + answer_bytes);
    const int process = static_cast<std::int32_t>(get_u32(data + answer_bytes));
    std::string joiner(data + answer_bytes + 4, data + size);
    if (!verify_answer(st->o.token, c.challenge, joiner, answer)) {
      refuse(hdl, "wrong job token (from '" + joiner + "'; check ACTORPIPE_JOB_TOKEN)");
      return;
    }
    if (process < 1 || process >= W) {
      refuse(hdl, "process index " + std::to_string(process) + " outside [1, " + std::to_string(W) +
                      ") (is every process started with the same WORLD_SIZE?)");
      return;
    }
    if (st->joined.count(process)) {
      refuse(hdl, "process " + std::to_string(process) + " has already joined (two processes with RANK=" +
                      std::to_string(process) + "?)");
      return;
    }
    c.authenticated = true;
    c.process = process;
  };
  auto on_frame = [=](connection_handle hdl, connection& c, const std::vector<char>& buf) {
    const char type = buf[0];
    const char* data = buf.data() + 1;
    const std::size_t size = buf.size() - 1;
    if (hub) {
      if (!c.authenticated) {
        if (type == 'H')
          on_hello(hdl, c, data, size);
        else
          refuse(hdl, std::string("a '") + (std::isprint(static_cast<unsigned char>(type)) ? std::string(1, type) : "?") +
                          "' frame before proving the job token (protocol error)");
        return;
      }
      if (type == 'M') on_envelope(hdl, c, data, size);
      return;
    }
    switch (type) {
      case 'C': {
        std::vector<std::uint8_t> challenge(data, data + size);
        char host[256] = {0};
        gethostname(host, sizeof host - 1);
        const std::string joiner = std::string(host) + ":" + std::to_string(getpid()) + ":process " +
                                   std::to_string(st->o.process);
        std::vector<std::uint8_t> answer = answer_challenge(st->o.token, challenge, joiner);
        std::vector<char> hello(answer.begin(), answer.end());
        const std::uint32_t p = static_cast<std::uint32_t>(st->o.process);
        for (int i = 0; i < 4; ++i) hello.push_back(static_cast<char>((p >> (8 * i)) & 0xff));
        hello.insert(hello.end(), joiner.begin(), joiner.end());
        write_frame(self, hdl, 'H', hello);
        write_envelope(self, hdl, static_cast<std::uint8_t>(target_kind::control), 0, 0,
                       caf::make_message(msg::join{st->o.fingerprint, st->own_address, host}));
        break;
      }
      case 'R':
        fail_setup("process 0 (" + st->o.master_addr + ":" + std::to_string(st->o.master_port) + ") refused this process: " +
                   std::string(data, size));
        break;
      case 'M': on_envelope(hdl, c, data, size); break;
      default: report_failure("process 0 sent an unknown frame type"); break;
    }
  };
  auto start_reading = [=](connection_handle hdl) {
    st->conns[hdl].reading_body = false;
    self->configure_read(hdl, receive_policy::exactly(4));
  };
  auto try_connect = [=] {
    auto hdl = self->add_tcp_scribe(st->o.master_addr, static_cast<std::uint16_t>(st->o.master_port));
    if (!hdl) {
      st->connect_error = self->system().render(hdl.error());
      if (std::chrono::steady_clock::now() >= st->deadline) {
        fail_setup("could not reach process 0 at " + st->o.master_addr + ":" + std::to_string(st->o.master_port) +
                   " within " + std::to_string(static_cast<int>(st->o.join_timeout_s)) +
                   " s (--join-timeout): " + self->system().render(hdl.error()));
        return;
      }
      self->delayed_send(self, std::chrono::milliseconds(200), msg::retry_connect{});
      return;
    }
    st->server = *hdl;
    st->connected = true;
    log_debug("connected to process 0 at " + st->o.master_addr + ":" + std::to_string(st->o.master_port) +
              "; proving the job token");
    st->conns[*hdl].remote = "process 0";
    start_reading(*hdl);
  };

  if (hub) {
    auto listening = self->add_tcp_doorman(static_cast<std::uint16_t>(st->o.master_port), st->o.master_addr.c_str(), true);
    if (!listening) {
      fail_setup("cannot listen on " + st->o.master_addr + ":" + std::to_string(st->o.master_port) +
                 " (MASTER_ADDR / MASTER_PORT, or --master-addr / --master-port of actorpipe launch): " +
                 self->system().render(listening.error()));
    } else if (W == 1) {
      all_joined();
    } else {
      log_info("listening on " + st->o.master_addr + ":" + std::to_string(st->o.master_port) + " for the other " +
               std::to_string(W - 1) + (W == 2 ? " process" : " processes") + " of the job");
    }
  } else {
    try_connect();
  }
  self->delayed_send(self, std::chrono::duration_cast<caf::timespan>(std::chrono::duration<double>(st->o.join_timeout_s)),
                     msg::join_deadline{});

  return {
      [=](const caf::io::new_connection_msg& m) {
        auto& c = st->conns[m.handle];
        c.remote = self->remote_addr(m.handle) + ":" + std::to_string(self->remote_port(m.handle));
        c.challenge = make_challenge();
        write_frame(self, m.handle, 'C', std::vector<char>(c.challenge.begin(), c.challenge.end()));
        start_reading(m.handle);
        self->delayed_send(self, std::chrono::seconds(10), msg::handshake_deadline{m.handle});
      },
      [=](caf::io::new_data_msg& m) {
        auto it = st->conns.find(m.handle);
        if (it == st->conns.end()) return;
        connection& c = it->second;
        if (!c.reading_body) {
          const std::uint32_t len = get_u32(m.buf.data());
          const std::uint32_t cap = (hub && !c.authenticated) ? pre_auth_cap : frame_cap;
          if (len == 0 || len > cap) {
            const std::string why = "a frame of " + std::to_string(len) + " bytes (allowed: 1.." + std::to_string(cap) + ")";
            if (hub && !c.authenticated) {
              refuse(m.handle, why);
            } else {
              drop_malformed(m.handle, why);
            }
            return;
          }
          c.reading_body = true;
          self->configure_read(m.handle, receive_policy::exactly(len));
          return;
        }
        on_frame(m.handle, c, m.buf);
        if (st->conns.count(m.handle)) start_reading(m.handle);
      },
      [=](const caf::io::connection_closed_msg& m) {
        auto it = st->conns.find(m.handle);
        if (it == st->conns.end()) return;
        const connection c = it->second;
        st->conns.erase(it);
        if (!hub) {
          st->connected = false;
          if (!st->ready)
            fail_setup("process 0 closed the connection while this process was joining");
          else
            report_failure("lost the connection to process 0 (the supervisor, at " + st->o.master_addr + ":" +
                           std::to_string(st->o.master_port) + ")");
          return;
        }
        if (c.process < 1 || !c.authenticated) return;  // a stranger or a refused process left
        st->by_process.erase(c.process);
        if (st->shutting_down) {
          if (st->by_process.empty() && st->shutdown_reply_to) {
            self->send(st->shutdown_reply_to, msg::cluster_closed{});
            st->shutdown_reply_to = caf::actor{};
          }
          return;
        }
        if (!st->ready) {
          st->joined.erase(c.process);
          log_warn("process " + std::to_string(c.process) + " left while the job was forming");
          return;
        }
        report_failure("lost " + process_name(*st, c.process) + ": its control connection closed (the process died or was killed)");
      },
      [=](const caf::io::acceptor_closed_msg&) {},
      [=](msg::handshake_deadline& d) {
        auto it = st->conns.find(d.hdl);
        if (it != st->conns.end() && !it->second.authenticated) refuse(d.hdl, "no valid hello within 10 s");
      },
      [=](msg::join_deadline&) {
        if (st->ready || st->failed) return;
        if (hub) {
          std::string missing;
          for (int p = 1; p < W; ++p)
            if (!st->joined.count(p)) missing += (missing.empty() ? "" : ", ") + std::to_string(p);
          fail_setup("only " + std::to_string(st->joined.size() + 1) + " of " + std::to_string(W) + " processes joined within " +
                     std::to_string(static_cast<int>(st->o.join_timeout_s)) + " s (--join-timeout); missing: " + missing +
                     ". Check that every process got the same MASTER_ADDR, MASTER_PORT, WORLD_SIZE and ACTORPIPE_JOB_TOKEN");
        } else if (!st->connected) {
          fail_setup("could not reach process 0 at " + st->o.master_addr + ":" + std::to_string(st->o.master_port) +
                     " within " + std::to_string(static_cast<int>(st->o.join_timeout_s)) +
                     " s (--join-timeout; is process 0 running, and are MASTER_ADDR and MASTER_PORT right?): " +
                     st->connect_error);
        } else {
          fail_setup("process 0 at " + st->o.master_addr + ":" + std::to_string(st->o.master_port) +
                     " did not admit this process within " + std::to_string(static_cast<int>(st->o.join_timeout_s)) +
                     " s (--join-timeout): the other processes did not all join");
        }
      },
      [=](msg::retry_connect&) {
        if (!st->connected && !st->failed) try_connect();
      },
      [=](msg::set_targets& t) {
        st->targets = std::move(t.targets);
        st->have_targets = true;
        auto held = std::move(st->held);
        st->held.clear();
        for (auto& [target, index, content] : held) deliver(target, index, std::move(content));
      },
      [=](msg::forward& f) {
        if (hub) {
          auto it = st->by_process.find(f.process);
          if (it != st->by_process.end())
            write_envelope(self, it->second, f.target, f.process, f.index, std::move(f.content));
        } else if (st->connected) {
          write_envelope(self, st->server, f.target, f.process, f.index, std::move(f.content));
        }
      },
      [=](msg::shutdown_cluster& s) {
        st->shutting_down = true;
        st->shutdown_reply_to = caf::actor_cast<caf::actor>(self->current_sender());
        for (auto& [p, hdl] : st->by_process)
          write_envelope(self, hdl, static_cast<std::uint8_t>(target_kind::runtime), p, 0,
                         caf::make_message(msg::run_finished{s.error}));
        if (st->by_process.empty()) {
          self->send(st->shutdown_reply_to, msg::cluster_closed{});
          st->shutdown_reply_to = caf::actor{};
          return;
        }
        self->delayed_send(self, std::chrono::seconds(5), msg::shutdown_deadline{});
      },
      [=](msg::shutdown_deadline&) {
        if (!st->shutdown_reply_to) return;
        std::string left;
        for (auto& [p, hdl] : st->by_process) left += (left.empty() ? "" : ", ") + std::to_string(p);
        log_warn("process(es) " + left + " did not hang up within 5 s of the end of the run");
        self->send(st->shutdown_reply_to, msg::cluster_closed{});
        st->shutdown_reply_to = caf::actor{};
      },
  };
}

caf::actor spawn_control_plane(caf::actor_system& sys, cluster_options options, std::vector<std::uint8_t> address,
                               caf::actor owner) {
  auto st = std::make_shared<control_state>();
  st->o = std::move(options);
  st->own_address = std::move(address);
  st->owner = std::move(owner);
  return sys.middleman().spawn_broker(control_plane, st);
}

namespace {
caf::behavior remote_proxy(caf::event_based_actor* self, caf::actor control, int process, std::uint8_t target, int index) {
  self->set_default_handler([=](caf::scheduled_actor*, caf::message_view& x) -> caf::result<caf::message> {
    self->send(control, msg::forward{process, target, index, x.move_content_to_message()});
    return caf::delegated<caf::message>{};  // nothing goes back to the sender
  });
  return {[](msg::cluster_closed&) {}};  // never sent to a proxy; a behavior keeps it alive
}
}  // namespace

caf::actor spawn_remote_proxy(caf::actor_system& sys, caf::actor control, int process, target_kind target, int index) {
  return sys.spawn(remote_proxy, std::move(control), process, static_cast<std::uint8_t>(target), index);
}

}  // namespace actorpipe
