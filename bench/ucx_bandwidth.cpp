// Benchmark: bandwidth between two processes of actorpipe's raw UCX worker and of ucx_transport
// (tensors: frame + payload + a tensor from the receiving side's receive pool) against
// ucx_perftest (tag_bw) on the same sizes and UCX_TLS, in the same run. Target: transport >= 80%
// of ucx_perftest at >= 1 MiB. Each measurement runs `reps` times, interleaved (worker,
// transport, perftest per run), all runs of a size back to back (see schedule()); cells are
// "median (best)" in MiB/s (2^20 bytes, as ucx_perftest prints them), ratios "median of the
// per-run ratios (ratio of the bests)".
//
// Our endpoints ask for peer-failure detection (UCP_ERR_HANDLING_MODE_PEER), which changes what
// UCX may use (over tcp: no put/get-zcopy rendezvous lanes, as tcp memory cannot be
// invalidated), so the reference is ucx_perftest -e (same mode); plain ucx_perftest is shown
// beside it. With shm-only UCX_TLS UCX refuses that mode and both sides run without it.
//
//   UCX_TLS=tcp,self bench/ucx_bandwidth [reps=3] [min_pooled] [max_idle_mib]  (needs ucx_perftest: ucx-utils)
//   UCX_TLS=posix,sysv,cma,self bench/ucx_bandwidth                (shm: endpoints without peer-failure mode)
// The receiver's ucx_receive_pool_options: min_pooled = min_tensor_bytes (default 65536), or
// "off" for plain tensors throughout (an allocation per receive, as before the pool);
// max_idle_mib = max_idle_bytes in MiB (default 1024, twice what a round has in flight, as the
// runtime sizes its pool from the job). Every round has up to 512 MiB in flight
// (all its sends are posted at once), and the receiver takes a buffer per header as it
// arrives: with a smaller cap, part of every round gets buffers that are not in the pool.
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <ucp/api/ucp.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
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

#include "bench/bench_args.hpp"
#include "core/median.hpp"
#include "transport/ucx/ucx_transport.hpp"
#include "transport/ucx/ucx_worker.hpp"

using actorpipe::frame_limits;
using actorpipe::tensor_box;
using actorpipe::tensor_dtype;
using actorpipe::tensor_meta;
using actorpipe::transport::ucx_transport;
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

void write_byte(int fd) {
  const char c = 1;
  if (write(fd, &c, 1) != 1) std::exit(3);
}

