// The room checks: threads for --threads-per-stage (counted as LibTorch and OpenMP start them,
// probed by starting them, refused in one message where a limit stops them) and memory.
#include <catch2/catch.hpp>

#include <pthread.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <climits>
#include <cstdio>
#include <stdexcept>
#include <string>

#include "core/run_room.hpp"
#include "core/train/train_options.hpp"

using namespace actorpipe;
using Catch::Contains;

CATCH_TEST_CASE("threads a run needs: a team per rank and LibTorch's pool, none at one thread", "[threads]") {
  CATCH_CHECK(compute_threads_needed(2, 1) == 0);
  CATCH_CHECK(compute_threads_needed(2, 4) == 9);      // 3 for each rank's team, 3 for the pool
  CATCH_CHECK(compute_threads_needed(1, 4, 1) == 9);   // and 3 for the main thread's team (--partition profile)
  CATCH_CHECK(compute_threads_needed(0, 4) == 0);
  CATCH_CHECK(compute_threads_needed(1000000, 1000000) == INT_MAX);  // counted without overflow
  CATCH_CHECK(blas_thread_buffers(2, 1) == 0);
  CATCH_CHECK(blas_thread_buffers(2, 4) % (std::size_t{128} << 20) == 0);
}

CATCH_TEST_CASE("the probe starts the threads at once and lets them go", "[threads]") {
  const thread_room room = probe_thread_room(64, std::size_t{256} << 20);
  CATCH_CHECK(room.reserved);
  CATCH_CHECK(room.started == 64);
  CATCH_CHECK(room.failure.empty());
  CATCH_CHECK_NOTHROW(require_thread_room(2, 4));
  CATCH_CHECK_NOTHROW(require_thread_room(2, 1));
}

namespace {

// Runs `body` in a forked child (so that the limits it sets reach no other test) and returns
// what it wrote; fails the test where the child did not exit 0.
template <class Body>
std::string in_child(Body body) {
  int pipe_fds[2];
  CATCH_REQUIRE(pipe(pipe_fds) == 0);
  const pid_t child = fork();
  CATCH_REQUIRE(child >= 0);
  if (child == 0) {
    close(pipe_fds[0]);
    const std::string report = body();
    if (write(pipe_fds[1], report.data(), report.size()) < 0) _exit(2);
    _exit(0);
  }
  close(pipe_fds[1]);
  std::string report;
  char buf[4096];
  for (ssize_t n; (n = read(pipe_fds[0], buf, sizeof buf)) > 0;) report.append(buf, static_cast<std::size_t>(n));
  close(pipe_fds[0]);
  int status = 0;
  waitpid(child, &status, 0);
  CATCH_INFO(report);
  CATCH_REQUIRE(WIFEXITED(status));
  CATCH_REQUIRE(WEXITSTATUS(status) == 0);
  return report;
}

// ulimit -v: the address space this process maps now, plus 1 GiB.
void limit_address_space_to_1_gib_more() {
  long pages = 0;
  if (FILE* f = std::fopen("/proc/self/statm", "r")) {
    if (std::fscanf(f, "%ld", &pages) != 1) pages = 0;
    std::fclose(f);
  }
  rlimit space{};
  space.rlim_cur = space.rlim_max = static_cast<rlim_t>(pages) * sysconf(_SC_PAGESIZE) + (rlim_t{1} << 30);
  setrlimit(RLIMIT_AS, &space);
}

}  // namespace

CATCH_TEST_CASE("under an address-space limit the probe stops where threads stop, and the refusal names the flag",
                "[threads]") {
  const std::string report = in_child([] {
    std::string report;
    // Threads of 8 MiB stacks, whatever ulimit -s this test runs under.
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, 8u << 20);
    pthread_setattr_default_np(&attr);
    // Room for ~100 threads of 8 MiB, not for 1000.
    limit_address_space_to_1_gib_more();
    const thread_room room = probe_thread_room(1000);
    report += std::to_string(room.started) + "|" + room.failure + "|";
    const thread_room no_space = probe_thread_room(1, std::size_t{4} << 30);
    report += std::string(no_space.reserved ? "reserved" : "refused") + "|" + std::to_string(no_space.started) + "|";
    try {
      require_thread_room(2, 1000);
    } catch (const std::invalid_argument& e) {
      report += e.what();
    }
    return report;
  });
  CATCH_INFO(report);
  const int started = std::stoi(report);
  CATCH_CHECK(started > 10);
  CATCH_CHECK(started < 1000);
  CATCH_CHECK_THAT(report, Contains("|pthread_create: "));
  CATCH_CHECK_THAT(report, Contains("|refused|0|"));
  CATCH_CHECK_THAT(report, Contains("--threads-per-stage 1000: 2 ranks in this process need 2997 threads besides "
                                    "their own (999 for each rank's OpenMP team and for LibTorch's shared pool)"));
  CATCH_CHECK_THAT(report, Contains("limits: ulimit -v "));
  CATCH_CHECK_THAT(report, Contains(", vm.max_map_count "));
  CATCH_CHECK_THAT(report, Contains("each thread's stack 8192 KiB"));
  CATCH_CHECK_THAT(report, Contains("): lower --threads-per-stage, or raise the limit"));
}

