// Plan validator: structure, completeness, then an abstract run (no costs) that proves every
// rank can reach the end of its list, naming the stuck ranks when it cannot.
#include "core/schedule/plan_validator.hpp"

#include <algorithm>
#include <vector>

namespace actorpipe {
namespace {

struct position {
  int rank = -1;  // -1: not listed
  int index = -1;
};

// Where each (op, virtual stage, microbatch) is first listed: a flat table (a std::map here
// was most of the time of a zero-bubble rebuild, which simulates hundreds of candidates).
class positions {
 public:
  positions(int S, int M) : S_(S), M_(M), at_(4 * static_cast<std::size_t>(S) * static_cast<std::size_t>(M)) {}
  position& operator()(op_kind op, int v, int m) { return at_[index(op, v, m)]; }
  const position& operator()(op_kind op, int v, int m) const { return at_[index(op, v, m)]; }
  bool has(op_kind op, int v, int m) const { return (*this)(op, v, m).rank >= 0; }

 private:
  std::size_t index(op_kind op, int v, int m) const {
    const std::size_t kind = op == op_kind::forward ? 0 : op == op_kind::backward ? 1 : op == op_kind::input_grad ? 2 : 3;
    return (kind * static_cast<std::size_t>(S_) + static_cast<std::size_t>(v)) * static_cast<std::size_t>(M_) +
           static_cast<std::size_t>(m);
  }
  int S_, M_;
  std::vector<position> at_;
};

std::string at(int rank, int index, const action& a) {
  return "rank " + std::to_string(rank) + ", position " + std::to_string(index) + " (" + to_string(a) + ")";
}

std::string dep_name(const dependency& d, const positions& where) {
  if (d.what == dependency::kind::forward)
    return "F" + std::to_string(d.virtual_stage) + "." + std::to_string(d.microbatch);
  // An input-grad dependency is met by whichever of B or I the plan lists.
  bool has_i = where.has(op_kind::input_grad, d.virtual_stage, d.microbatch);
  return std::string(has_i ? "I" : "B") + std::to_string(d.virtual_stage) + "." + std::to_string(d.microbatch);
}

}  // namespace

validation_report validate_plan(const plan& p) {
  validation_report rep;
  const int P = p.num_ranks();
  const int S = p.num_virtual_stages();
  const int M = p.microbatches;
  auto err = [&](std::string s) { rep.errors.push_back(std::move(s)); };

  if (P < 1) {
    err("plan has no ranks");
    return rep;
  }
  if (static_cast<int>(p.ranks.size()) != P) {
    err("plan lists " + std::to_string(p.ranks.size()) + " ranks but its placement has " + std::to_string(P));
    return rep;
  }
  if (M < 1) err("plan has microbatches=" + std::to_string(M) + "; needs at least 1");

  // Placement: every rank owns the same number of virtual stages, each rank's in increasing
  // order its chunks 0, 1, ... (what the runtime and the simulator index by). A generator that
  // fills rank_of alone leaves chunk_of to placement_from_ranks.
  const int per_rank = S / P;
  if (static_cast<int>(p.place.chunk_of.size()) != S) {
    err("placement.chunk_of has " + std::to_string(p.place.chunk_of.size()) + " entries for " + std::to_string(S) +
        " virtual stages (placement_from_ranks fills it from rank_of)");
    return rep;
  }
  for (int v = 0; v < S; ++v)
    if (p.place.rank_of[v] < 0 || p.place.rank_of[v] >= P) {
      err("placement.rank_of[" + std::to_string(v) + "]=" + std::to_string(p.place.rank_of[v]) +
          " is out of range 0.." + std::to_string(P - 1));
      return rep;
    }
  for (int r = 0; r < P; ++r) {
    const std::vector<int> mine = p.place.virtual_stages_of(r);
    if (S % P != 0 || static_cast<int>(mine.size()) != per_rank) {
      err("placement: rank " + std::to_string(r) + " owns " + std::to_string(mine.size()) + " of " + std::to_string(S) +
          " virtual stages over " + std::to_string(P) + " ranks: every rank must own the same number of chunks");
      return rep;
    }
    for (int k = 0; k < per_rank; ++k)
      if (p.place.chunk_of[mine[k]] != k) {
        err("placement.chunk_of[" + std::to_string(mine[k]) + "]=" + std::to_string(p.place.chunk_of[mine[k]]) +
            ", but virtual stage " + std::to_string(mine[k]) + " is rank " + std::to_string(r) + "'s chunk " +
            std::to_string(k) + " (a rank's virtual stages in increasing order are its chunks 0, 1, ...)");
        return rep;
      }
  }

  // Structure: ranges, ownership, duplicates.
  if (static_cast<long long>(S) * M > max_plan_forwards) {
    err("plan has " + std::to_string(S) + " virtual stages x " + std::to_string(M) + " microbatches = " +
        std::to_string(static_cast<long long>(S) * M) + " forward passes, more than a plan may hold (" +
        std::to_string(max_plan_forwards) + ")");
    return rep;
  }
  positions where(S, M);  // (op, v, m) -> first position
  for (int r = 0; r < P; ++r) {
    for (int i = 0; i < static_cast<int>(p.ranks[r].size()); ++i) {
      const action& a = p.ranks[r][i];
      if (a.op != op_kind::forward && a.op != op_kind::backward && a.op != op_kind::input_grad &&
          a.op != op_kind::weight_grad) {
        err("rank " + std::to_string(r) + ", position " + std::to_string(i) + ": op code " +
            std::to_string(static_cast<int>(a.op)) + " is not F, B, I or W");
        continue;
      }
      if (a.virtual_stage < 0 || a.virtual_stage >= S) {
        err(at(r, i, a) + ": virtual stage " + std::to_string(a.virtual_stage) + " is out of range 0.." +
            std::to_string(S - 1));
        continue;
      }
      if (a.microbatch < 0 || a.microbatch >= M) {
        err(at(r, i, a) + ": microbatch " + std::to_string(a.microbatch) + " is out of range 0.." +
            std::to_string(M - 1));
        continue;
      }
      if (p.place.rank_of[a.virtual_stage] != r) {
        err(at(r, i, a) + ": virtual stage " + std::to_string(a.virtual_stage) + " lives on rank " +
            std::to_string(p.place.rank_of[a.virtual_stage]));
        continue;
      }
      position& first = where(a.op, a.virtual_stage, a.microbatch);
      if (first.rank >= 0)
        err(at(r, i, a) + ": listed twice (first at position " + std::to_string(first.index) + ")");
      else
        first = position{r, i};
    }
  }
  if (!rep.ok()) return rep;

  // Completeness: per (v, m) one F, and one B or one I plus one W.
  auto has = [&](op_kind op, int v, int m) { return where.has(op, v, m); };
  for (int v = 0; v < S; ++v) {
    for (int m = 0; m < M; ++m) {
      const std::string vm = std::to_string(v) + "." + std::to_string(m);
      const std::string owner = " (rank " + std::to_string(p.place.rank_of[v]) + ")";
      bool f = has(op_kind::forward, v, m), b = has(op_kind::backward, v, m);
      bool i = has(op_kind::input_grad, v, m), w = has(op_kind::weight_grad, v, m);
      if (!f) err("incomplete: F" + vm + " is missing" + owner);
      if (b && (i || w)) err("incomplete: B" + vm + " and a split backward (I/W) are both listed" + owner);
      else if (!b && !i && !w) err("incomplete: no backward for virtual stage " + std::to_string(v) + ", microbatch " +
                                   std::to_string(m) + ": needs B" + vm + " or I" + vm + " then W" + vm + owner);
      else if (i && !w) err("incomplete: I" + vm + " has no matching W" + vm + owner);
      else if (w && !i) err("incomplete: W" + vm + " has no matching I" + vm + owner);
    }
  }
  if (!rep.ok()) return rep;

  // Abstract run: a rank advances while its next action's dependencies are done.
  std::vector<size_t> next = walk_plan(p, [](int, const action&) {});
  auto producer = [&](const dependency& d) -> position {
    if (d.what == dependency::kind::forward) return where(op_kind::forward, d.virtual_stage, d.microbatch);
    if (where.has(op_kind::input_grad, d.virtual_stage, d.microbatch))
      return where(op_kind::input_grad, d.virtual_stage, d.microbatch);
    return where(op_kind::backward, d.virtual_stage, d.microbatch);
  };
  // Ranks run their lists in order, so an action is done iff its rank got past it.
  auto done = [&](const dependency& d) {
    position src = producer(d);
    return static_cast<size_t>(src.index) < next[src.rank];
  };
  std::string stuck;
  int waits = 0;  // listed up to 8 (a plan of 1000 ranks made one line of 80 KB)
  for (int r = 0; r < P; ++r) {
    if (next[r] >= p.ranks[r].size()) continue;
    const int at_index = static_cast<int>(next[r]);
    const action& a = p.ranks[r][at_index];
    dependency deps[2];
    int n = dependencies_of(a, S, deps);
    for (int k = 0; k < n; ++k) {
      if (done(deps[k])) continue;
      position src = producer(deps[k]);
      if (src.rank == r && src.index > at_index) {
        err("dependency order: " + at(r, at_index, a) + " needs " + dep_name(deps[k], where) + ", which rank " +
            std::to_string(r) + " runs later at position " + std::to_string(src.index));
        continue;
      }
      if (++waits > 8) continue;
      if (!stuck.empty()) stuck += "; ";
      stuck += at(r, at_index, a) + " waits for " + dep_name(deps[k], where) + " on rank " +
               std::to_string(src.rank) + ", position " + std::to_string(src.index);
    }
  }
  if (waits > 8) stuck += "; and " + std::to_string(waits - 8) + " more";
  if (!stuck.empty()) err("deadlock: no rank can proceed: " + stuck);
  if (!rep.ok()) return rep;

  // Memory: follows from each rank's own order alone.
  for (int r = 0; r < P; ++r) {
    int live = 0, peak = 0, pending = 0, peak_pending = 0;
    for (const action& a : p.ranks[r]) {
      if (a.op == op_kind::forward) peak = std::max(peak, ++live);
      if (produces_input_grad(a.op)) --live;
      if (a.op == op_kind::input_grad) peak_pending = std::max(peak_pending, ++pending);
      if (a.op == op_kind::weight_grad) --pending;
    }
    rep.peak_activations.push_back(peak);
    rep.peak_pending_weight_grads.push_back(peak_pending);
  }
  return rep;
}

validation_report require_valid(const plan& p) {
  auto rep = validate_plan(p);
  if (!rep.ok()) {
    std::string msg = "invalid schedule '" + p.name + "': ";
    for (size_t i = 0; i < rep.errors.size(); ++i) {
      if (i == 3) {
        msg += "; and " + std::to_string(rep.errors.size() - 3) + " more";
        break;
      }
      msg += (i ? "; " : "") + rep.errors[i];
    }
    throw std::invalid_argument(msg);
  }
  return rep;
}

}  // namespace actorpipe
