// The built-in schedule generators. Each checks its own constraints and throws
// std::invalid_argument naming the parameter and the value.
#pragma once

#include "core/schedule/schedule_registry.hpp"

namespace actorpipe {

plan make_gpipe(const schedule_request& r);        // gpipe.cpp
plan make_one_f_one_b(const schedule_request& r);  // one_f_one_b.cpp
plan make_interleaved(const schedule_request& r);  // interleaved.cpp
plan make_zb_h1(const schedule_request& r);        // zero_bubble.cpp
plan make_zbv(const schedule_request& r);          // zero_bubble.cpp
plan make_dualpipev(const schedule_request& r);    // dualpipev.cpp

// "name needs microbatches >= stages: got microbatches=2, stages=4"
[[noreturn]] void reject_request(const std::string& schedule, const std::string& rule, const schedule_request& r);

}  // namespace actorpipe
