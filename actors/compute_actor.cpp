// The compute actor of a rank: spawned detached, so it owns one thread for the whole run.
// Torch's thread count and grad mode are thread-local; running every job of a rank here keeps
// them fixed, and keeps compute off CAF's scheduler threads. One job at a time: one compute
// per device.
//
// The stage hands its actions over in its policy's order, each through the action's chunk
// actor; two chunks' actors (interleaved, zbv) pass their jobs on in whichever order CAF's
// scheduler runs them, so each action carries its place in the stage's order and waits here
// for the ones before it. Other jobs run as they arrive.
#include <map>

#include "actors/messages.hpp"
#include "actors/run_context.hpp"

namespace actorpipe {

caf::behavior compute_actor(caf::event_based_actor*) {
  struct in_order {
    std::int64_t next = 0;                                // the stage's next action
    std::map<std::int64_t, std::function<void()>> early;  // actions that came ahead of it
  };
  auto q = std::make_shared<in_order>();
  return {[q](msg::compute_job& job) {
    if (job.order < 0) {
      job.work();
      return;
    }
    if (job.order != q->next) {
      q->early.emplace(job.order, std::move(job.work));
      return;
    }
    job.work();
    ++q->next;
    for (auto it = q->early.begin(); it != q->early.end() && it->first == q->next; it = q->early.erase(it)) {
      it->second();
      ++q->next;
    }
  }};
}

}  // namespace actorpipe
