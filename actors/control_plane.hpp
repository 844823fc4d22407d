// The control plane of a multi-process job, on CAF's middleman (io brokers): process 0 listens
// on MASTER_ADDR:MASTER_PORT (the hub, control_hub.cpp), every other process connects (a
// member, control_member.cpp), proves it holds the job token (HMAC challenge,
// core/job_token.hpp) and joins; then small control messages (flush, losses, optimizer steps,
// ...) flow between actors in different processes as CAF-serialized envelopes, relayed by
// process 0. Tensor bytes never pass here: they go through the transport. The wire format and
// its codec are in control_codec.hpp; the stand-ins for remote actors in remote_proxy.hpp.
#pragma once

#include <caf/all.hpp>

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "actors/control_codec.hpp"
#include "actors/messages.hpp"
#include "core/held_names.hpp"
#include "core/job_place.hpp"
#include "actors/remote_proxy.hpp"

namespace actorpipe {

// This process's place in the job (processes, process, master address and port, token, join
// timeout) and what forming the job needs besides.
struct cluster_options : job_place {
  std::string fingerprint;                // the job's options as text: must match process 0's
  std::vector<int> process_of_rank;       // per pipeline rank (ranks_per_process resolved)
  // Process 0: its run clock's zero as steady_clock nanoseconds, and its host's boot id (""
  // where unreadable), so a process on the same host aligns its clock exactly.
  std::int64_t epoch_ns = 0;
  std::string boot_id;
  std::function<double()> clock;          // seconds on the run's clock (process 0's is shared)
  // A member with heartbeats off (--heartbeat-timeout 0): how long process 0 may stay silent
  // before this process ends its run (0: never). Process 0 says something every step, so the
  // runtime gives twice --step-timeout and a margin: a frozen process 0 held its members for ever.
  double member_silence_limit_s = 0;
  // The names this process's virtual stages save their tensors under: process 0 gathers every
  // process's as the job forms, and refuses the job where two stages hold one name (each
  // process alone sees no clash; the saved files would, after the training).
  std::vector<held_name> held;
  int replicas = 1;
};

// What differs between two job fingerprints (`name=value` lines), each option named as it is
// given: "--lr 0.01 against process 0's --lr 0.003; --steps ..." with `theirs` first
// ("WORLD_SIZE=3", "no --save-dir", "--data-file (8192 bytes, digest ...)"); the whole texts
// if they do not share their names.
std::string describe_job_difference(const std::string& theirs, const std::string& process0s);

namespace msg {

// Control plane -> its owner (the runtime): every process joined (error empty), or the job
// could not form (error says why; `refused` when starting it again would fail the same way: the
// master port is taken, or process 0 refused this process's job token or process index).
// addresses: every process's transport address.
struct cluster_ready {
  std::vector<std::vector<std::uint8_t>> addresses;
  double clock = 0;  // process 0's run clock when it sent the welcome (seconds)
  std::string error;
  std::int64_t epoch_ns = 0;  // process 0's run clock's zero, steady_clock nanoseconds on its host
  std::string boot_id;        // process 0's host's boot id
  bool refused = false;
  std::string run_mark;  // process 0's job_place::run_mark
};
// Runtime -> control plane: where envelopes for this process go (held until this arrives).
struct set_targets {
  std::map<std::pair<std::uint8_t, int>, caf::actor> targets;  // (target_kind, index)
};
// Proxy -> control plane: deliver `content` to (target, index) in `process`.
struct forward {
  int process;
  std::uint8_t target;
  int index;
  caf::message content;
};
// Runtime of process 0 -> control plane: tell every process the run is over, wait until they
// hung up (or a few seconds), then answer cluster_closed.
struct shutdown_cluster {
  std::string error;
  int stopped_by_signal = 0;  // run_finished's
  bool certain = false;       // run_finished's
};
struct cluster_closed {};

// Process p -> process 0, right after the hello: who it is and where its transport listens.
struct join {
  std::string fingerprint;
  std::vector<std::uint8_t> address;
  std::string host;
  std::vector<held_name> held;  // cluster_options::held (each one's process is the joiner's)
};
// Process 0 -> every process once all joined.
struct welcome {
  std::vector<std::vector<std::uint8_t>> addresses;
  double clock = 0;
  std::int64_t epoch_ns = 0;
  std::string boot_id;
  std::string run_mark;
};

}  // namespace msg

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, held_name& x) {
  return f(caf::meta::type_name("held_name"), x.name, x.replica, x.stage, x.buffer);
}

namespace msg {

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, join& x) {
  return f(caf::meta::type_name("join"), x.fingerprint, x.address, x.host, x.held);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, welcome& x) {
  double_bits clock{&x.clock};
  return f(caf::meta::type_name("welcome"), x.addresses, clock, x.epoch_ns, x.boot_id, x.run_mark);
}

}  // namespace msg

// Registers join and welcome (add_message_types in messages.hpp calls this).
void add_control_plane_types(caf::actor_system_config& cfg);

// Spawns this process's control plane (the actor system must have loaded caf::io::middleman).
// `owner` receives msg::cluster_ready, and later msg::run_finished when the connection to
// process 0 is lost (processes other than 0). On process 0 a lost process is reported to the
// supervisor target as msg::failure naming its ranks.
caf::actor spawn_control_plane(caf::actor_system& sys, cluster_options options, std::vector<std::uint8_t> address,
                               caf::actor owner);

}  // namespace actorpipe

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(actorpipe::msg::cluster_ready)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(actorpipe::msg::set_targets)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(actorpipe::msg::forward)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(actorpipe::msg::shutdown_cluster)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(actorpipe::msg::cluster_closed)
