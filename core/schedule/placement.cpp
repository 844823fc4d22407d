// Placement constructors and the inference used when a plan is read from text.
#include "core/schedule/placement.hpp"

#include <stdexcept>

namespace actorpipe {

std::vector<int> placement::virtual_stages_of(int rank) const {
  std::vector<int> out;
  // A loop's by its rule (every rank asking for its own scanned them all: minutes at 100000
  // ranks), where the map is the loop's.
  if (kind == "loop" && rank >= 0 && rank < ranks) {
    for (int v = rank; v < num_virtual_stages(); v += ranks)
      if (rank_of[v] == rank) out.push_back(v);
    if (static_cast<int>(out.size()) == chunks()) return out;
    out.clear();
  }
  for (int v = 0; v < num_virtual_stages(); ++v)
    if (rank_of[v] == rank) out.push_back(v);
  return out;
}

placement loop_placement(int ranks, int chunks) {
  placement p;
  p.kind = "loop";
  p.ranks = ranks;
  for (int c = 0; c < chunks; ++c)
    for (int r = 0; r < ranks; ++r) {
      p.rank_of.push_back(r);
      p.chunk_of.push_back(c);
    }
  return p;
}

placement v_shape_placement(int ranks, int chunks) {
  placement p;
  p.kind = "v-shape";
  p.ranks = ranks;
  for (int c = 0; c < chunks; ++c)
    for (int i = 0; i < ranks; ++i) {
      p.rank_of.push_back(c % 2 == 0 ? i : ranks - 1 - i);
      p.chunk_of.push_back(c);
    }
  return p;
}

placement placement_from_ranks(int ranks, std::vector<int> rank_of) {
  placement p;
  p.kind = "custom";
  p.ranks = ranks;
  p.rank_of = std::move(rank_of);
  p.chunk_of.assign(p.rank_of.size(), -1);
  int per_rank = -1;
  for (int r = 0; r < ranks; ++r) {
    auto mine = p.virtual_stages_of(r);
    if (mine.empty())
      throw std::invalid_argument("rank " + std::to_string(r) + " owns no virtual stage");
    if (per_rank >= 0 && static_cast<int>(mine.size()) != per_rank)
      throw std::invalid_argument("rank " + std::to_string(r) + " owns " + std::to_string(mine.size()) +
                                  (mine.size() == 1 ? " virtual stage" : " virtual stages") + " but rank 0 owns " +
                                  std::to_string(per_rank) + ": every rank must own the same number of chunks");
    per_rank = static_cast<int>(mine.size());
    for (int c = 0; c < per_rank; ++c) p.chunk_of[mine[c]] = c;
  }
  const int chunks = per_rank;
  if (p.rank_of == loop_placement(ranks, chunks).rank_of)
    p.kind = "loop";
  else if (p.rank_of == v_shape_placement(ranks, chunks).rank_of)
    p.kind = "v-shape";
  return p;
}

}  // namespace actorpipe
