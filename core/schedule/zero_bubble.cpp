// Zero-bubble schedules (Qi et al., "Zero Bubble Pipeline Parallelism", ICLR 2024): the
// backward is split into I (input-grad, on the critical path) and W (weight-grad, free to
// move), and the W passes fill what would be bubbles.
//
// Both are built by the same list scheduler run on unit costs (F = I = W = 1, the paper's
// setting): at each time step every idle rank runs, in order of preference,
//   1. an I whose output-gradient has arrived (keeps the critical path moving),
//   2. the oldest pending W, if the rank already holds w_limit of them (bounds the memory
//      that deferred W passes keep),
//   3. an F whose input has arrived, if that virtual stage holds fewer live activations than
//      its cap (the cap is the 1F1B rule applied per virtual stage: depth - v, which gives
//      zb-h1 the 1F1B peak of P - rank and ends the warm-up where 1F1B's does),
//   4. the oldest pending W,
// and records what it ran. The recorded order is the plan; it is a topological order of the
// dependency graph, so it is deadlock-free under any costs.
//
// The W limits were chosen by sweeping P in 2..8 and M in P..8P on unit costs: for zb-h1,
// w_limit = P reproduces the paper's bubble (P-1)(F+I-W) exactly with at most P pending W;
// for zbv, w_limit = P + rank + 1 keeps the bubble below zb-h1's everywhere in that sweep,
// with at most 2P live activations (chunk-sized: P stage-sized, 1F1B's rank-0 peak).
#include <stdexcept>

#include "core/schedule/builtin_schedules.hpp"

namespace actorpipe {
namespace {

plan list_schedule_split_backward(const placement& place, int microbatches, const std::vector<int>& cap,
                                  const std::vector<int>& w_limit) {
  const int P = place.ranks, S = place.num_virtual_stages(), M = microbatches;
  constexpr int never = 1 << 30;
  std::vector<int> f_at(static_cast<size_t>(S) * M, never), i_at(static_cast<size_t>(S) * M, never);
  auto idx = [M](int v, int m) { return static_cast<size_t>(v) * M + m; };
  std::vector<int> next_f(S, 0), next_i(S, 0), live(S, 0);
  std::vector<std::vector<action>> pending_w(P);  // FIFO per rank
  std::vector<size_t> w_head(P, 0);
  std::vector<std::vector<int>> stages_of(P);
  for (int r = 0; r < P; ++r) stages_of[r] = place.virtual_stages_of(r);

  plan p;
  p.place = place;
  p.microbatches = M;
  p.ranks.resize(P);
  long remaining = 3L * S * M;
  for (int t = 0; remaining > 0; ++t) {
    bool ran = false;
    for (int r = 0; r < P; ++r) {
      action chosen{};
      bool found = false;
      // 1. I: lowest microbatch first, then the deeper virtual stage.
      for (int v : stages_of[r]) {
        int m = next_i[v];
        if (m >= M || f_at[idx(v, m)] > t) continue;
        if (v + 1 < S && i_at[idx(v + 1, m)] > t) continue;
        if (!found || m < chosen.microbatch || (m == chosen.microbatch && v > chosen.virtual_stage)) {
          chosen = {op_kind::input_grad, v, m};
          found = true;
        }
      }
      // 2. W first when too many are pending on this rank.
      if (!found && static_cast<int>(pending_w[r].size() - w_head[r]) >= w_limit[r]) {
        chosen = pending_w[r][w_head[r]++];
        found = true;
      }
      // 3. F under the cap: the deeper virtual stage first (it leads to a backward sooner).
      if (!found) {
        for (auto it = stages_of[r].rbegin(); it != stages_of[r].rend(); ++it) {
          int v = *it, m = next_f[v];
          if (m >= M || live[v] >= cap[v]) continue;
          if (v > 0 && f_at[idx(v - 1, m)] > t) continue;
          chosen = {op_kind::forward, v, m};
          found = true;
          break;
        }
      }
      // 4. W: oldest first.
      if (!found && w_head[r] < pending_w[r].size()) {
        chosen = pending_w[r][w_head[r]++];
        found = true;
      }
      if (!found) continue;
      const int v = chosen.virtual_stage, m = chosen.microbatch;
      if (chosen.op == op_kind::forward) {
        f_at[idx(v, m)] = t + 1;
        ++next_f[v];
        ++live[v];
      } else if (chosen.op == op_kind::input_grad) {
        i_at[idx(v, m)] = t + 1;
        ++next_i[v];
        --live[v];
        pending_w[r].push_back({op_kind::weight_grad, v, m});
      }
      p.ranks[r].push_back(chosen);
      --remaining;
      ran = true;
    }
    // Every action takes one step, so a step where nobody runs means nobody ever will.
    if (!ran) throw std::logic_error("zero-bubble list scheduler stalled at step " + std::to_string(t));
  }
  return p;
}

}  // namespace

plan make_zb_h1(const schedule_request& r) {
  if (r.chunks != 1) reject_request("zb-h1", "chunks == 1 (use zbv for 2 chunks per rank)", r);
  if (r.microbatches < r.stages) reject_request("zb-h1", "microbatches >= stages", r);
  std::vector<int> cap(r.stages);
  for (int v = 0; v < r.stages; ++v) cap[v] = r.stages - v;
  std::vector<int> w_limit(r.stages);
  for (int rank = 0; rank < r.stages; ++rank) w_limit[rank] = r.stages;
  return list_schedule_split_backward(loop_placement(r.stages, 1), r.microbatches, cap, w_limit);
}

plan make_zbv(const schedule_request& r) {
  if (r.chunks != 2) reject_request("zbv", "chunks == 2 (V-shape placement)", r);
  const int S = 2 * r.stages;
  std::vector<int> cap(S);
  for (int v = 0; v < S; ++v) cap[v] = S - v;
  std::vector<int> w_limit(r.stages);
  for (int rank = 0; rank < r.stages; ++rank) w_limit[rank] = r.stages + rank + 1;
  return list_schedule_split_backward(v_shape_placement(r.stages, 2), r.microbatches, cap, w_limit);
}

}  // namespace actorpipe
