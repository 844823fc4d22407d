// ASCII timeline of a simulated (or measured) run: one row per rank, time left to right.
#pragma once

#include <string>

#include "core/sim/simulator.hpp"

namespace actorpipe {

// Each action is drawn as its label ("F3" = forward of microbatch 3; with two chunks, chunk
// 1 in lower case, "f3"; with more, "F5.3" = virtual stage 5, microbatch 3) padded to its duration; '.' marks idle time. Rows wider than max_width are
// scaled down, and labels that no longer fit shrink to the op letter. Where actions shorter
// than a column then share cells (a send latency far above the costs), a line after the legend
// says how many are hidden and how long one column is.
std::string render_ascii_timeline(const sim_result& r, int max_width = 200);

}  // namespace actorpipe
