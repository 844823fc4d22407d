// Chrome trace JSON (the Trace Event Format) of a timeline: opens in Perfetto or
// chrome://tracing. Simulated time units are written as milliseconds.
#pragma once

#include <string>

#include "core/sim/simulator.hpp"

namespace actorpipe {

// One complete ("X") event per action on thread "rank r", with args virtual_stage,
// microbatch and op; otherData carries schedule, makespan and bubble_ratio.
std::string render_chrome_trace(const sim_result& r);

}  // namespace actorpipe
