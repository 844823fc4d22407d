// Entry point of the actorpipe command line, callable in-process (tests) or from main().
#pragma once

#include <iosfwd>

namespace actorpipe {

// Parses argv and runs the chosen subcommand. Returns the process exit code: 0 on success,
// non-zero with one "actorpipe: error: ..." line on err for any bad request.
int cli_main(int argc, const char* const* argv, std::ostream& out, std::ostream& err);

}  // namespace actorpipe
