// actorpipe's log: one named spdlog logger, "actorpipe", that every library and command writes
// through. Lines go to stderr, and with a log file to that file too; in a multi-process job
// each line names its process and ranks ("[p1 r2-3] actorpipe: ..."). No spdlog in this
// header, so including it costs nothing; core/log.cpp owns the logger.
//
// Before setup_logging the logger already works with the defaults (info and above on stderr,
// no prefix): code that runs at the very top of main may log.
#pragma once

#include <string>
#include <vector>

namespace actorpipe {

enum class log_level { trace, debug, info, warn, error, off };

// "trace", "debug", "info", "warn", "error" or "off". Throws std::invalid_argument naming
// `source` (the option or variable it came from) and the value:
// "--log-level=verbose must be one of trace, debug, info, warn, error, off".
log_level parse_log_level(const std::string& text, const std::string& source = "--log-level");
const char* log_level_name(log_level level);

struct log_options {
  log_level level = log_level::info;
  // Empty: stderr only. Else every line at `level` and above is appended to this file (with a
  // timestamp and its level), and stderr keeps only warnings and errors.
  std::string file;
};

// (Re)makes the logger from `options`. Throws std::invalid_argument naming --log-file when the
// file cannot be opened for appending.
void setup_logging(const log_options& options);
// Back to the defaults (info on stderr, no file, no prefix); closes the file.
void reset_logging();

// "[p1 r2-3]": process 1 of a job, hosting pipeline ranks 2 and 3 ("r2" for one rank, "r2,5"
// when they are not contiguous; "[p1]" while its ranks are not known yet).
std::string process_prefix(int process, const std::vector<int>& ranks = {});
// Puts `prefix` (e.g. process_prefix(...); "" for none) in front of every line from now on.
void set_log_prefix(const std::string& prefix);
// The prefix and one space ("[p1 r2-3] "), or "" when there is none: for the few lines a
// command writes itself (its final error line) so they read like the log's.
std::string log_prefix_text();

// A line on stderr is being drawn in place ('\r', no newline yet: train's progress on a
// terminal) when `open`: the next log line to stderr ends it first instead of being glued on.
// The drawer sets it after each redraw and clears it once it ends the line itself.
void set_terminal_line_open(bool open);
// A progress line redrawn in place on the terminal at `fd` (train's, launch's): the bytes that
// draw `line` over the one drawn before (`drawn`: its length, updated). Cut to the terminal's
// width ("\r" goes back over one row only: a wrapped line left a row behind at every redraw);
// the row cleared by an escape, or by spaces on a dumb terminal (TERM=dumb: Emacs' shell).
std::string progress_redraw(int fd, std::string line, std::size_t& drawn);
// The bytes that erase it and go back to the row's start.
std::string progress_erase(std::size_t drawn);
// Ends that line (a newline on stderr) if it is open: for a line written to stderr directly.
void end_terminal_line();

bool log_enabled(log_level level);
void log_message(log_level level, const std::string& text);
// Only to the log file (nothing when there is none), if `level` passes: for output that is
// already on the terminal another way (actorpipe launch copies its processes' lines there).
void log_to_file(log_level level, const std::string& text);
// Only to the log file, whatever this process's level: a line another process wrote (launch
// passes its processes' lines on; they filtered them by their own --log-level), stamped with
// the level its text says ("...: error: ...", "...: warning: ...", else info). Without a
// terminal's control sequences, and without train's progress lines (one a step).
void log_passed_on(const std::string& text);
void flush_log();
// Why --log-file could not be written, from the first failure on (said once on stderr when it
// happened); "" while every line went in. A command ends with exit 1 when it is not "".
std::string log_file_failure();

inline void log_trace(const std::string& text) { log_message(log_level::trace, text); }
inline void log_debug(const std::string& text) { log_message(log_level::debug, text); }
inline void log_info(const std::string& text) { log_message(log_level::info, text); }
inline void log_warn(const std::string& text) { log_message(log_level::warn, text); }
inline void log_error(const std::string& text) { log_message(log_level::error, text); }

}  // namespace actorpipe

// Builds the text only when the level is on (for lines in hot paths, e.g. per step):
// ACTORPIPE_LOG(debug, "step " + std::to_string(k) + " done").
#define ACTORPIPE_LOG(level, text)                                                   \
  do {                                                                               \
    if (::actorpipe::log_enabled(::actorpipe::log_level::level))                     \
      ::actorpipe::log_message(::actorpipe::log_level::level, (text));               \
  } while (false)
