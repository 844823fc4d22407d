// The "actorpipe" spdlog logger behind core/log.hpp. The logger object never changes (other
// threads may log at any time); setup swaps the sinks inside a dist_sink, which locks, and
// re-sets each sink's formatter, which locks too.
#include "core/log.hpp"
#include "core/std_streams.hpp"
#include "core/text_file.hpp"

#include <spdlog/pattern_formatter.h>
#include <spdlog/sinks/basic_file_sink.h>
#include <spdlog/sinks/dist_sink.h>
#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>

#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cstring>
#include <cctype>
#include <mutex>
#include <stdexcept>

namespace actorpipe {
namespace {

const char* const kLevelNames[] = {"trace", "debug", "info", "warn", "error", "off"};

spdlog::level::level_enum to_spdlog(log_level l) {
  switch (l) {
    case log_level::trace: return spdlog::level::trace;
    case log_level::debug: return spdlog::level::debug;
    case log_level::info: return spdlog::level::info;
    case log_level::warn: return spdlog::level::warn;
    case log_level::error: return spdlog::level::err;
    case log_level::off: break;
  }
  return spdlog::level::off;
}

// %* in the terminal pattern: nothing for info (the common line reads "actorpipe: process 1
// joined"), else the level as compilers write it ("warning: ", "error: ").
class level_label final : public spdlog::custom_flag_formatter {
 public:
  void format(const spdlog::details::log_msg& msg, const std::tm&, spdlog::memory_buf_t& dest) override {
    const char* text = "";
    switch (msg.level) {
      case spdlog::level::trace: text = "trace: "; break;
      case spdlog::level::debug: text = "debug: "; break;
      case spdlog::level::warn: text = "warning: "; break;
      case spdlog::level::err:
      case spdlog::level::critical: text = "error: "; break;
      default: break;
    }
    dest.append(text, text + std::strlen(text));
  }
  std::unique_ptr<custom_flag_formatter> clone() const override { return std::make_unique<level_label>(); }
};

std::string pattern_literal(const std::string& s) {
  std::string out;
  for (char c : s) out += c == '%' ? std::string("%%") : std::string(1, c);
  return out;
}

// A line the terminal shows in the making (train's progress line, redrawn in place): the next
// log line to stderr ends it first, instead of being written on after it.
std::atomic<bool> terminal_line_open{false};

class terminal_sink final : public spdlog::sinks::stderr_sink_mt {
 public:
  void log(const spdlog::details::log_msg& msg) override {
    end_terminal_line();
    spdlog::sinks::stderr_sink_mt::log(msg);
  }
};

struct log_state {
  std::mutex mutex;  // setup and prefix changes (logging itself does not take it)
  std::shared_ptr<spdlog::sinks::dist_sink_mt> all = std::make_shared<spdlog::sinks::dist_sink_mt>();
  std::shared_ptr<spdlog::sinks::dist_sink_mt> file_only = std::make_shared<spdlog::sinks::dist_sink_mt>();
  std::shared_ptr<spdlog::sinks::sink> console = std::make_shared<terminal_sink>();
  std::shared_ptr<spdlog::sinks::sink> file;
  std::shared_ptr<spdlog::logger> logger = std::make_shared<spdlog::logger>("actorpipe", all);
  std::shared_ptr<spdlog::logger> file_logger = std::make_shared<spdlog::logger>("actorpipe.file", file_only);
  // Lines passed on from other processes (launch's): into the file whatever this process's level.
  std::shared_ptr<spdlog::logger> passed_logger = std::make_shared<spdlog::logger>("actorpipe.passed", file_only);
  std::string prefix;

  log_state() {
    apply_patterns();
    all->set_sinks({console});
    logger->set_level(spdlog::level::info);
    file_logger->set_level(spdlog::level::info);
    // Every line reaches the file at once, in one write: processes of a job may share a file.
    logger->flush_on(spdlog::level::trace);
    file_logger->flush_on(spdlog::level::trace);
    passed_logger->set_level(spdlog::level::trace);
    passed_logger->flush_on(spdlog::level::trace);
    try {
      spdlog::register_logger(logger);  // spdlog::get("actorpipe") finds it
      spdlog::set_default_logger(logger);
    } catch (const spdlog::spdlog_ex&) {
      // A program of its own registered the name first: ours still works, unregistered.
    }
  }

