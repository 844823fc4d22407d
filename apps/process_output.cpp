// launch's processes' output, forwarded line by line with a process prefix (see the header).
#include "apps/process_output.hpp"


#include <fcntl.h>
#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <ostream>
#include <string>
#include <stdexcept>

namespace actorpipe {
process_output::process_output(options o, std::ostream& log) : o_(o), log_(log) {}

process_output::~process_output() {
  for (auto& s : streams_) {
    if (s.fd >= 0) close(s.fd);
    if (s.write_fd >= 0) close(s.write_fd);
  }
}

process_output::child_ends process_output::add(int process) {
  child_ends ends;
  for (bool is_err : {false, true}) {
    int p[2];
    if (pipe2(p, O_CLOEXEC) != 0)
      throw std::runtime_error("cannot make a pipe for the output of process " + std::to_string(process) + ": " +
                               std::strerror(errno));
    fcntl(p[0], F_SETFL, fcntl(p[0], F_GETFL) | O_NONBLOCK);
    stream s;
    s.fd = p[0];
    s.write_fd = p[1];
    s.process = process;
    s.is_err = is_err;
    streams_.push_back(std::move(s));
    (is_err ? ends.err : ends.out) = p[1];
  }
  return ends;
}

void process_output::opened() {
  for (auto& s : streams_)
    if (s.write_fd >= 0) close(s.write_fd), s.write_fd = -1;
}

bool process_output::pump(int timeout_ms, int also_fd) {
  std::vector<pollfd> fds;
  std::vector<stream*> of;
  for (auto& s : streams_)
    if (s.fd >= 0) fds.push_back({s.fd, POLLIN, 0}), of.push_back(&s);
  if (also_fd >= 0) fds.push_back({also_fd, POLLIN, 0});
  const int n = poll(fds.data(), fds.size(), std::max(timeout_ms, 0));
  if (n <= 0) return false;  // timeout, or EINTR: the caller loops
  for (size_t i = 0; i < of.size(); ++i)
    if (fds[i].revents != 0) read_ready(*of[i]);
  return also_fd >= 0 && (fds.back().revents & POLLIN) != 0;
}

void process_output::drain(int process) {
  for (auto& s : streams_)
    if (s.process == process && s.fd >= 0) read_ready(s);
}

void process_output::finish(int wait_ms) {
  using clock = std::chrono::steady_clock;
  const auto until = clock::now() + std::chrono::milliseconds(wait_ms);
  for (;;) {
    const bool open = std::any_of(streams_.begin(), streams_.end(), [](const stream& s) { return s.fd >= 0; });
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - clock::now()).count();
    if (!open || left <= 0) break;
    pump(static_cast<int>(left), -1);
  }
  for (auto& s : streams_)
    if (s.fd >= 0) {
      read_ready(s);  // what is there now; a process's child may keep writing, but launch is done
      close_stream(s);
    }
}

void process_output::own_line(log_level level, const std::string& text) {
  if (!log_enabled(level)) return;
  const bool redraw = progress_shown_;
  clear_progress();
  log_ << text << '\n';
  log_.flush();
  if (redraw) redraw_progress();
  log_to_file(level, text);
}

void process_output::read_ready(stream& s) {
  char buf[64 * 1024];
  for (;;) {
    const ssize_t n = read(s.fd, buf, sizeof buf);
    if (n > 0) {
      consume(s, buf, static_cast<size_t>(n));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
    close_stream(s);  // end of file: every writer is gone (or a read error: the same to us)
    return;
  }
}

void process_output::close_stream(stream& s) {
  if (s.fd < 0) return;
  close(s.fd);
  s.fd = -1;
  // A line the process did not end (it died mid-line, or its last line had no newline).
  if (!s.partial.empty()) emit_line(s, s.partial);
  s.partial.clear();
  s.in_progress = false;
}

void process_output::consume(stream& s, const char* data, std::size_t size) {
  const bool redraws = o_.terminal && s.is_err;
  for (std::size_t i = 0; i < size; ++i) {
    const char c = data[i];
    if (c == '\n') {
      // The final state of a progress line stays, as a line; "text\r\n" already went out at '\r'.
      if (!(s.in_progress && s.partial.empty())) emit_line(s, s.partial);
      s.partial.clear();
      s.in_progress = false;
    } else if (c == '\r' && redraws) {
      if (!s.in_progress && !s.partial.empty()) emit_line(s, s.partial);  // text before a '\r' is a line
      s.partial.clear();
      s.in_progress = true;
    } else {
      s.partial += c;
      if (s.partial.size() >= o_.max_line) {  // no newline in sight: pass it on in pieces
        emit_line(s, s.partial);
        s.partial.clear();
      }
    }
  }
  if (s.in_progress && !s.partial.empty()) show_progress(s, s.partial);
}

std::string process_output::prefixed(int process, const std::string& text) const {
  // A process of a job prefixes its own log lines with "[pN ranks]": no second prefix then.
  const std::string own = "[p" + std::to_string(process);
  if (text.compare(0, own.size(), own) == 0 && text.size() > own.size() &&
      (text[own.size()] == ']' || text[own.size()] == ' '))
    return text;
  return own + "] " + text;
}

void process_output::emit_line(stream& s, const std::string& text) {
  const std::string line = prefixed(s.process, text);
  // The end of this stream's own progress line: its final state stays, as this line.
  const bool ends_progress = progress_owner_ == &s && s.in_progress;
  const bool redraw = progress_shown_ && !ends_progress;
  clear_progress();
  if (ends_progress) progress_.clear(), progress_owner_ = nullptr;
  write_all(s.is_err ? o_.err_fd : o_.out_fd, line + "\n");
  if (redraw) redraw_progress();
  log_passed_on(line);
}

void process_output::show_progress(stream& s, const std::string& text) {
  progress_ = prefixed(s.process, text);
  progress_owner_ = &s;
  redraw_progress();
}

void process_output::clear_progress() {
  if (!progress_shown_) return;
  write_all(o_.err_fd, progress_erase(drawn_));
  progress_shown_ = false;
}

void process_output::redraw_progress() {
  if (progress_.empty()) return;
  write_all(o_.err_fd, progress_redraw(o_.err_fd, progress_, drawn_));
  progress_shown_ = true;
}

void process_output::write_all(int fd, const std::string& bytes) {
  if (std::find(dead_fds_.begin(), dead_fds_.end(), fd) != dead_fds_.end()) return;
  std::size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = write(fd, bytes.data() + done, bytes.size() - done);
    if (n > 0) {
      done += static_cast<std::size_t>(n);
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      pollfd p{fd, POLLOUT, 0};  // a non-blocking output (inherited that way): wait until it drains
      poll(&p, 1, 100);
    } else {
      // A reader gone (EPIPE, `| head`) loses the report as a full disk does: train alone exits 1
      // for it, and so does launch (it exited 0).
      if (n < 0 && lost_.empty())
        lost_ = std::string(fd == o_.out_fd ? "standard output" : "standard error") + ": " + std::strerror(errno);
      dead_fds_.push_back(fd);  // closed (EPIPE) or broken: the lines for it are dropped
      return;
    }
  }
}

}  // namespace actorpipe