void read_byte(int fd) {
  char c = 0;
  if (read(fd, &c, 1) != 1) std::exit(3);
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

enum class mode { worker, transport };

// Both processes walk the same list of rounds in lockstep (a ready byte on a pipe per round).
struct round {
  mode how;
  size_t size;
  int count;
  bool timed;
  size_t size_index;
  int rep;
};

std::vector<round> schedule(const std::vector<size_t>& sizes, int reps) {
  std::vector<round> rounds;
  // Warm-up: wire up both connections and touch both protocols (eager, rendezvous) once.
  for (mode how : {mode::worker, mode::transport}) {
    rounds.push_back({how, sizes.front(), 16, false, 0, -1});
    rounds.push_back({how, sizes.back(), 2, false, sizes.size() - 1, -1});
  }
  // Size by size, each size's runs back to back after an untimed transport round that fills the
  // receiver's pool: the steady state of a training run, which sends tensors of the same few
  // shapes every step. (Cycling through all sizes per run would need a pool of 3 GiB.)
  for (size_t s = 0; s < sizes.size(); ++s) {
    rounds.push_back({mode::transport, sizes[s], iterations_for(sizes[s]), false, s, -1});
    for (int rep = 0; rep < reps; ++rep)
      for (mode how : {mode::worker, mode::transport})
        rounds.push_back({how, sizes[s], iterations_for(sizes[s]), true, s, rep});
  }
  return rounds;
}

frame_limits bench_limits() {
  frame_limits l;
  l.max_bytes = std::uint64_t{1} << 32;
  return l;
}

tensor_meta bench_meta() { return tensor_meta{}; }  // process 0's activation, step 0, microbatch 0

tensor_box filled_tensor(size_t bytes, int value) {
  tensor_box t = tensor_box::empty(tensor_dtype::f32, {static_cast<std::int64_t>(bytes / 4)});
  std::memset(t.data(), value, bytes);
  return t;
}

// Receiving side: per round, posts the worker's receives (or arms the transport's counter),
// says ready, and acknowledges once everything arrived.
int child(int from_parent, int to_parent, const std::vector<round>& rounds, size_t max_size,
          actorpipe::transport::ucx_receive_pool_options pool) {
  ucx_worker w;
  ucx_transport t(1, 2, bench_limits(), pool);
  std::atomic<int> arrived{0}, target{-1};
  std::atomic<bool> failed{false};
  const tensor_box ack = filled_tensor(4, 1);
  latch* round_done = nullptr;
  t.set_handlers(
      [&](const tensor_meta&, tensor_box) {
        if (arrived.fetch_add(1) + 1 == target.load()) {
          t.send(0, bench_meta(), ack);
          round_done->done("");
        }
      },
      [&](int, const std::string& reason) {
        std::fprintf(stderr, "ucx_bandwidth (receiver): %s\n", reason.c_str());
        failed = true;
      });
  write_blob(to_parent, w.address());
  write_blob(to_parent, t.address());
  const int parent = w.connect(read_blob(from_parent));
  t.connect({read_blob(from_parent), {}});

  std::vector<std::uint8_t> buf(max_size);
  std::uint8_t ack_byte = 1;
  for (size_t r = 0; r < rounds.size(); ++r) {
    const round& rd = rounds[r];
    latch got(rd.how == mode::worker ? rd.count : 1);
    if (rd.how == mode::worker) {
      for (int i = 0; i < rd.count; ++i)
        w.receive((r << 32) | static_cast<std::uint64_t>(i), buf.data(), rd.size,
                  [&](std::string e, std::size_t) { got.done(e); });
    } else {
      round_done = &got;
      arrived = 0;
      target = rd.count;
    }
    write_byte(to_parent);
    if (!got.wait(120) || !got.error.empty() || failed) return 4;
    if (rd.how == mode::worker) {
      latch sent(1);
      w.send(parent, (r << 32) | 0xffffffffu, &ack_byte, 1, [&](std::string e) { sent.done(e); });
      if (!sent.wait(30) || !sent.error.empty()) return 5;
    } else {
      target = -1;
    }
  }
  read_byte(from_parent);  // stay up until the parent's last ack has arrived
  const actorpipe::transport::ucx_receive_pool_stats stats = t.receive_pool_stats();
  std::vector<std::uint8_t> pool_bytes(sizeof stats);
  std::memcpy(pool_bytes.data(), &stats, sizeof stats);
  write_blob(to_parent, pool_bytes);
  return 0;
}

// A TCP port on 127.0.0.1 free now, for ucx_perftest's own exchange: its default port (13337)
// collided with another run's server on a shared machine.
int free_tcp_port() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return 13337;
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t size = sizeof a;
  int port = 13337;
  if (bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 &&
      getsockname(fd, reinterpret_cast<sockaddr*>(&a), &size) == 0)
    port = ntohs(a.sin_port);
  close(fd);
  return port;
}

double perftest_mib_s(const std::string& tls, size_t size, int iterations, bool error_handling) {
  const std::string args = " -t tag_bw -s " + std::to_string(size) + " -n " + std::to_string(iterations) +
                           (error_handling ? " -e" : "") + " -p " + std::to_string(free_tcp_port());
  const std::string env = "UCX_TLS=" + tls + " timeout 120 ucx_perftest";
  const std::string server = env + args + " > /dev/null 2>&1 &";
  if (std::system(server.c_str()) != 0) return -1;
  usleep(500000);  // let the server listen
  const std::string client = env + " 127.0.0.1" + args + " 2>/dev/null";
  FILE* p = popen(client.c_str(), "r");
  if (!p) return -1;
  char line[512];
  double mib_s = -1;
  while (fgets(line, sizeof line, p)) {
    if (std::strncmp(line, "Final:", 6) != 0) continue;
    std::istringstream in(line + 6);
    double v[6] = {0};
    for (double& x : v) in >> x;
    mib_s = v[5];  // iterations, 50%ile, avg, overall latency, avg bw, overall bw (MiB/s)
  }
  pclose(p);
  usleep(200000);  // let the server exit before the next measurement
  return mib_s;
}

double best(const std::vector<double>& v) { return v.empty() ? -1 : *std::max_element(v.begin(), v.end()); }

std::string cell(const std::vector<double>& v) {
  if (v.empty() || best(v) <= 0) return "n/a";
  char text[64];
  std::snprintf(text, sizeof text, "%.0f (%.0f)", actorpipe::median(v, -1), best(v));
  return text;
}

// Median of the per-run ratios (runs are interleaved, so a slow spell hits both) and the ratio
// of the bests (interference only ever slows a run down).
std::string ratio(const std::vector<double>& ours, const std::vector<double>& ref) {
  std::vector<double> per_run;
  for (size_t i = 0; i < ours.size() && i < ref.size(); ++i)
    if (ref[i] > 0) per_run.push_back(ours[i] / ref[i]);
  if (per_run.empty()) return "-";
  char text[64];
  std::snprintf(text, sizeof text, "%.2f (%.2f)", actorpipe::median(per_run, -1), best(ours) / best(ref));
  return text;
}

}  // namespace

