// Benchmark: bandwidth of actorpipe's UCX worker between two processes against ucx_perftest
// (tag_bw) on the same sizes and transports, in the same run. Target: >= 80% of ucx_perftest
// at >= 1 MiB. The worker runs with peer-failure detection on, which needs tcp (UCX's shared
// memory transports refuse it), so both sides use UCX_TLS=tcp,self.
//
//   bench/ucx_bandwidth        (needs ucx_perftest: apt-get install ucx-utils)
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <sstream>
#include <string>
#include <vector>

#include "transport/ucx/ucx_worker.hpp"

using actorpipe::transport::ucx::ucx_worker;

namespace {

void write_blob(int fd, const std::vector<std::uint8_t>& b) {
  std::uint64_t n = b.size();
  if (write(fd, &n, sizeof n) != sizeof n || write(fd, b.data(), n) != static_cast<ssize_t>(n)) std::exit(3);
}

std::vector<std::uint8_t> read_blob(int fd) {
  std::uint64_t n = 0;
  if (read(fd, &n, sizeof n) != sizeof n) std::exit(3);
  std::vector<std::uint8_t> b(n);
  size_t got = 0;
  while (got < n) {
    ssize_t r = read(fd, b.data() + got, n - got);
    if (r <= 0) std::exit(3);
    got += static_cast<size_t>(r);
  }
  return b;
}

// Waits until `count` callbacks have fired.
struct latch {
  std::mutex mu;
  std::condition_variable cv;
  int left;
  std::string error;
  explicit latch(int n) : left(n) {}
  void done(const std::string& e) {
    std::lock_guard<std::mutex> g(mu);
    if (!e.empty() && error.empty()) error = e;
    if (--left == 0) cv.notify_all();
  }
  bool wait(double seconds) {
    std::unique_lock<std::mutex> g(mu);
    return cv.wait_for(g, std::chrono::duration<double>(seconds), [&] { return left == 0; });
  }
};

int iterations_for(size_t size) { return static_cast<int>(std::max<size_t>(8, (512u << 20) / size)); }

// Receiver: posts every receive of a size, then acknowledges with one byte.
int child(int from_parent, int to_parent, const std::vector<size_t>& sizes) {
  ucx_worker w;
  write_blob(to_parent, w.address());
  const int parent = w.connect(read_blob(from_parent));
  std::vector<std::uint8_t> buf(sizes.back());
  std::uint8_t ack = 1;
  for (size_t s = 0; s < sizes.size(); ++s) {
    const int n = iterations_for(sizes[s]);
    latch got(n);
    for (int i = 0; i < n; ++i)
      w.receive((s << 32) | static_cast<std::uint64_t>(i), buf.data(), sizes[s],
                [&](std::string e, std::size_t) { got.done(e); });
    if (!got.wait(120) || !got.error.empty()) return 4;
    latch sent(1);
    w.send(parent, (s << 32) | 0xffffffffu, &ack, 1, [&](std::string e) { sent.done(e); });
    if (!sent.wait(30)) return 5;
  }
  return 0;
}

double perftest_mb_s(size_t size, int iterations) {
  const std::string args = " -t tag_bw -s " + std::to_string(size) + " -n " + std::to_string(iterations);
  const std::string server = "UCX_TLS=tcp,self timeout 120 ucx_perftest" + args + " > /dev/null 2>&1 &";
  if (std::system(server.c_str()) != 0) return -1;
  usleep(500000);  // let the server listen
  const std::string client = "UCX_TLS=tcp,self timeout 120 ucx_perftest 127.0.0.1" + args + " 2>/dev/null";
  FILE* p = popen(client.c_str(), "r");
  if (!p) return -1;
  char line[512];
  double mb_s = -1;
  while (fgets(line, sizeof line, p)) {
    if (std::strncmp(line, "Final:", 6) != 0) continue;
    std::istringstream in(line + 6);
    double v[6] = {0};
    for (double& x : v) in >> x;
    mb_s = v[5];  // iterations, 50%ile, avg, overall latency, avg bw, overall bw
  }
  pclose(p);
  return mb_s;
}

}  // namespace

int main() {
  setenv("UCX_TLS", "tcp,self", 1);
  const std::vector<size_t> sizes = {64u << 10, 256u << 10, 1u << 20, 4u << 20, 16u << 20, 64u << 20};
  int to_child[2], from_child[2];
  if (pipe(to_child) || pipe(from_child)) return 2;
  const pid_t pid = fork();
  if (pid == 0) _exit(child(to_child[0], from_child[1], sizes));

  std::vector<double> ours(sizes.size());
  {
    ucx_worker w;
    write_blob(to_child[1], w.address());
    const int peer = w.connect(read_blob(from_child[0]));
    std::vector<std::uint8_t> buf(sizes.back(), 7);
    std::uint8_t ack = 0;
    for (size_t s = 0; s < sizes.size(); ++s) {
      const int n = iterations_for(sizes[s]);
      latch acked(1);
      w.receive((s << 32) | 0xffffffffu, &ack, 1, [&](std::string e, std::size_t) { acked.done(e); });
      latch sent(n);
      const auto t0 = std::chrono::steady_clock::now();
      for (int i = 0; i < n; ++i)
        w.send(peer, (s << 32) | static_cast<std::uint64_t>(i), buf.data(), sizes[s],
               [&](std::string e) { sent.done(e); });
      if (!acked.wait(120) || !sent.wait(30) || !acked.error.empty() || !sent.error.empty()) {
        std::fprintf(stderr, "ucx_bandwidth: transfer of %zu-byte messages failed: %s%s\n", sizes[s], acked.error.c_str(),
                     sent.error.c_str());
        kill(pid, SIGKILL);
        return 1;
      }
      const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      ours[s] = double(n) * sizes[s] / secs / 1e6;
    }
  }
  int status = 0;
  waitpid(pid, &status, 0);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    std::fprintf(stderr, "ucx_bandwidth: the receiving process failed (status %d)\n", status);
    return 1;
  }
  std::printf("two processes on loopback, UCX_TLS=tcp,self, unidirectional tagged messages\n\n");
  std::printf("| size | actorpipe MB/s | ucx_perftest MB/s | ratio |\n|---|---|---|---|\n");
  for (size_t s = 0; s < sizes.size(); ++s) {
    const double ref = perftest_mb_s(sizes[s], iterations_for(sizes[s]));
    if (ref > 0)
      std::printf("| %zu KiB | %.0f | %.0f | %.2f |\n", sizes[s] >> 10, ours[s], ref, ours[s] / ref);
    else
      std::printf("| %zu KiB | %.0f | (ucx_perftest not available) | - |\n", sizes[s] >> 10, ours[s]);
    std::fflush(stdout);
  }
  return 0;
}
