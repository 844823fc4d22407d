// Test helpers for multi-process jobs: start the actorpipe binary with extra environment and
// its output in a file, wait with a deadline, find a free TCP port.
#pragma once

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace actorpipe::testing {

// A port nothing listens on right now, below the kernel's ephemeral range (32768-60999 by
// default): a port the kernel hands out could be taken again before the job binds it, by any
// socket of the tests running beside this one (UCX's and CAF's connections take them all the
// time). Random in 20000-32767, checked by binding it.
inline int free_port() {
  static std::mt19937 pick(static_cast<unsigned>(std::random_device{}()) ^ static_cast<unsigned>(getpid()));
  std::uniform_int_distribution<int> range(20000, 32767);
  for (int attempt = 0; attempt < 200; ++attempt) {
    const int port = range(pick);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons(static_cast<std::uint16_t>(port));
    const bool ok = bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
    close(fd);
    if (ok) return port;
  }
  throw std::runtime_error("free_port: no port in 20000-32767 could be bound");
}

// A socket listening on 127.0.0.1 at a port the kernel picks, with `backlog`; it never
// accepts. Closed with the object.
class loopback_listener {
 public:
  explicit loopback_listener(int backlog = 1) {
    fd_ = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t size = sizeof a;
    if (fd_ < 0 || bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || listen(fd_, backlog) != 0 ||
        getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &size) != 0)
      throw std::runtime_error("loopback_listener: cannot listen on 127.0.0.1");
    port_ = ntohs(a.sin_port);
  }
  ~loopback_listener() { close(fd_); }
  loopback_listener(const loopback_listener&) = delete;
  loopback_listener& operator=(const loopback_listener&) = delete;
  int port() const { return port_; }
  int fd() const { return fd_; }

 private:
  int fd_ = -1, port_ = 0;
};

// A TCP connection to 127.0.0.1:port, or -1.
inline int connect_loopback(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return -1;
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<std::uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0) return fd;
  close(fd);
  return -1;
}

// Starts `program args...` with `env` added to (and overriding) this process's environment;
// stdout and stderr go to `log`.
inline pid_t start_process(const std::string& program, const std::vector<std::string>& args,
                           const std::map<std::string, std::string>& env, const std::string& log) {
  pid_t pid = fork();
  if (pid < 0) throw std::runtime_error("fork failed");
  if (pid == 0) {
    for (const char* v : {"RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT", "ACTORPIPE_JOB_TOKEN",
                          "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", "OMPI_COMM_WORLD_RANK",
                          "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK"})
      unsetenv(v);
    for (auto& [k, v] : env) setenv(k.c_str(), v.c_str(), 1);
    int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(fd, 1);
    dup2(fd, 2);
    std::vector<char*> argv;
    argv.push_back(const_cast<char*>(program.c_str()));
    for (auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    execv(program.c_str(), argv.data());
    _exit(127);
  }
  return pid;
}

// Exit code (128 + signal when killed), or -1 if it ran past the deadline (it is then killed).
inline int wait_process(pid_t pid, double seconds) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (true) {
    int status = 0;
    pid_t r = waitpid(pid, &status, WNOHANG);
    if (r == pid) return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    if (std::chrono::steady_clock::now() > end) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      return -1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

inline std::string read_text(const std::string& path) {
  std::ifstream f(path);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

// A process's log for a failed check's message. A process that crashed has a report of it in
// its log (apps/crash_report; UCX's "Caught signal" where UCX's own report came instead); the
// report comes first, since a CI summary may show only the start of a long message.
inline std::string process_log(const std::string& path) {
  const std::string log = read_text(path);
  std::size_t from = log.find("actorpipe: crashed (");
  if (from == std::string::npos) from = log.find("Caught signal");
  if (from == std::string::npos) return log;
  const std::size_t start = log.rfind('\n', from) == std::string::npos ? 0 : log.rfind('\n', from) + 1;
  return "CRASHED:\n" + log.substr(start, 6000) + "\n--- the whole log ---\n" + log;
}

inline std::string read_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

// Waits until `path` contains `text` (true) or the deadline passes (false).
inline bool wait_for_text(const std::string& path, const std::string& text, double seconds) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (std::chrono::steady_clock::now() < end) {
    if (read_text(path).find(text) != std::string::npos) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return false;
}

// Waits up to `seconds` for `path` to exist; the seconds it took, or -1.
inline double wait_for_file(const std::string& path, double seconds) {
  const auto t0 = std::chrono::steady_clock::now();
  for (;;) {
    const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (std::filesystem::exists(path)) return took;
    if (took > seconds) return -1;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
}

}  // namespace actorpipe::testing
