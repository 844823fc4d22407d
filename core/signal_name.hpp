// How signals appear in messages: "SIGINT", "SIGTERM", "SIGHUP", "SIGKILL", else "signal N" (launch's
// lines, and train's when a signal stops it).
#pragma once

#include <csignal>
#include <string>

namespace actorpipe {

inline std::string signal_name(int sig) {
  switch (sig) {
    case SIGINT: return "SIGINT";
    case SIGTERM: return "SIGTERM";
    case SIGHUP: return "SIGHUP";
    case SIGKILL: return "SIGKILL";
    default: return "signal " + std::to_string(sig);
  }
}

}  // namespace actorpipe
