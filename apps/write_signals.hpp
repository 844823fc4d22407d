// SIGPIPE and SIGXFSZ ignored while a command runs, and put back as they were when it returns
// (a program that calls cli_main in-process keeps its own): a write to a pipe whose reader went
// away fails with EPIPE, and one past the file-size limit (ulimit -f) with EFBIG, and the
// command says its output was lost, instead of the process ending without a word (141, 153).
#pragma once

#include <signal.h>

namespace actorpipe {

class write_signals_ignored {
 public:
  write_signals_ignored() {
    struct sigaction ign {};
    ign.sa_handler = SIG_IGN;
    sigemptyset(&ign.sa_mask);
    sigaction(SIGPIPE, &ign, &old_pipe_);
    sigaction(SIGXFSZ, &ign, &old_size_);
  }
  ~write_signals_ignored() {
    sigaction(SIGPIPE, &old_pipe_, nullptr);
    sigaction(SIGXFSZ, &old_size_, nullptr);
  }
  write_signals_ignored(const write_signals_ignored&) = delete;
  write_signals_ignored& operator=(const write_signals_ignored&) = delete;

 private:
  struct sigaction old_pipe_ {};
  struct sigaction old_size_ {};
};

}  // namespace actorpipe
