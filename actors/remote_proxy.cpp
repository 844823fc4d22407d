// A local stand-in for an actor in another process (see remote_proxy.hpp).
#include "actors/remote_proxy.hpp"

#include "actors/control_plane.hpp"

namespace actorpipe {
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
