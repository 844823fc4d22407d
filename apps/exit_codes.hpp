// What actorpipe's exit status says, for scripts and for launch's restarts.
#pragma once

namespace actorpipe {

// The run failed after it started (a lost process, a step timeout, a diverged loss, a file it
// could not write): a restart may get further. actorpipe doctor: a check failed.
constexpr int exit_failed = 1;
// The command was refused before anything ran: bad flags, config, input files or checkpoint
// (std::invalid_argument), or a job that cannot form (the master port taken; process 0 refused
// this process's job token or process index). A restart would be refused the same way, so launch does
// not restart a job that ends with it, and stops its other processes after 2 s. (CLI11's own
// parse errors exit with this code too.)
constexpr int exit_refused = 2;
// A signal ended it: 128 + the signal's number (130 for SIGINT, 143 for SIGTERM).

}  // namespace actorpipe
