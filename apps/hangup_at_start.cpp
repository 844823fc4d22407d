// SIGHUP's disposition when the process began, recorded before any library's initialiser runs
// (.preinit_array): UCX installs a handler of its own for SIGHUP when it loads (its debug
// signal), over the SIG_IGN of nohup, so a run could not tell the two apart and a hangup was
// swallowed. train reads it (train_command.cpp) to make a hangup a stop request like SIGTERM, or
// to leave nohup's SIG_IGN alone.
//
// Its own object, pulled into programs only: a shared library may hold no .preinit_array (the
// linker refuses it: a plugin's initialisers run long after the program began). actorpipe_cli's
// CMake target asks for it (-Wl,--undefined=actorpipe_hangup_at_start) where it is linked into
// an executable; train_command.cpp refers to it weakly, and where it is missing (a shared
// library, a program linked without that flag) the disposition at start is not known: -1.
#include <csignal>

extern "C" {
// 1: ignored at start (nohup: stays so), 0: not (a hangup is a stop request), -1: not recorded.
int actorpipe_hangup_at_start = -1;
}

namespace {
void record_hangup_at_start(int, char**, char**) {
  struct sigaction now {};
  if (sigaction(SIGHUP, nullptr, &now) == 0) actorpipe_hangup_at_start = now.sa_handler == SIG_IGN ? 1 : 0;
}
__attribute__((section(".preinit_array"), used)) void (*const record_hangup)(int, char**, char**) = record_hangup_at_start;
}  // namespace
