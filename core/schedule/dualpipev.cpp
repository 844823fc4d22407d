// DualPipeV (DeepSeek's "cut-in-half" DualPipe): V placement with 2 chunks per rank, eight
// phases per rank. Warm-up runs chunk-0 forwards, then chunk-0/chunk-1 forward pairs; the
// steady phase pairs a forward of one chunk with a backward of the other (on a GPU the pair
// runs overlapped, computation hiding communication; here the pair is two actions in order);
// the tail splits backwards into I and W and spends the deferred W passes in the cool-down.
// Needs microbatches >= 2 * stages.
#include <deque>

#include "core/schedule/builtin_schedules.hpp"

namespace actorpipe {

plan make_dualpipev(const schedule_request& r) {
  if (r.chunks != 2) reject_request("dualpipev", "chunks == 2 (V-shape placement)", r);
  if (r.microbatches < 2 * r.stages) reject_request("dualpipev", "microbatches >= 2 * stages", r);
  const int P = r.stages, M = r.microbatches;
  plan p;
  p.place = v_shape_placement(P, 2);
  p.microbatches = M;
  p.ranks.resize(P);
  for (int rank = 0; rank < P; ++rank) {
    auto& out = p.ranks[rank];
    const int stage[2] = {rank, 2 * P - 1 - rank};  // chunk 0 goes down, chunk 1 comes back up
    int next_f[2] = {0, 0}, next_b[2] = {0, 0};
    std::deque<action> deferred_w;
    auto forward = [&](int c) { out.push_back({op_kind::forward, stage[c], next_f[c]++}); };
    // A backward either whole (B) or split, its W queued for later.
    auto backward = [&](int c, bool split) {
      const int v = stage[c], m = next_b[c]++;
      if (!split) {
        out.push_back({op_kind::backward, v, m});
        return;
      }
      out.push_back({op_kind::input_grad, v, m});
      deferred_w.push_back({op_kind::weight_grad, v, m});
    };
    auto weight = [&]() {
      out.push_back(deferred_w.front());
      deferred_w.pop_front();
    };

    // 1. Chunk-0 forwards filling the way down.
    for (int i = 0; i < 2 * (P - rank - 1); ++i) forward(0);
    // 2. Forward pairs: chunk 0, then chunk 1 as inputs come back up.
    for (int i = 0; i < rank + 1; ++i) {
      forward(0);
      forward(1);
    }
    // 3. Chunk-1 backward split, its W at once, then a chunk-1 forward.
    for (int i = 0; i < P - rank - 1; ++i) {
      backward(1, true);
      weight();
      forward(1);
    }
    // 4. Steady state: (F0 with B1) then (F1 with B0).
    for (int i = 0; i < M - 2 * P + rank + 1; ++i) {
      forward(0);
      backward(1, false);
      forward(1);
      backward(0, false);
    }
    // 5. Chunk-1 backward, then (F1 with B0).
    for (int i = 0; i < P - rank - 1; ++i) {
      backward(1, false);
      forward(1);
      backward(0, false);
    }
    // 6. Backward pairs; from the middle on, split, so W passes can fill the cool-down.
    bool split = false;
    for (int i = 0; i < rank + 1; ++i) {
      if (i == (rank + 1) / 2 && rank % 2 == 1) split = true;
      backward(1, split);
      if (i == (rank + 1) / 2 && rank % 2 == 0) split = true;
      backward(0, split);
    }
    // 7. A deferred W, then a split chunk-0 backward.
    for (int i = 0; i < P - rank - 1; ++i) {
      weight();
      backward(0, true);
    }
    // 8. The remaining W passes.
    while (!deferred_w.empty()) weight();
  }
  return p;
}

}  // namespace actorpipe
