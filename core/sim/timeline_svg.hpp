// SVG picture of a timeline: one lane per rank, a box per action coloured by op (and
// lighter for later chunks), the microbatch number inside, a time axis and a legend.
#pragma once

#include <string>

#include "core/sim/simulator.hpp"

namespace actorpipe {

std::string render_svg_timeline(const sim_result& r);

}  // namespace actorpipe
