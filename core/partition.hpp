// Partition: which contiguous run of layers each virtual stage owns, either by an even count
// split (distribute_layers) or by a min-max split of per-layer costs (partition_by_cost).
#pragma once

#include <functional>
#include <string>
#include <vector>

namespace actorpipe {

// Half-open run of layers [start, end) owned by one virtual stage.
struct layer_range {
  int start = 0;
  int end = 0;

  int size() const { return end - start; }
  bool operator==(const layer_range& o) const { return start == o.start && end == o.end; }
  bool operator!=(const layer_range& o) const { return !(*this == o); }
};

// Layer counts for the K = stages*chunks virtual stages, in model order. Every stage gets
// q = num_layers / K layers; the rem = num_layers % K extra layers go to the middle positions
// K/2 - rem/2 .. K/2 - rem/2 + rem - 1 (Colossal-AI's rule: the ends also hold the embedding and
// the loss, so they get the lighter share). distribute_layers(10, 4) == {2, 3, 3, 2}.
// Throws std::invalid_argument for stages < 1, chunks < 1 or num_layers < K.
std::vector<int> distribute_layers(int num_layers, int stages, int chunks = 1);

// Cumulative ranges: counts {2, 3} -> {[0, 2), [2, 5)}. Throws for a count < 1.
std::vector<layer_range> layer_ranges(const std::vector<int>& counts);

// Cost of each layer, plus what the first and last virtual stage carry besides their layers
// (embedding; loss / LM head). The extra goes to whichever part holds layer 0 / the last layer.
struct layer_costs {
  std::vector<double> per_layer;
  double first_stage_extra = 0;
  double last_stage_extra = 0;
};

// Cost of the layers in `range` plus the extras the flags ask for. All of partition_by_cost's
// comparisons go through this same arithmetic (prefix sums in long double, the difference
// rounded to double, then the extras added), so "optimal" is exact with respect to it: a part's
// cost never grows when layers are dropped from either end.
// Throws std::invalid_argument for a range outside the layers.
double part_cost(const layer_costs& costs, layer_range range, bool is_first, bool is_last);

// Largest part_cost over a partition (parts in model order; the first holds the first extra,
// the last the last extra).
double max_part_cost(const layer_costs& costs, const std::vector<layer_range>& parts);

// Splits the layers into `parts` contiguous non-empty ranges whose heaviest part_cost is as
// small as possible (exactly: a bisection over the bit patterns of doubles with a greedy
// feasibility test, O(64 * L + parts * log L)).
//
// Tie-break among optimal splits, deterministic: boundaries are fixed from the left; each part
// takes, among the ends that keep the optimum reachable, the one whose cost is closest to an
// even share of what remains (remaining cost / remaining parts); on a tie, the shorter part.
//
// Throws std::invalid_argument for parts < 1, fewer layers than parts, or a negative or
// non-finite cost (naming the layer index and value, or the extra).
std::vector<layer_range> partition_by_cost(const layer_costs& costs, int parts);

// Costs proportional to parameter counts: per_layer[i] = params[i], the embedding on the first
// stage, the head on the last. Throws for a negative count.
layer_costs costs_from_parameter_counts(const std::vector<long long>& params, long long embedding_params,
                                        long long head_params);

// A model's layers over `stages * chunks` virtual stages, by a partition method:
//   uniform       equal layer counts, the remainder to the middle (distribute_layers)
//   parameters    balanced trainable parameter counts (partition_by_cost)
//   type:REGEX    equal counts of the layers whose name REGEX matches (ECMAScript, anywhere
//                 in the name; DeepSpeed's type:); any other layer goes with the matching
//                 layer before it, leading ones with the first
//   profile       balanced measured forward + backward time per layer
//   counts:A,B,.. exactly these layer counts, one per virtual stage
// parameter_counts and profile_costs (per layer) are called only by the methods that use
// them. Throws std::invalid_argument naming --partition and the value for an unknown method,
// a bad regex or counts, a regex that matches no layer or fewer layers than virtual stages,
// no layers, or more virtual stages than layers.
std::vector<layer_range> partition_layers(const std::string& method, const std::vector<std::string>& layer_names,
                                          int stages, int chunks,
                                          const std::function<std::vector<double>()>& parameter_counts = {},
                                          const std::function<std::vector<double>()>& profile_costs = {});

// "0: embed .. blocks.3 (5 layers) | 1: blocks.4 .. lm_head (6 layers)"
std::string describe_partition(const std::vector<layer_range>& parts, const std::vector<std::string>& layer_names);

}  // namespace actorpipe
