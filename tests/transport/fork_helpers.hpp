// Helpers for the transport tests that fork: pipe I/O with deadlines (address exchange,
// go/ready bytes), waiting for a child with a deadline, and a scoped environment variable.
#pragma once

#include <poll.h>
#include <signal.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <string>
#include <thread>
#include <vector>

namespace actorpipe::testing {

// Blocking read of exactly n bytes; false on timeout, EOF or error.
inline bool read_exact(int fd, void* data, std::size_t n, int timeout_ms) {
  auto* out = static_cast<std::uint8_t*>(data);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  while (n > 0) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now()).count();
    if (left <= 0) return false;
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(left)) <= 0) continue;
    const ssize_t got = ::read(fd, out, n);
    if (got <= 0) return false;
    out += got;
    n -= static_cast<std::size_t>(got);
  }
  return true;
}

inline bool write_exact(int fd, const void* data, std::size_t n) {
  auto* in = static_cast<const std::uint8_t*>(data);
  while (n > 0) {
    const ssize_t put = ::write(fd, in, n);
    if (put <= 0) return false;
    in += put;
    n -= static_cast<std::size_t>(put);
  }
  return true;
}

inline bool write_blob(int fd, const std::vector<std::uint8_t>& blob) {
  const std::uint64_t n = blob.size();
  return write_exact(fd, &n, sizeof n) && write_exact(fd, blob.data(), blob.size());
}

inline std::optional<std::vector<std::uint8_t>> read_blob(int fd, int timeout_ms) {
  std::uint64_t n = 0;
  if (!read_exact(fd, &n, sizeof n, timeout_ms) || n > (1u << 20)) return std::nullopt;
  std::vector<std::uint8_t> blob(n);
  if (!read_exact(fd, blob.data(), blob.size(), timeout_ms)) return std::nullopt;
  return blob;
}

// Waits for a child with a deadline, SIGKILLing it on timeout. Returns the exit code or -1.
inline int wait_child(pid_t pid, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  int status = 0;
  for (;;) {
    const pid_t r = ::waitpid(pid, &status, WNOHANG);
    if (r == pid) return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    if (r < 0) return -1;
    if (std::chrono::steady_clock::now() > deadline) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      return -1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

// Restores an environment variable when the scope ends (test cases share one process).
class scoped_env {
 public:
  scoped_env(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    ::setenv(name, value, 1);
  }
  ~scoped_env() {
    if (old_)
      ::setenv(name_.c_str(), old_->c_str(), 1);
    else
      ::unsetenv(name_.c_str());
  }

 private:
  std::string name_;
  std::optional<std::string> old_;
};

}  // namespace actorpipe::testing
