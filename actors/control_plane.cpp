// The control plane: one io broker per process, in the role of its process (the hub on
// process 0, a member elsewhere; see control_role.hpp).
#include "actors/control_plane.hpp"

#include <caf/io/all.hpp>

#include "actors/control_role.hpp"

namespace actorpipe {

void add_control_plane_types(caf::actor_system_config& cfg) {
  cfg.add_message_type<msg::join>("actorpipe.join");
  cfg.add_message_type<msg::welcome>("actorpipe.welcome");
}

caf::actor spawn_control_plane(caf::actor_system& sys, cluster_options options, std::vector<std::uint8_t> address,
                               caf::actor owner) {
  if (options.process == 0)
    return sys.middleman().spawn_broker(control_hub, std::move(options), std::move(address), std::move(owner));
  return sys.middleman().spawn_broker(control_member, std::move(options), std::move(address), std::move(owner));
}

}  // namespace actorpipe
