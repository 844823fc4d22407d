// Calling the code a user registers (a schedule's generator, a policy's factory) for the
// registries: what it throws is reported as a refusal of the request, before anything runs.
#pragma once

#include <exception>
#include <stdexcept>
#include <string>

namespace actorpipe {

// run(), its std::invalid_argument (a request it refuses, in its own words) passed on as it is,
// anything else thrown as std::invalid_argument "<failed>: <what it said>" ("schedule 'mine':
// its generator failed: ..."), whatever was thrown.
template <typename F>
auto refusing_what_throws(const std::string& failed, F&& run) -> decltype(run()) {
  try {
    return run();
  } catch (const std::invalid_argument&) {
    throw;
  } catch (const std::exception& e) {
    throw std::invalid_argument(failed + ": " + e.what());
  } catch (...) {
    throw std::invalid_argument(failed + ": an exception that is not a std::exception");
  }
}

}  // namespace actorpipe
