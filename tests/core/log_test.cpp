// core/log: level names and the bad-level error, the process prefix, level filtering on
// stderr, the log file (timestamped, appended, every level it is given while stderr keeps
// warnings) and lines that go to the file only.
#include <catch2/catch.hpp>

#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <regex>
#include <sstream>
#include <stdexcept>

#include "core/log.hpp"
#include "tests/apps/cli_runner.hpp"

using namespace actorpipe;
using Catch::Contains;

namespace {

std::string read_file(const std::string& path) {
  std::ifstream f(path);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

// What this process writes to stderr (fd 2) while it lives; the logging state is reset after.
class capture_stderr {
 public:
  capture_stderr() : path_(actorpipe::testing::temp_path(".stderr")) {
    std::fflush(stderr);
    saved_ = dup(STDERR_FILENO);
    const int fd = open(path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(fd, STDERR_FILENO);
    close(fd);
  }
  ~capture_stderr() {
    restore();
    reset_logging();
    std::remove(path_.c_str());
  }
  std::string text() {
    restore();
    return read_file(path_);
  }

 private:
  void restore() {
    if (saved_ < 0) return;
    std::fflush(stderr);
    dup2(saved_, STDERR_FILENO);
    close(saved_);
    saved_ = -1;
  }
  std::string path_;
  int saved_ = -1;
};

void log_every_level(const std::string& tag) {
  log_trace(tag + " trace line");
  log_debug(tag + " debug line");
  log_info(tag + " info line");
  log_warn(tag + " warn line");
  log_error(tag + " error line");
}

}  // namespace

CATCH_TEST_CASE("log levels parse by name, anything else is one error naming the option and the value", "[log]") {
  CATCH_CHECK(parse_log_level("trace") == log_level::trace);
  CATCH_CHECK(parse_log_level("debug") == log_level::debug);
  CATCH_CHECK(parse_log_level("info") == log_level::info);
  CATCH_CHECK(parse_log_level("warn") == log_level::warn);
  CATCH_CHECK(parse_log_level("error") == log_level::error);
  CATCH_CHECK(parse_log_level("off") == log_level::off);
  CATCH_CHECK(parse_log_level("DEBUG") == log_level::debug);  // ACTORPIPE_LOG_LEVEL=DEBUG was refused
  CATCH_CHECK(parse_log_level("Warn") == log_level::warn);
  for (const char* bad : {"verbose", "", "warning "}) {
    try {
      parse_log_level(bad);
      CATCH_FAIL("no error for '" << bad << "'");
    } catch (const std::invalid_argument& e) {
      CATCH_CHECK(std::string(e.what()) ==
                  "--log-level=" + std::string(bad) + " must be one of trace, debug, info, warn, error, off");
    }
  }
  CATCH_CHECK_THROWS_WITH(parse_log_level("loud", "ACTORPIPE_LOG_LEVEL"),
                          "ACTORPIPE_LOG_LEVEL=loud must be one of trace, debug, info, warn, error, off");
}

CATCH_TEST_CASE("the process prefix names the process and its ranks", "[log]") {
  CATCH_CHECK(process_prefix(1) == "[p1]");
  CATCH_CHECK(process_prefix(0, {0}) == "[p0 r0]");
  CATCH_CHECK(process_prefix(1, {2, 3}) == "[p1 r2-3]");
  CATCH_CHECK(process_prefix(2, {5, 2, 3, 7, 8, 9}) == "[p2 r2-3,5,7-9]");
}

CATCH_TEST_CASE("lines below the level are dropped, stderr lines read 'actorpipe: [level: ]text'", "[log]") {
  CATCH_SECTION("the defaults: info and above") {
    capture_stderr err;
    CATCH_CHECK(log_enabled(log_level::info));
    CATCH_CHECK_FALSE(log_enabled(log_level::debug));
    log_every_level("default");
    log_info("braces {} and {0} and 100% stay as they are");
    CATCH_CHECK(err.text() ==
                "actorpipe: default info line\n"
                "actorpipe: warning: default warn line\n"
                "actorpipe: error: default error line\n"
                "actorpipe: braces {} and {0} and 100% stay as they are\n");
  }
  CATCH_SECTION("trace: everything") {
    capture_stderr err;
    setup_logging({log_level::trace, ""});
    int built = 0;
    ACTORPIPE_LOG(trace, "lazy " + std::to_string(++built));
    log_every_level("all");
    CATCH_CHECK(built == 1);
    CATCH_CHECK(err.text() ==
                "actorpipe: trace: lazy 1\n"
                "actorpipe: trace: all trace line\n"
                "actorpipe: debug: all debug line\n"
                "actorpipe: all info line\n"
                "actorpipe: warning: all warn line\n"
                "actorpipe: error: all error line\n");
  }
  CATCH_SECTION("warn, error and off") {
    capture_stderr err;
    setup_logging({log_level::warn, ""});
    int built = 0;
    ACTORPIPE_LOG(info, "lazy " + std::to_string(++built));
    CATCH_CHECK(built == 0);  // the text of a dropped line is never built
    log_every_level("warn");
    setup_logging({log_level::error, ""});
    log_every_level("error");
    setup_logging({log_level::off, ""});
    log_every_level("off");
    CATCH_CHECK_FALSE(log_enabled(log_level::error));
    CATCH_CHECK(err.text() ==
                "actorpipe: warning: warn warn line\n"
                "actorpipe: error: warn error line\n"
                "actorpipe: error: error error line\n");
  }
}

// A file name with a newline in a log line ("saved checkpoint a<newline>b/step-...") split it,
// and under launch its second half was a line of its own with another prefix.
CATCH_TEST_CASE("a log line stays one line: its line breaks are written escaped", "[log]") {
  capture_stderr err;
  log_info("saved checkpoint a\nb/step-00000004");
  log_warn("--resume c\r\nd continues");
  CATCH_CHECK(err.text() == "actorpipe: saved checkpoint a\\x0ab/step-00000004\n"
                            "actorpipe: warning: --resume c\\x0d\\x0ad continues\n");
}

CATCH_TEST_CASE("every line of a process of a job carries its prefix", "[log]") {
  capture_stderr err;
  set_log_prefix(process_prefix(1));
  log_info("joining");
  CATCH_CHECK(log_prefix_text() == "[p1] ");
  set_log_prefix(process_prefix(1, {2, 3}));
  log_warn("ranks known");
  CATCH_CHECK(log_prefix_text() == "[p1 r2-3] ");
  set_log_prefix("");
  log_info("single process");
  CATCH_CHECK(log_prefix_text().empty());
  CATCH_CHECK(err.text() ==
              "[p1] actorpipe: joining\n"
              "[p1 r2-3] actorpipe: warning: ranks known\n"
              "actorpipe: single process\n");
}

CATCH_TEST_CASE("a log file gets every line at the level, timestamped, stderr keeps warnings and errors", "[log]") {
  const std::string path = actorpipe::testing::temp_path(".log");
  {
    std::ofstream earlier(path);
    earlier << "an earlier run\n";
  }
  capture_stderr err;
  setup_logging({log_level::debug, path});
  set_log_prefix(process_prefix(0, {0, 1}));
  log_every_level("filed");
  log_to_file(log_level::info, "[p1] a line that is on the terminal already");
  log_to_file(log_level::debug, "file-only debug");
  log_to_file(log_level::trace, "file-only trace: below the level");
  flush_log();
  const std::string file = read_file(path);
  CATCH_CHECK(err.text() ==
              "[p0 r0-1] actorpipe: warning: filed warn line\n"
              "[p0 r0-1] actorpipe: error: filed error line\n");
  CATCH_CAPTURE(file);
  const std::string stamp = R"(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3}[+-]\d\d:\d\d )";  // with its UTC offset
  const std::regex want("an earlier run\n" +                                       // appended, not truncated
                        stamp + R"(\[p0 r0-1\] debug: filed debug line\n)" +      //
                        stamp + R"(\[p0 r0-1\] info: filed info line\n)" +        //
                        stamp + R"(\[p0 r0-1\] warning: filed warn line\n)" +     //
                        stamp + R"(\[p0 r0-1\] error: filed error line\n)" +      //
                        stamp + R"(\[p0 r0-1\] info: \[p1\] a line that is on the terminal already\n)" +
                        stamp + R"(\[p0 r0-1\] debug: file-only debug\n)");
  CATCH_CHECK(std::regex_match(file, want));
  reset_logging();  // closes the file: later lines stay out of it
  log_to_file(log_level::error, "no file now");
  CATCH_CHECK(read_file(path) == file);
  std::remove(path.c_str());
}

CATCH_TEST_CASE("a log file that cannot be opened is one error naming --log-file", "[log]") {
  try {
    setup_logging({log_level::info, "/nonexistent-dir/actorpipe.log"});
    CATCH_FAIL("no error");
  } catch (const std::invalid_argument& e) {
    CATCH_CHECK(std::string(e.what()) ==
                "--log-file=/nonexistent-dir/actorpipe.log cannot be opened for appending: No such file or directory");
  }
  CATCH_CHECK(log_enabled(log_level::info));  // the logger is as it was
}
