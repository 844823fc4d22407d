// Placement: which rank (and which chunk slot on that rank) owns each virtual stage.
#pragma once

#include <string>
#include <vector>

namespace actorpipe {

struct placement {
  std::string kind;           // "loop", "v-shape" or "custom"
  int ranks = 0;              // P
  std::vector<int> rank_of;   // virtual stage -> rank
  std::vector<int> chunk_of;  // virtual stage -> chunk index on its rank (0-based)

  int num_virtual_stages() const { return static_cast<int>(rank_of.size()); }
  int chunks() const { return ranks > 0 ? num_virtual_stages() / ranks : 0; }
  // The virtual stages rank r owns, in increasing order (chunk order).
  std::vector<int> virtual_stages_of(int rank) const;
};

// Interleaved (Megatron): v = chunk * P + rank.
placement loop_placement(int ranks, int chunks);

// V-shape (ZB-V, DualPipeV): chunk 0 goes down the ranks, chunk 1 comes back up, and so on
// in a zig-zag for more chunks; the first and last virtual stages share rank 0.
placement v_shape_placement(int ranks, int chunks);

// From an explicit virtual stage -> rank map (as read from a plan file). chunk_of follows
// each rank's ascending virtual stages; kind is "loop" or "v-shape" when it matches one.
// Throws std::invalid_argument when ranks own different numbers of virtual stages or a
// rank owns none.
placement placement_from_ranks(int ranks, std::vector<int> rank_of);

}  // namespace actorpipe
