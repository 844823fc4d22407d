// 1F1B (PipeDream-Flush): rank r warms up with P-r-1 forwards, then alternates one forward
// and one backward, then drains the remaining backwards. Peak memory on rank r: P - r.
#include <algorithm>

#include "core/schedule/builtin_schedules.hpp"

namespace actorpipe {

plan make_one_f_one_b(const schedule_request& r) {
  if (r.chunks != 1) reject_request("1f1b", "chunks == 1 (use interleaved for chunks > 1)", r);
  if (r.microbatches < r.stages) reject_request("1f1b", "microbatches >= stages", r);
  plan p;
  p.place = loop_placement(r.stages, 1);
  p.microbatches = r.microbatches;
  p.ranks.resize(r.stages);
  for (int rank = 0; rank < r.stages; ++rank) {
    auto& out = p.ranks[rank];
    const int warmup = std::min(r.stages - rank - 1, r.microbatches);
    int f = 0, b = 0;
    while (f < warmup) out.push_back({op_kind::forward, rank, f++});
    while (f < r.microbatches) {
      out.push_back({op_kind::forward, rank, f++});
      out.push_back({op_kind::backward, rank, b++});
    }
    while (b < r.microbatches) out.push_back({op_kind::backward, rank, b++});
  }
  return p;
}

}  // namespace actorpipe
