// actorpipe's crash report (apps/crash_report): a crash says which signal, where and the
// crashing thread's frames, then ends the process by that signal; a fatal signal sent from
// outside is told as such, not as a bug.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <string>

#include "tests/apps/cli_runner.hpp"
#include "tests/apps/process_runner.hpp"

using namespace actorpipe::testing;

namespace {

const std::string check_bin = CRASH_REPORT_CHECK_BIN;

int frame_lines(const std::string& log) {
  int n = 0;
  for (std::size_t at = log.find("[0x"); at != std::string::npos; at = log.find("[0x", at + 1)) ++n;
  return n;
}

}  // namespace

CATCH_TEST_CASE("a crash names the signal, the address and the frames, then ends by that signal", "[crash]") {
  const std::string log = temp_path(".segv.log");
  CATCH_CHECK(wait_process(start_process(check_bin, {"segv"}, {}, log), 30) == 128 + SIGSEGV);
  const std::string text = read_text(log);
  CATCH_INFO(text);
  CATCH_CHECK(text.find("actorpipe: crashed (SIGSEGV: an invalid memory access at 0x0000000000000000). "
                        "The crashing thread's frames:\n") != std::string::npos);
  CATCH_CHECK(text.find("(main+") != std::string::npos);  // the executable's own functions are named
  CATCH_CHECK(frame_lines(text) >= 3);
  CATCH_CHECK(text.find("actorpipe: this is a bug: please report it with the command line and this output\n") !=
              std::string::npos);

  CATCH_CHECK(wait_process(start_process(check_bin, {"abort"}, {}, log), 30) == 128 + SIGABRT);
  CATCH_CHECK(read_text(log).find("actorpipe: crashed (SIGABRT: the process aborted). The crashing thread's frames:") !=
              std::string::npos);
}

CATCH_TEST_CASE("a fatal signal sent by another process is told as sent, not as a bug", "[crash]") {
  const std::string log = temp_path(".sent.log");
  const pid_t pid = start_process(check_bin, {"wait"}, {}, log);
  CATCH_REQUIRE(wait_for_text(log, "waiting", 30));
  kill(pid, SIGSEGV);
  CATCH_CHECK(wait_process(pid, 30) == 128 + SIGSEGV);
  const std::string text = read_text(log);
  CATCH_INFO(text);
  CATCH_CHECK(text.find("actorpipe: ended by SIGSEGV, sent by process " + std::to_string(getpid()) +
                        ". The thread it reached was here:\n") != std::string::npos);
  CATCH_CHECK(frame_lines(text) >= 3);
  CATCH_CHECK(text.find("this is a bug") == std::string::npos);
}