int main(int argc, char** argv) {
  const char* usage = "usage: [UCX_TLS=...] ucx_bandwidth [reps=3 (1-1000)] [min_pooled bytes, or off] [max_idle_mib]\n"
                      "  UCX bandwidth between two processes against ucx_perftest (ucx-utils) on 64 KiB-64 MiB\n";
  if (actorpipe::bench::asked_for_help(argc, argv)) {
    std::printf("%s", usage);
    return 0;
  }
  using actorpipe::bench::whole_number;
  // Each argument read whole (atoi made "--help" and "abc" one repetition, and ran).
  const long long reps = argc > 1 ? whole_number(argv[1], 1, 1000) : 3;
  const long long min_pooled =
      argc > 2 ? (std::string(argv[2]) == "off" ? 0 : whole_number(argv[2], 0, 1LL << 40)) : 65536;
  const long long max_idle_mib = argc > 3 ? whole_number(argv[3], 0, 1 << 20) : 1024;
  if (argc > 4 || reps < 0 || min_pooled < 0 || max_idle_mib < 0) {
    std::fprintf(stderr, "ucx_bandwidth: %s\n%s",
                 argc > 4             ? "at most three arguments"
                 : reps < 0           ? "reps must be a whole number from 1 to 1000"
                 : min_pooled < 0     ? "min_pooled must be a byte count or off"
                                      : "max_idle_mib must be a whole number of MiB",
                 usage);
    return 2;
  }
  actorpipe::transport::ucx_receive_pool_options pool;
  // The runtime's rule: keep twice the bytes a step has in flight (here 512 MiB per round).
  pool.max_idle_bytes = static_cast<size_t>(max_idle_mib) << 20;
  if (argc > 2)
    pool.min_tensor_bytes = std::string(argv[2]) == "off" ? SIZE_MAX : static_cast<size_t>(min_pooled);
  setenv("UCX_TLS", "tcp,self", 0);  // keep the caller's choice
  const std::string tls = std::getenv("UCX_TLS");
  const actorpipe::bench::load_watch load;
  const std::vector<size_t> sizes = {64u << 10, 256u << 10, 1u << 20, 4u << 20, 16u << 20, 64u << 20};
  const std::vector<round> rounds = schedule(sizes, static_cast<int>(reps));
  int to_child[2], from_child[2];
  if (pipe(to_child) || pipe(from_child)) return 2;
  const pid_t pid = fork();
  if (pid == 0) _exit(child(to_child[0], from_child[1], rounds, sizes.back(), pool));

  // [size][rep] -> MiB/s
  std::vector<std::vector<double>> worker_bw(sizes.size()), transport_bw(sizes.size());
  std::vector<std::vector<double>> perftest_bw(sizes.size()), perftest_plain_bw(sizes.size());
  bool shm_only_endpoints = false;
  actorpipe::transport::ucx_receive_pool_stats receiver_pool;
  {
    ucx_worker w;
    ucx_transport t(0, 2, bench_limits());
    latch* acked_round = nullptr;
    std::string failure;
    std::mutex failure_mutex;
    t.set_handlers([&](const tensor_meta&, tensor_box) { acked_round->done(""); },
                   [&](int, const std::string& reason) {
                     std::lock_guard<std::mutex> g(failure_mutex);
                     failure = reason;
                   });
    const auto child_worker = read_blob(from_child[0]);
    const auto child_transport = read_blob(from_child[0]);
    write_blob(to_child[1], w.address());
    write_blob(to_child[1], t.address());
    const int peer = w.connect(child_worker);
    t.connect({{}, child_transport});
    shm_only_endpoints = !w.detects_peer_failure(peer);

    std::vector<std::uint8_t> buf(sizes.back(), 7);
    std::vector<tensor_box> tensors;
    for (size_t s : sizes) tensors.push_back(filled_tensor(s, 7));
    std::uint8_t ack = 0;
    for (size_t r = 0; r < rounds.size(); ++r) {
      const round& rd = rounds[r];
      latch acked(1);
      latch sent(rd.how == mode::worker ? rd.count : 0);
      if (rd.how == mode::worker) {
        w.receive((r << 32) | 0xffffffffu, &ack, 1, [&](std::string e, std::size_t) { acked.done(e); });
      } else {
        acked_round = &acked;
      }
      read_byte(from_child[0]);  // the receiver is ready
      const auto t0 = std::chrono::steady_clock::now();
      if (rd.how == mode::worker) {
        for (int i = 0; i < rd.count; ++i)
          w.send(peer, (r << 32) | static_cast<std::uint64_t>(i), buf.data(), rd.size,
                 [&](std::string e) { sent.done(e); });
      } else {
        for (int i = 0; i < rd.count; ++i) t.send(1, bench_meta(), tensors[rd.size_index]);
      }
      const bool ok = acked.wait(120) && (rd.how == mode::transport || sent.wait(30));
      const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      std::string error = acked.error + sent.error;
      {
        std::lock_guard<std::mutex> g(failure_mutex);
        error += failure;
      }
      if (!ok || !error.empty()) {
        std::fprintf(stderr, "ucx_bandwidth: %s round of %zu-byte messages failed: %s\n",
                     rd.how == mode::worker ? "worker" : "transport", rd.size, ok ? error.c_str() : "timed out");
        kill(pid, SIGKILL);
        return 1;
      }
      if (!rd.timed) continue;
      const double mib_s = double(rd.count) * rd.size / secs / double(1 << 20);
      (rd.how == mode::worker ? worker_bw : transport_bw)[rd.size_index].push_back(mib_s);
      // Interleave ucx_perftest with our own measurements of the same size.
      if (rd.how == mode::transport) {
        perftest_bw[rd.size_index].push_back(perftest_mib_s(tls, rd.size, rd.count, !shm_only_endpoints));
        if (!shm_only_endpoints)
          perftest_plain_bw[rd.size_index].push_back(perftest_mib_s(tls, rd.size, rd.count, false));
      }
    }
    write_byte(to_child[1]);
    const auto pool_bytes = read_blob(from_child[0]);
    if (pool_bytes.size() == sizeof receiver_pool) std::memcpy(&receiver_pool, pool_bytes.data(), sizeof receiver_pool);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    std::fprintf(stderr, "ucx_bandwidth: the receiving process failed (status %d)\n", status);
    return 1;
  }
  const char* reference = shm_only_endpoints ? "ucx_perftest" : "ucx_perftest -e";
  std::printf("UCX %s; two processes on one host, UCX_TLS=%s, unidirectional, %lld interleaved runs; MiB/s as median "
              "(best)\n",
              ucp_get_version_string(), tls.c_str(), reps);
  if (pool.min_tensor_bytes == SIZE_MAX) {
    std::printf("receiver: plain tensors (receive pool off)\n");
  } else {
    std::printf("receiver: receive pool for payloads of %zu bytes and more, keeping up to %zu MiB idle\n",
                pool.min_tensor_bytes, pool.max_idle_bytes >> 20);
  }
  std::printf("endpoints: %s\n\n",
              shm_only_endpoints ? "without peer-failure detection (UCX refuses it for these transports)"
                                 : "with peer-failure detection (UCP_ERR_HANDLING_MODE_PEER)");
  std::printf("| size | worker | transport | %s | worker/ref | transport/ref |%s\n", reference,
              shm_only_endpoints ? "" : " ucx_perftest (no -e) | transport/no -e |");
  std::printf("|---|---|---|---|---|---|%s\n", shm_only_endpoints ? "" : "---|---|");
  for (size_t s = 0; s < sizes.size(); ++s) {
    const std::string label = sizes[s] >= (1u << 20) ? std::to_string(sizes[s] >> 20) + " MiB" : std::to_string(sizes[s] >> 10) + " KiB";
    std::printf("| %s | %s | %s | %s | %s | %s |", label.c_str(), cell(worker_bw[s]).c_str(), cell(transport_bw[s]).c_str(),
                cell(perftest_bw[s]).c_str(), ratio(worker_bw[s], perftest_bw[s]).c_str(),
                ratio(transport_bw[s], perftest_bw[s]).c_str());
    if (!shm_only_endpoints)
      std::printf(" %s | %s |", cell(perftest_plain_bw[s]).c_str(), ratio(transport_bw[s], perftest_plain_bw[s]).c_str());
    std::printf("\n");
  }
  std::printf("\nreceiver's pool: %llu receives into fresh buffers, %llu into reused ones, %llu unpooled; %llu freed\n",
              static_cast<unsigned long long>(receiver_pool.fresh), static_cast<unsigned long long>(receiver_pool.reused),
              static_cast<unsigned long long>(receiver_pool.unpooled), static_cast<unsigned long long>(receiver_pool.freed));
  if (best(perftest_bw[0]) <= 0) std::printf("\n(ucx_perftest not available: apt-get install ucx-utils)\n");
  load.say();
  return 0;
}
