// The longest wait a flag may ask for. Timeouts become steady_clock durations (int64
// nanoseconds, ~292 years): 1e308 s overflowed, so --step-timeout 1e308 failed its first step
// at once. 1e9 s (~31 years) is "never" for any run.
#pragma once

namespace actorpipe {

constexpr double max_timeout_s = 1e9;

}  // namespace actorpipe
