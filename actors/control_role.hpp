// What the control plane's two roles share: the hub (process 0, control_hub.cpp) admits the
// other processes and relays envelopes; a member (every other process, control_member.cpp)
// joins the hub. Both are io brokers reading the frames of control_codec.hpp, and both hand
// arrived envelopes to this process's actors. Internal to actors/.
#pragma once

#include <caf/io/all.hpp>

#include <chrono>
#include <cstdint>
#include <map>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "actors/control_codec.hpp"
#include "actors/control_plane.hpp"

namespace actorpipe {

// The two behaviours spawn_control_plane picks from.
caf::behavior control_hub(caf::io::broker* self, cluster_options o, std::vector<std::uint8_t> own_address,
                          caf::actor owner);
caf::behavior control_member(caf::io::broker* self, cluster_options o, std::vector<std::uint8_t> own_address,
                             caf::actor owner);

// One TCP connection of the broker.
struct control_connection {
  bool reading_body = false;  // the next read is a frame body (else a length prefix)
  bool authenticated = false;  // hub: proved the job token; a member trusts its hub
  int process = -1;            // hub: the process that proved the token on it
  std::vector<std::uint8_t> challenge;  // hub: what it sent, to check the answer against
  std::string remote;  // "addr:port" (hub) or "process 0" (member), for logs
  std::string host;    // hub: the host name the process sent in its join
  std::uint64_t arrival = 0;  // hub: the order connections came in (the oldest waiting goes first)
};

// State and helpers common to both roles; each role derives and adds its own.
class control_role {
 public:
  control_role(caf::io::broker* self, cluster_options o, std::vector<std::uint8_t> own_address, caf::actor owner);

  // The runtime says where envelopes for this process go; delivers what was held until then.
  void on_set_targets(msg::set_targets& t);

 protected:
  enum class read_step { length, bad_length, body };
  // One read on `c`: a length prefix within 1..cap arms the read of its body (`length`); one
  // outside says why in `why` (`bad_length`, nothing armed); else m.buf is a body (`body`).
  read_step read_frame(caf::io::connection_handle hdl, control_connection& c, const caf::io::new_data_msg& m,
                       std::uint32_t cap, std::string& why);
  // Arms the read of the next length prefix on `hdl`.
  void start_reading(caf::io::connection_handle hdl);

  void write_frame(caf::io::connection_handle hdl, char type, const std::vector<char>& payload);
  bool write_envelope(caf::io::connection_handle hdl, std::uint8_t target, int process, int index,
                      caf::message content);
  // Hands `content` to this process's actor (target, index), or holds it until set_targets.
  void deliver(std::uint8_t target, int index, caf::message content);
  // The job could not form: tell the owner once (nothing after the job formed).
  void fail_setup(std::string error, bool refused = false);

  // Heartbeats, once the job has formed (none with --heartbeat-timeout 0): every
  // heartbeat_interval each role calls beat_and_check on its connections to the other
  // processes. Anything that arrives on a connection counts as heard.
  bool heartbeats_on() const { return o_.heartbeat_timeout_s > 0; }
  caf::timespan heartbeat_interval() const;
  void heard(caf::io::connection_handle hdl) { heard_[hdl] = std::chrono::steady_clock::now(); }
  // Sends a heartbeat on `hdl`; true when nothing arrived on it for --heartbeat-timeout.
  bool beat_and_check(caf::io::connection_handle hdl);
  // "nothing heard from it for 60 s (--heartbeat-timeout): ...", for the failure naming it.
  std::string silence_text() const;
  // Seconds since anything arrived on `hdl` (since first asked, where nothing has).
  double silent_for(caf::io::connection_handle hdl);

  // "rank 2" or "ranks 2, 3" ("rank none" for a process without ranks).
  std::string ranks_label(int process) const;
  // "host:port of process 0", for messages.
  std::string master() const;
  // --join-timeout in whole seconds, for messages.
  std::string join_timeout_text() const;

  caf::io::broker* self_;
  cluster_options o_;
  caf::actor owner_;
  std::map<caf::io::connection_handle, control_connection> conns_;
  std::vector<std::vector<std::uint8_t>> addresses_;  // per process; own known from the start
  bool ready_ = false;   // the job formed
  bool failed_ = false;  // the job could not form (owner told)

 private:
  std::map<caf::io::connection_handle, std::chrono::steady_clock::time_point> heard_;
  std::map<std::pair<std::uint8_t, int>, caf::actor> targets_;
  bool have_targets_ = false;
  std::vector<std::tuple<std::uint8_t, int, caf::message>> held_;
};

// A duration in seconds as CAF's timespan (delayed_send).
caf::timespan seconds_span(double s);

}  // namespace actorpipe
