// SIGPIPE ignored while a command runs, and put back as it was when it returns (a program that
// calls cli_main in-process keeps its own): a write to a pipe whose reader went away fails
// with EPIPE, and the command says its output was lost, instead of the process ending.
#pragma once

#include <signal.h>

namespace actorpipe {

class sigpipe_ignored {
 public:
  sigpipe_ignored() {
    struct sigaction ign {};
    ign.sa_handler = SIG_IGN;
    sigemptyset(&ign.sa_mask);
    sigaction(SIGPIPE, &ign, &old_);
  }
  ~sigpipe_ignored() { sigaction(SIGPIPE, &old_, nullptr); }
  sigpipe_ignored(const sigpipe_ignored&) = delete;
  sigpipe_ignored& operator=(const sigpipe_ignored&) = delete;

 private:
  struct sigaction old_ {};
};

}  // namespace actorpipe