CATCH_TEST_CASE("the BLAS buffers are held as the BLAS maps them: charged where writable memory is counted",
                "[threads]") {
  // ulimit -d (RLIMIT_DATA) counts private writable maps, as strict overcommit
  // (vm.overcommit_memory=2) charges them and OpenBLAS's buffers are: a reservation that the
  // kernel does not count would let the check pass and OpenBLAS retry its buffer for ever.
  const std::string report = in_child([] {
    long data_kib = 0;
    if (FILE* f = std::fopen("/proc/self/status", "r")) {
      char line[256];
      while (std::fgets(line, sizeof line, f))
        if (std::sscanf(line, "VmData: %ld kB", &data_kib) == 1) break;
      std::fclose(f);
    }
    rlimit data{};
    data.rlim_cur = data.rlim_max = static_cast<rlim_t>(data_kib) * 1024 + (rlim_t{1} << 30);
    if (setrlimit(RLIMIT_DATA, &data) != 0) return std::string("setrlimit failed");
    const thread_room within = probe_thread_room(1, std::size_t{512} << 20);
    const thread_room past = probe_thread_room(1, std::size_t{2} << 30);
    return std::string(within.reserved ? "reserved" : "refused") + "|" + (past.reserved ? "reserved" : "refused") + "|" +
           past.failure;
  });
  CATCH_CHECK(report == "reserved|refused|mmap: Cannot allocate memory");
}

CATCH_TEST_CASE("a model past the machine's memory and swap is refused in one message, one that fits is not",
                "[threads][memory]") {
  const double room = memory_and_swap_bytes();
  CATCH_REQUIRE(room > 0);  // /proc/meminfo is there on Linux
  CATCH_CHECK_NOTHROW(require_memory_room(room / 2, "half", "of it", "fine"));
  try {
    require_memory_room(2 * room, "the model", "its values", "lower --layers");
    CATCH_FAIL("twice the machine's memory was not refused");
  } catch (const std::invalid_argument& e) {
    const std::string text = e.what();
    CATCH_CHECK_THAT(text, Contains("the model needs at least "));
    CATCH_CHECK_THAT(text, Contains(" GB (its values), more than this machine's "));
    CATCH_CHECK_THAT(text, Contains(" GiB of memory and swap: lower --layers"));
  }
  // Under ulimit -v, what the process may still map is the room (a child: the limit must not
  // reach the other tests).
  const std::string limited = in_child([] {
    limit_address_space_to_1_gib_more();
    const double left = address_space_left_bytes();
    std::string report = left > 0.9 * (1 << 30) && left <= 1.0 * (1 << 30) ? "left|" : "not left|";
    try {
      require_memory_room(2.0 * (1 << 30), "the model", "its values", "lower --layers");
    } catch (const std::invalid_argument& e) {
      report += e.what();
    }
    return report;
  });
  CATCH_CHECK_THAT(limited, Contains("left|the model needs at least 2.1 GB (its values), more than the 1.0 GiB this "
                                     "process may still map (ulimit -v "));
  CATCH_CHECK_THAT(limited, Contains(" KiB): lower --layers"));
  // A model whose stage fits, on 2 stages: one rank in this process fits, both ranks do not.
  const double parameters = 1.5 * room / 8;
  CATCH_CHECK_NOTHROW(require_model_memory("m", parameters, 2, 1, 1, 1, 1, 1, 1, 4));
  try {
    require_model_memory("m", parameters, 2, 2, 1, 1, 1, 1, 1, 4);
    CATCH_FAIL("two ranks' shares past the machine's memory were not refused");
  } catch (const std::invalid_argument& e) {
    CATCH_CHECK_THAT(std::string(e.what()), Contains(" on 2 stages, 2 ranks in this process, microbatch size 1 needs at least "));
  }
  // What one microbatch keeps for its blocks' backward counts every block of the rank (a
  // -B 100000 typo passed a one-block bound and grew toward the OOM killer): 36 bytes a sample
  // and block here (S = h = heads = 1, MLP 4), a microbatch whose one block fits, two do not.
  const int batch = static_cast<int>(std::min(0.6 * room / 36, 2e9));
  CATCH_CHECK_NOTHROW(require_model_memory("m", 0, 1, 1, batch, 1, 1, 1, 1, 4));
  CATCH_CHECK_THROWS_WITH(require_model_memory("m", 0, 1, 1, batch, 1, 1, 1, 2, 4),
                          Contains("what one microbatch keeps for the backward of its blocks"));
  // Its share of the blocks; with activation checkpointing, one virtual stage's.
  train_options o;
  o.stages = 2;
  o.chunks = 2;
  CATCH_CHECK(blocks_kept_per_microbatch(o, 8) == 4);
  CATCH_CHECK(blocks_kept_per_microbatch(o, 1) == 1);
  o.activation_checkpointing = true;
  CATCH_CHECK(blocks_kept_per_microbatch(o, 8) == 2);
  o.no_pipeline = true;
  CATCH_CHECK(blocks_kept_per_microbatch(o, 8) == 8);
}
