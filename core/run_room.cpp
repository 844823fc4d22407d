#include "core/run_room.hpp"

#include <pthread.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/resource.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <mutex>
#include <stdexcept>
#include <utility>
#include <vector>

#include "core/blas_kernels.hpp"
#include "core/number_text.hpp"
#include "core/proc_files.hpp"

namespace actorpipe {

std::size_t usable_cpus() {
  cpu_set_t allowed;
  CPU_ZERO(&allowed);
  if (sched_getaffinity(0, sizeof allowed, &allowed) == 0) return static_cast<std::size_t>(CPU_COUNT(&allowed));
  return std::thread::hardware_concurrency();
}
namespace {

std::string mib_text(double bytes) { return std::to_string(static_cast<long long>(bytes / (1024 * 1024))) + " MiB"; }

// vm.overcommit_memory=2: every writable private map is charged against CommitLimit.
bool strict_overcommit() { return first_line("/proc/sys/vm/overcommit_memory") == "2"; }

// What Debian's OpenBLAS maps for each thread a product runs on (blas_thread_buffers).
constexpr std::size_t openblas_buffer_bytes = std::size_t{128} << 20;

struct parking {
  std::mutex mutex;
  std::condition_variable released;
  bool go = false;
};

void* park(void* arg) {
  auto* p = static_cast<parking*>(arg);
  std::unique_lock<std::mutex> lock(p->mutex);
  p->released.wait(lock, [p] { return p->go; });
  return nullptr;
}

// "ulimit -v 6000000 KiB, ulimit -u 4096, vm.max_map_count 65530, kernel.threads-max 192735,
// each thread's stack 8192 KiB (ulimit -s)": the limits a thread's start can meet (the ulimits
// where finite).
std::string limits_text() {
  std::string out;
  auto add = [&out](const std::string& s) { out += (out.empty() ? "" : ", ") + s; };
  rlimit l{};
  if (getrlimit(RLIMIT_AS, &l) == 0 && l.rlim_cur != RLIM_INFINITY)
    add("ulimit -v " + std::to_string(l.rlim_cur / 1024) + " KiB");
  if (getrlimit(RLIMIT_NPROC, &l) == 0 && l.rlim_cur != RLIM_INFINITY) add("ulimit -u " + std::to_string(l.rlim_cur));
  // The kernel's: every thread's stack is two maps (the stack and its guard page).
  for (const char* file : {"/proc/sys/vm/max_map_count", "/proc/sys/kernel/threads-max"}) {
    const std::string value = first_line(file);
    std::string name = file + 10;  // the sysctl: vm.max_map_count
    std::replace(name.begin(), name.end(), '/', '.');
    if (!value.empty()) add(name + " " + value);
  }
  // Strict overcommit: every writable private map (a stack, a BLAS buffer) is charged against
  // a commit limit, whatever the ulimits say.
  if (strict_overcommit()) {
    const double limit = meminfo_bytes("CommitLimit"), committed = meminfo_bytes("Committed_AS");
    add("vm.overcommit_memory 2 (every thread's stack and buffer is charged): CommitLimit " + mib_text(limit) + ", " +
        mib_text(committed) + " of it committed");
  }
  pthread_attr_t attr;
  if (pthread_getattr_default_np(&attr) == 0) {
    std::size_t stack = 0;
    if (pthread_attr_getstacksize(&attr, &stack) == 0 && stack > 0)
      add("each thread's stack " + std::to_string(stack / 1024) + " KiB (ulimit -s)");
    pthread_attr_destroy(&attr);
  }
  return out;
}

}  // namespace

thread_room probe_thread_room(int wanted, std::size_t reserve_bytes) {
  thread_room room;
  // Mapped as OpenBLAS maps its buffers (private, writable, in 128 MiB pieces), so that the
  // kernel charges them where it counts commitments (vm.overcommit_memory=2) as well as against
  // ulimit -v; never touched, so they take no memory.
  constexpr std::size_t piece = openblas_buffer_bytes;
  std::vector<std::pair<void*, std::size_t>> reserve;
  auto give_back = [&reserve] {
    for (const auto& [at, bytes] : reserve) munmap(at, bytes);
  };
  reserve.reserve(reserve_bytes / piece + 1);
  for (std::size_t left = reserve_bytes; left > 0;) {
    const std::size_t bytes = std::min(left, piece);
    void* at = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (at == MAP_FAILED) {
      room.failure = std::string("mmap: ") + std::strerror(errno);
      give_back();
      return room;
    }
    reserve.emplace_back(at, bytes);
    left -= bytes;
  }
  room.reserved = true;
  parking p;
  std::vector<pthread_t> threads;
  pthread_t stray{};  // started, but no room left to list it
  bool has_stray = false;
  for (int i = 0; i < wanted; ++i) {
    pthread_t t;
    const int rc = pthread_create(&t, nullptr, park, &p);
    if (rc != 0) {
      room.failure = std::string("pthread_create: ") + std::strerror(rc);
      break;
    }
    try {
      threads.push_back(t);
    } catch (const std::bad_alloc&) {
      stray = t;
      has_stray = true;
      room.failure = "out of memory";
      break;
    }
  }
  {
    std::lock_guard<std::mutex> lock(p.mutex);
    p.go = true;
  }
  p.released.notify_all();
  for (pthread_t t : threads) pthread_join(t, nullptr);
  if (has_stray) pthread_join(stray, nullptr);
  give_back();
  room.started = static_cast<int>(threads.size());
  return room;
}

int compute_threads_needed(int ranks, int threads, int extra_teams) {
  if (threads <= 1 || ranks < 1) return 0;
  const long long teams = static_cast<long long>(ranks) + 1 + std::max(0, extra_teams);
  return static_cast<int>(std::min<long long>(INT_MAX, teams * (threads - 1LL)));
}

std::size_t blas_thread_buffers(int ranks, int threads) {
  if (threads <= 1 || ranks < 1) return 0;
  const blas_info blas = current_blas();
  if (!blas.openblas) return 0;
  int max_threads = 64;
  if (const auto at = blas.config.find("MAX_THREADS="); at != std::string::npos)
    max_threads = std::max(1, std::atoi(blas.config.c_str() + at + 12));
  const std::size_t buffers = static_cast<std::size_t>(std::min(threads, max_threads)) + 2 * static_cast<std::size_t>(ranks);
  return buffers * openblas_buffer_bytes;
}

void require_thread_room(int ranks, int threads, int extra_teams) {
  const int needed = compute_threads_needed(ranks, threads, extra_teams);
  if (needed == 0) return;
  const std::size_t buffers = blas_thread_buffers(ranks, threads);
  const thread_room room = probe_thread_room(needed, buffers);
  if (room.reserved && room.started >= needed) return;
  const std::string limits = limits_text();
  const std::string buffers_text =
      buffers ? ", and OpenBLAS maps " + std::to_string(buffers >> 20) + " MiB of buffers for them" : "";
  const std::string could = room.reserved ? "this process could start " + std::to_string(room.started) + " of them"
                                          : "this process has no room for those buffers";
  throw std::invalid_argument("--threads-per-stage " + std::to_string(threads) + ": " + std::to_string(ranks) +
                              (ranks == 1 ? " rank" : " ranks") + " in this process need " + std::to_string(needed) +
                              " threads besides their own (" + std::to_string(threads - 1) +
                              " for each rank's OpenMP team and for LibTorch's shared pool)" + buffers_text + "; " +
                              could + " (" + room.failure + (limits.empty() ? "" : "; limits: " + limits) +
                              "): lower --threads-per-stage, or raise the limit");
}

double memory_and_swap_bytes() {
  const double machine = meminfo_bytes("MemTotal") + meminfo_bytes("SwapTotal");
  const double cgroup = cgroup_bytes("memory.max");
  if (cgroup <= 0) return machine;
  const double cgroup_and_swap = cgroup + cgroup_bytes("memory.swap.max");
  return machine <= 0 || cgroup_and_swap < machine ? cgroup_and_swap : machine;
}

double address_space_left_bytes() {
  rlimit l{};
  if (getrlimit(RLIMIT_AS, &l) != 0 || l.rlim_cur == RLIM_INFINITY) return 0;
  const double in_use = std::atof(proc_value("/proc/self/status", "VmSize").c_str()) * 1024;  // "123456 kB"
  return std::max(1.0, static_cast<double>(l.rlim_cur) - in_use);
}

void require_memory_room(double bytes, const std::string& what, const std::string& how, const std::string& advice) {
  double room = memory_and_swap_bytes();
  std::string room_text = "this machine's " + gib_text(room) + " of memory and swap";
  // Under strict overcommit an allocation past the commit limit fails, whatever memory is free.
  if (const double commit = meminfo_bytes("CommitLimit");
      commit > 0 && (room <= 0 || commit < room) && strict_overcommit())
    room = commit, room_text = "the " + gib_text(commit) + " this machine may commit (CommitLimit; vm.overcommit_memory 2)";
  // And past this process's address-space limit.
  if (const double left = address_space_left_bytes(); left > 0 && (room <= 0 || left < room)) {
    rlimit l{};
    getrlimit(RLIMIT_AS, &l);
    room = left, room_text = "the " + gib_text(left) + " this process may still map (ulimit -v " +
                             std::to_string(l.rlim_cur / 1024) + " KiB)";
  }
  if (room <= 0 || bytes <= room) return;
  throw std::invalid_argument(what + " needs at least " + fixed_text(bytes / 1e9, 1) + " GB (" + how + "), more than " +
                              room_text + ": " + advice);
}

void require_model_memory(const std::string& shape, double parameters, int stages, int ranks_here, int microbatch_size,
                          double seq_len, double hidden, double heads, int blocks_kept, double inner) {
  stages = std::max(1, stages);
  ranks_here = std::max(1, ranks_here);
  const double batch = std::max(1, microbatch_size);
  const double blocks = std::max(1, blocks_kept);
  const double activations = 4 * batch * seq_len * blocks * (4 * hidden + std::max(0.0, inner) + std::max(1.0, heads) * seq_len);
  require_memory_room(ranks_here * (8 * parameters / stages + activations),
                      shape + " (" + (parameters >= 1e7 ? fixed_text(parameters / 1e9, 2) + " billion" : fixed_text(parameters / 1e3, 1) + "k") +
                          " parameters) on " + std::to_string(stages) +
                          (stages == 1 ? " stage" : " stages") + ", " + std::to_string(ranks_here) +
                          (ranks_here == 1 ? " rank" : " ranks") + " in this process" +
                          // Data-parallel replicas (--dp 20000, a typo): named, as what to lower.
                          (ranks_here > stages ? " (stages x --dp " + std::to_string(ranks_here / stages) + " replicas)" : "") +
                          ", microbatch size " + std::to_string(microbatch_size),
                      "each rank's share of the values and gradients at 8 bytes a parameter, and what one microbatch "
                      "keeps for the backward of its blocks: q, k, v, the attention's output, the MLP's units and the "
                      "[B, heads, seq-len, seq-len] attention",
                      ranks_here > stages ? "lower those or --dp, or spread the ranks over more processes and machines "
                                            "(actorpipe launch)"
                                          : "lower those, or spread the stages over more processes and machines "
                                            "(--stages, actorpipe launch)");
}

}  // namespace actorpipe
