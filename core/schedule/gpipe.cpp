// GPipe: every forward of the step, then every backward. Peak memory: all M microbatches.
#include "core/schedule/builtin_schedules.hpp"

namespace actorpipe {

plan make_gpipe(const schedule_request& r) {
  plan p;
  p.place = loop_placement(r.stages, r.chunks);
  p.microbatches = r.microbatches;
  p.ranks.resize(r.stages);
  for (int rank = 0; rank < r.stages; ++rank) {
    auto& out = p.ranks[rank];
    for (int c = 0; c < r.chunks; ++c)
      for (int m = 0; m < r.microbatches; ++m) out.push_back({op_kind::forward, c * r.stages + rank, m});
    for (int c = r.chunks - 1; c >= 0; --c)
      for (int m = 0; m < r.microbatches; ++m) out.push_back({op_kind::backward, c * r.stages + rank, m});
  }
  return p;
}

}  // namespace actorpipe
