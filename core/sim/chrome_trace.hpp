// Chrome trace JSON (the Trace Event Format) of a timeline: opens in Perfetto or
// chrome://tracing. Simulated time units are written as milliseconds.
#pragma once

#include <string>
#include <vector>

#include "core/sim/simulator.hpp"

namespace actorpipe {

// One complete ("X") event per action on thread "rank r", with args virtual_stage,
// microbatch and op; otherData carries schedule, makespan and bubble_ratio.
// `title` names the trace's process in the viewer ("" = "actorpipe simulate <schedule>").
// `about`: more of otherData, as (key, value) text (train: which step of which run).
std::string render_chrome_trace(const sim_result& r, const std::string& title = "",
                                const std::vector<std::pair<std::string, std::string>>& about = {});

// A measured timeline (seconds) in milliseconds, so measured and simulated traces share a shape.
sim_result in_milliseconds(sim_result r);

// The actions of a Chrome trace written by render_chrome_trace (`actorpipe train --trace`,
// `actorpipe simulate --trace`): one event per "X" event, times in milliseconds (the trace's
// microseconds / 1000), rank from its thread, a B's input_grad_sent_at as output_at. `what`
// names the source in errors. Throws std::invalid_argument for text that is not JSON, a
// document without traceEvents, an "X" event whose cat is not an op or that lacks tid, ts,
// dur, args.virtual_stage or args.microbatch (naming the event), or one without any action.
std::vector<timeline_event> read_chrome_trace(const std::string& json_text, const std::string& what = "the trace");

}  // namespace actorpipe
