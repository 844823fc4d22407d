// actorpipe executable.
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <string>

#include "apps/cli.hpp"
#include "apps/crash_report.hpp"
#include "apps/train_command.hpp"
#include "core/blas_kernels.hpp"
#include "core/log.hpp"

// SIGHUP's disposition when the process began (apps/hangup_at_start.cpp, also before any
// library's initialiser; actorpipe_cli's target links it into this program).
extern "C" int actorpipe_hangup_at_start;

namespace {

// SIGHUP from the very start until main: held (blocked), its disposition recorded. While
// the libraries load, UCX puts a handler of its own on it (its debug signal) that took a
// hangup and lost it: the run went on to its end, exit 0. main puts the disposition back and
// lets a held hangup through. (Runs before any library's initialiser: .preinit_array.)
// SIGINT and SIGTERM are held too: LibTorch's static initialisers take ~0.3 s (more on a busy
// machine) before main, and train's stop handlers come after its setup; a Ctrl-C then killed
// the process outright (no message, "killed by signal" where 130 was promised). train lets
// them through once its handlers are in place (it ends at once, nothing trained), SIGHUP with
// them; every other command at the start of main, to their default actions.
void hold_hangup(int, char**, char**) {
  sigset_t held;
  sigemptyset(&held);
  sigaddset(&held, SIGHUP);
  sigaddset(&held, SIGINT);
  sigaddset(&held, SIGTERM);
  sigprocmask(SIG_BLOCK, &held, nullptr);
}
__attribute__((section(".preinit_array"), used)) void (*const hold)(int, char**, char**) = hold_hangup;

// `keep_held`: train, which lets it through with SIGINT and SIGTERM once its handlers are in
// place (a hangup while it set up killed it by the default action, without a word).
void release_hangup(bool keep_held) {
  struct sigaction back {};
  back.sa_handler = actorpipe_hangup_at_start == 1 ? SIG_IGN : SIG_DFL;  // nohup's SIG_IGN stays
  sigemptyset(&back.sa_mask);
  sigaction(SIGHUP, &back, nullptr);
  if (keep_held) return;
  sigset_t hup;
  sigemptyset(&hup);
  sigaddset(&hup, SIGHUP);
  sigprocmask(SIG_UNBLOCK, &hup, nullptr);  // a hangup held since the start ends the process now
}

}  // namespace

int main(int argc, char** argv) {
  const bool train = argc >= 2 && std::string(argv[1]) == "train";
  release_hangup(train);
  // The commands ignore SIGPIPE and SIGXFSZ while they run (a reader gone, or the file-size
  // limit, is an output lost: said, exit 1); so does this process to its end, where the last
  // flush may meet that pipe.
  signal(SIGPIPE, SIG_IGN);
  signal(SIGXFSZ, SIG_IGN);
  if (!train) actorpipe::release_stop_signals();
  else actorpipe::watch_held_stop_signals();
  actorpipe::report_crashes();
  actorpipe::ensure_best_blas_kernels(argv);  // the best BLAS kernels, before anything else (may restart once)
  const int code = actorpipe::cli_main(argc, argv, std::cout, std::cerr);
  // Everything the run wrote is flushed here, then the process ends without running static
  // destructors: an actor system left behind by a bounded shutdown (actors/pipeline_runtime.cpp)
  // still has threads running, which libraries' static teardown must not race with.
  std::cout.flush();
  std::cerr.flush();
  actorpipe::flush_log();
  std::fflush(nullptr);
  std::_Exit(code);
}
