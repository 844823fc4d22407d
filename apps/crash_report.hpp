// What a crashing actorpipe process says before it goes, on standard error: the signal, the
// faulting address, and the crashing thread's frames. Then the signal takes its default course
// (a core dump where allowed; exit status 128 + the signal).
#pragma once

namespace actorpipe {

// Installs the report for SIGSEGV, SIGBUS, SIGILL, SIGFPE and SIGABRT. Call once, early in
// main. Where UCX is used it installs its own report for the first four when a context is made
// (its "Caught signal" backtrace), which then comes instead.
void report_crashes();

}  // namespace actorpipe
