// What `actorpipe launch` does with its processes' output: each process writes into two pipes
// (stdout, stderr), and launch copies them to its own stdout and stderr a whole line at a
// time, each line prefixed with the process index ("[p1] "), so the lines of several processes
// never tear into each other and each says where it came from. Single-threaded: launch's watch
// loop calls pump() in place of sleeping.
//
// A line that already starts with its process ("[p1 r2-3] actorpipe: ..." from a process's own
// log) keeps just that prefix. A line longer than max_line is passed on in pieces, each a
// line; a process that dies mid-line gets that line ended for it. With `terminal` (launch's
// stderr is a terminal) a process may redraw a progress line with '\r' as on a terminal of its
// own: launch shows the latest one on the last row and prints every other line above it.
#pragma once

#include <cstddef>
#include <iosfwd>
#include <string>
#include <vector>

#include "core/log.hpp"

namespace actorpipe {

class process_output {
 public:
  struct options {
    int out_fd = 1, err_fd = 2;         // where the lines go
    bool terminal = false;              // err_fd is a terminal: '\r' redraws a progress line
    std::size_t max_line = 64 * 1024;  // longer lines are cut into lines of this many bytes
  };
  // `log` receives launch's own lines (own_line).
  process_output(options o, std::ostream& log);
  ~process_output();  // closes every pipe
  process_output(const process_output&) = delete;
  process_output& operator=(const process_output&) = delete;

  // Before the fork of process `process`: its two pipes. The child dup2()s the returned write
  // ends onto 1 and 2 (they are close-on-exec; the dup2 copies are not); opened() closes the
  // parent's copies once every process is started.
  struct child_ends {
    int out = -1, err = -1;
  };
  child_ends add(int process);
  void opened();

  // Waits up to timeout_ms for output or for `also_fd` (e.g. a signalfd) to become readable,
  // forwards every whole line that arrived; true when also_fd is readable.
  bool pump(int timeout_ms, int also_fd);
  // Forwards whatever process `process` has written so far, without waiting (call when it has
  // exited, before saying so: its last lines come first).
  void drain(int process);
  // Every process has exited: forwards what is left, waiting up to wait_ms for pipes a
  // process's own children still hold, then ends unfinished lines.
  void finish(int wait_ms);

  // One line of launch itself (no newline in `text`), at `level`: to `log` when the level is
  // on (below any progress line), and to the log file.
  void own_line(log_level level, const std::string& text);

  // Why the processes' lines could not all be written ("standard output: No space left on
  // device"), or "": a reader that went away (EPIPE, `| head`) is no failure.
  const std::string& lost() const { return lost_; }

 private:
  struct stream {
    int fd = -1, write_fd = -1;
    int process = 0;
    bool is_err = false;
    bool in_progress = false;  // since the last '\n' a '\r' came: the text is a progress line
    std::string partial;
  };
  void read_ready(stream& s);
  void close_stream(stream& s);
  void consume(stream& s, const char* data, std::size_t size);
  void emit_line(stream& s, const std::string& text);
  void show_progress(stream& s, const std::string& text);
  std::string prefixed(int process, const std::string& text) const;
  void write_all(int fd, const std::string& bytes);
  void clear_progress();
  void redraw_progress();

  options o_;
  std::ostream& log_;
  std::vector<stream> streams_;
  bool progress_shown_ = false;
  std::size_t drawn_ = 0;  // the progress line's length as drawn
  std::string progress_;  // the shown progress line, prefixed
  const stream* progress_owner_ = nullptr;  // whose it is (streams_ does not grow once pumping)
  std::vector<int> dead_fds_;  // outputs that failed (EPIPE): written to no more
  std::string lost_;           // the first failure other than a closed pipe, in words
};

}  // namespace actorpipe
