// Interleaved 1F1B (Megatron-LM's virtual pipeline): each rank holds V chunks in loop
// placement (v = chunk * P + rank); microbatches move through the chunks in groups of P,
// which is why M must be a multiple of P. The warm-up is longer than 1F1B's, the bubble
// shrinks by V: (P-1)/(V*M + P-1) with F=1, B=2 per virtual stage.
#include <algorithm>

#include "core/schedule/builtin_schedules.hpp"

namespace actorpipe {

plan make_interleaved(const schedule_request& r) {
  if (r.chunks < 2) reject_request("interleaved", "chunks >= 2 (use 1f1b for chunks = 1)", r);
  if (r.microbatches % r.stages != 0) reject_request("interleaved", "microbatches to be a multiple of stages", r);
  const int P = r.stages, V = r.chunks, M = r.microbatches;
  plan p;
  p.place = loop_placement(P, V);
  p.microbatches = M;
  p.ranks.resize(P);
  const int total = M * V;  // actions of each kind per rank
  // The k-th forward (backward) of a rank: groups of P consecutive microbatches per chunk,
  // chunks in order for forwards and in reverse for backwards.
  auto microbatch = [&](int k) { return (k / (P * V)) * P + k % P; };
  auto fwd_chunk = [&](int k) { return (k / P) % V; };
  auto bwd_chunk = [&](int k) { return V - 1 - (k / P) % V; };
  for (int rank = 0; rank < P; ++rank) {
    auto& out = p.ranks[rank];
    const int warmup = std::min((P - rank - 1) * 2 + (V - 1) * P, total);
    auto fwd = [&](int k) { out.push_back({op_kind::forward, fwd_chunk(k) * P + rank, microbatch(k)}); };
    auto bwd = [&](int k) { out.push_back({op_kind::backward, bwd_chunk(k) * P + rank, microbatch(k)}); };
    for (int k = 0; k < warmup; ++k) fwd(k);
    for (int k = 0; k < total - warmup; ++k) {
      fwd(warmup + k);
      bwd(k);
    }
    for (int k = total - warmup; k < total; ++k) bwd(k);
  }
  return p;
}

}  // namespace actorpipe
