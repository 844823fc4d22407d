// A local stand-in for an actor in another process: whatever it receives goes to the control
// plane as msg::forward, addressed to (target, index) in `process`.
#pragma once

#include <caf/all.hpp>

#include "actors/control_codec.hpp"

namespace actorpipe {

caf::actor spawn_remote_proxy(caf::actor_system& sys, caf::actor control, int process, target_kind target, int index);

}  // namespace actorpipe
