// The compute actor of a rank: spawned detached, so it owns one thread for the whole run.
// Torch's thread count and grad mode are thread-local; running every job of a rank here keeps
// them fixed, and keeps compute off CAF's scheduler threads. One job at a time: one compute
// per device.
#include "actors/messages.hpp"
#include "actors/run_context.hpp"

namespace actorpipe {

caf::behavior compute_actor(caf::event_based_actor*) {
  return {[](msg::compute_job& job) { job.work(); }};
}

}  // namespace actorpipe
