// A process with actorpipe's crash report that crashes as told: `segv` writes through a null
// pointer, `abort` aborts, `wait` sleeps until a signal comes (a kill from outside).
#include <unistd.h>

#include <cstdlib>
#include <cstring>

#include "apps/crash_report.hpp"

int main(int argc, char** argv) {
  actorpipe::report_crashes();
  if (argc != 2) return 2;
  if (std::strcmp(argv[1], "segv") == 0) {
    volatile int* nowhere = nullptr;
    *nowhere = 1;
  } else if (std::strcmp(argv[1], "abort") == 0) {
    std::abort();
  } else if (std::strcmp(argv[1], "wait") == 0) {
    ::write(STDOUT_FILENO, "waiting\n", 8);
    for (int i = 0; i < 600; ++i) ::sleep(1);
  }
  return 3;
}