  // Caller holds the mutex (or is the constructor).
  void apply_patterns() {
    const std::string p = prefix.empty() ? "" : pattern_literal(prefix) + " ";
    auto terminal = std::make_unique<spdlog::pattern_formatter>();
    terminal->add_flag<level_label>('*').set_pattern(p + "actorpipe: %*%v");
    console->set_formatter(std::move(terminal));
    // Local time with its offset from UTC: the lines of a job's nodes in other zones (or one
    // of a run that crossed a clock change) compare, where the bare local time did not.
    if (file) file->set_formatter(std::make_unique<spdlog::pattern_formatter>("%Y-%m-%d %H:%M:%S.%e%z " + p + "%l: %v"));
  }
};

log_state& state() {
  static log_state s;
  return s;
}

}  // namespace

void set_terminal_line_open(bool open) { terminal_line_open.store(open); }

namespace {
bool dumb_terminal() {
  const char* term = std::getenv("TERM");
  return term != nullptr && std::string(term) == "dumb";
}
}  // namespace

std::string progress_redraw(int fd, std::string line, std::size_t& drawn) {
  struct winsize size {};
  if (::isatty(fd) && ::ioctl(fd, TIOCGWINSZ, &size) == 0 && size.ws_col > 8 && line.size() >= size.ws_col)
    line.resize(size.ws_col - 1);
  const std::size_t left = line.size() < drawn ? drawn - line.size() : 0;  // of the line before
  drawn = line.size();
  return dumb_terminal() ? "\r" + line + std::string(left, ' ') : "\r\033[K" + line;
}

std::string progress_erase(std::size_t drawn) {
  return dumb_terminal() ? "\r" + std::string(drawn, ' ') + "\r" : std::string("\r\033[K");
}

void end_terminal_line() {
  if (terminal_line_open.exchange(false)) std::fputs("\n", stderr);
}

log_level parse_log_level(const std::string& text, const std::string& source) {
  std::string lower = text;  // DEBUG is debug (spdlog's SPDLOG_LEVEL takes either)
  for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  for (int i = 0; i < 6; ++i)
    if (lower == kLevelNames[i]) return static_cast<log_level>(i);
  throw std::invalid_argument(source + "=" + text + " must be one of trace, debug, info, warn, error, off");
}

const char* log_level_name(log_level level) { return kLevelNames[static_cast<int>(level)]; }

namespace {
// The first failure to write --log-file (a full disk): said once on stderr, naming the flag
// (spdlog printed "[*** LOG ERROR #0001 ***] ..." again and again), and kept for the exit.
std::mutex failure_mutex;
std::string file_failure;  // guarded by failure_mutex
std::string file_path;     // guarded by failure_mutex

void on_log_error(const std::string& what) {
  std::string said;
  {
    std::lock_guard<std::mutex> lock(failure_mutex);
    // Without a file the lines go to stderr alone: one that takes no more is not a failure
    // of the run (its report says whether stdout took it).
    if (!file_failure.empty() || file_path.empty()) return;
    file_failure = "cannot write --log-file '" + file_path + "' (" + what + "): log lines from there on are lost";
    said = file_failure;
  }
  end_terminal_line();
  std::fprintf(stderr, "actorpipe: error: %s\n", said.c_str());
}
}  // namespace

std::string log_file_failure() {
  std::lock_guard<std::mutex> lock(failure_mutex);
  return file_failure;
}

void setup_logging(const log_options& o) {
  auto& s = state();
  {
    std::lock_guard<std::mutex> lock(failure_mutex);
    file_failure.clear();
    file_path = o.file;
  }
  s.logger->set_error_handler(on_log_error);
  s.file_logger->set_error_handler(on_log_error);
  s.passed_logger->set_error_handler(on_log_error);
  std::shared_ptr<spdlog::sinks::sink> file;
  if (!o.file.empty()) {
    // Checked here for a message that names the option (spdlog's own names only the path).
    std::FILE* f = std::fopen(o.file.c_str(), "ab");
    if (!f) throw std::invalid_argument("--log-file=" + o.file + " cannot be opened for appending: " + std::strerror(errno));
    // /dev/stdout where standard output is a file: the log's lines and the report each
    // overwrote the other.
    struct stat log_stat {};
    const char* stream = ::fstat(fileno(f), &log_stat) == 0 ? std_stream_writing(log_stat) : nullptr;
    std::fclose(f);
    if (stream)
      throw std::invalid_argument("--log-file=" + o.file + " is this process's " + stream +
                                  ", a file: written apart, each would overwrite the other; give another file");
    try {
      file = std::make_shared<spdlog::sinks::basic_file_sink_mt>(o.file, false);
    } catch (const spdlog::spdlog_ex& e) {
      throw std::invalid_argument("--log-file=" + o.file + " cannot be opened for appending: " + e.what());
    }
  }
  std::lock_guard<std::mutex> lock(s.mutex);
  const auto level = to_spdlog(o.level);
  s.file = file;
  s.apply_patterns();
  // With a file the terminal keeps warnings and errors only; the file gets every line.
  s.console->set_level(file ? std::max(level, spdlog::level::warn) : spdlog::level::trace);
  s.all->set_sinks(file ? std::vector<spdlog::sink_ptr>{s.console, file} : std::vector<spdlog::sink_ptr>{s.console});
  s.file_only->set_sinks(file ? std::vector<spdlog::sink_ptr>{file} : std::vector<spdlog::sink_ptr>{});
  s.logger->set_level(level);
  s.file_logger->set_level(level);
}

void reset_logging() {
  auto& s = state();
  {
    std::lock_guard<std::mutex> lock(s.mutex);
    s.prefix.clear();
  }
  setup_logging({});
}

std::string process_prefix(int process, const std::vector<int>& ranks) {
  std::vector<int> r = ranks;
  std::sort(r.begin(), r.end());
  r.erase(std::unique(r.begin(), r.end()), r.end());
  std::string text = "[p" + std::to_string(process);
  for (size_t i = 0; i < r.size();) {
    size_t j = i;
    while (j + 1 < r.size() && r[j + 1] == r[j] + 1) ++j;
    text += (i == 0 ? " r" : ",") + std::to_string(r[i]) + (j > i ? "-" + std::to_string(r[j]) : "");
    i = j + 1;
  }
  return text + "]";
}

void set_log_prefix(const std::string& prefix) {
  auto& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  s.prefix = prefix;
  s.apply_patterns();
}

std::string log_prefix_text() {
  auto& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  return s.prefix.empty() ? "" : s.prefix + " ";
}

bool log_enabled(log_level level) { return level != log_level::off && state().logger->should_log(to_spdlog(level)); }

namespace {
// A log line is one line: a line break in what it quotes (a file name given with a newline) is
// written as \x0a (under launch the rest became a line of its own, with another prefix).
std::string one_line(const std::string& text) {
  if (text.find_first_of("\n\r") == std::string::npos) return text;
  std::string out;
  out.reserve(text.size() + 8);
  for (const char c : text) {
    if (c == '\n' || c == '\r') append_hex_escape(out, static_cast<unsigned char>(c));
    else out += c;
  }
  return out;
}
}  // namespace

void log_message(log_level level, const std::string& text) {
  if (level == log_level::off) return;
  const std::string line = one_line(text);
  state().logger->log(spdlog::source_loc{}, to_spdlog(level), spdlog::string_view_t(line));
}

void log_to_file(log_level level, const std::string& text) {
  if (level == log_level::off) return;
  const std::string line = one_line(text);
  state().file_logger->log(spdlog::source_loc{}, to_spdlog(level), spdlog::string_view_t(line));
}

namespace {
// A terminal's control sequences (ESC [ ... a letter: a progress line's "erase to its end"),
// which a log file shows as raw bytes.
std::string without_escapes(const std::string& text) {
  std::string out;
  out.reserve(text.size());
  for (std::size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '\033' && i + 1 < text.size() && text[i + 1] == '[') {
      std::size_t j = i + 2;
      while (j < text.size() && !(text[j] >= '@' && text[j] <= '~')) ++j;
      i = j;  // past its final byte
      continue;
    }
    out += text[i];
  }
  return out;
}

// train's progress line ("[p0] step 12/500 [###.....] loss ..."), after launch's prefix: one a
// step, which train's own --log-file leaves out too.
bool is_progress_line(const std::string& text) {
  std::size_t at = 0;
  if (!text.empty() && text[0] == '[') {
    at = text.find("] ");
    if (at == std::string::npos) return false;
    at += 2;
  }
  if (text.compare(at, 5, "step ") != 0) return false;
  std::size_t i = at + 5, digits = 0;
  while (i < text.size() && std::isdigit(static_cast<unsigned char>(text[i]))) ++i, ++digits;
  if (digits == 0 || i >= text.size() || text[i] != '/') return false;
  ++i;
  for (digits = 0; i < text.size() && std::isdigit(static_cast<unsigned char>(text[i])); ++i) ++digits;
  return digits > 0 && text.compare(i, 2, " [") == 0;
}
}  // namespace

void log_passed_on(const std::string& raw) {
  const std::string text = without_escapes(raw);
  if (is_progress_line(text)) return;
  // What was only a terminal's control sequence ("[p1] " and the end of a progress line).
  if (text.size() != raw.size() && text.find_first_not_of(' ', text[0] == '[' ? text.find("] ") + 2 : 0) == std::string::npos)
    return;
  // Its level as the process logged it ("[p1 r1] actorpipe train: error: ..."), for the stamp.
  const log_level level = text.find(": error: ") != std::string::npos     ? log_level::error
                          : text.find(": warning: ") != std::string::npos ? log_level::warn
                          : text.find(": debug: ") != std::string::npos   ? log_level::debug
                          : text.find(": trace: ") != std::string::npos   ? log_level::trace
                                                                          : log_level::info;
  state().passed_logger->log(spdlog::source_loc{}, to_spdlog(level), spdlog::string_view_t(text));
}

void flush_log() {
  state().logger->flush();
  state().file_logger->flush();
}

}  // namespace actorpipe
