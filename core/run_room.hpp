// Room for a run, checked before anything is built or started: threads and memory.
//
// Threads: whether this process can start the threads a run's --threads-per-stage asks for,
// before anything starts them: LibTorch's thread pool waits for ever on a worker it could not
// start, and OpenBLAS's allocator retries a buffer it cannot map for ever, so a run past the
// process's limits (ulimit -v, -u) would hang without a word.
//
// Memory: whether a model's parameters fit the machine at all. A model too big for it (a typo
// in --layers or --seq-len) would otherwise be initialised until the kernel kills the process,
// or fail on an allocation with a message that names no flag.
#pragma once

#include <cstddef>
#include <string>

namespace actorpipe {

// The CPUs this process may run on (its affinity mask: taskset, a container's cpuset), or those
// online (std::thread::hardware_concurrency, 0 where unknown) where the mask cannot be read.
std::size_t usable_cpus();

struct thread_room {
  bool reserved = false;  // the address space asked for beside the threads was there
  int started = 0;        // threads started (all at once, while it was held), up to the number asked for
  std::string failure;    // why the reservation or the next thread failed ("pthread_create: ..."); "" when all went
};

// Holds `reserve_bytes` of address space (mapped writable as the BLAS maps its buffers, so
// charged where the kernel counts commitments; never touched), then starts `wanted` threads
// with the default attributes (the stack LibTorch's and OpenMP's get), all alive at once, then
// lets them end, joins them and gives the space back.
thread_room probe_thread_room(int wanted, std::size_t reserve_bytes = 0);

// The address space the BLAS maps when `ranks` ranks compute on `threads` threads each:
// Debian's OpenBLAS 0.3.21 (x86-64, OpenMP) maps a 128 MiB buffer for each thread a product
// runs on, up to its MAX_THREADS (64), beside two for each calling thread (measured: 6400 MiB
// more at --threads-per-stage 50, 2 x 256 MiB for 2 ranks at 1). Past the limit its allocator
// retries for ever, so the estimate keeps the calling threads' too. 0 for another BLAS, or for
// one thread.
std::size_t blas_thread_buffers(int ranks, int threads);

// The threads a process with `ranks` ranks needs at --threads-per-stage `threads` beyond its
// own: each rank's compute thread runs an OpenMP team of threads - 1 (OpenBLAS computes on it),
// LibTorch keeps one shared pool of threads - 1, and `extra_teams` more threads that set the
// count (the main thread profiling the layers) each run a team too.
int compute_threads_needed(int ranks, int threads, int extra_teams = 0);

// Throws std::invalid_argument naming --threads-per-stage, the count needed, the count this
// process could start and its limits, when it cannot start what `ranks` ranks need. Starts
// nothing for threads == 1.
void require_thread_room(int ranks, int threads, int extra_teams = 0);

// This machine's memory and swap in bytes (/proc/meminfo's MemTotal + SwapTotal), or the
// process's cgroup limit (memory.max + memory.swap.max) where that is lower; 0 where unknown.
double memory_and_swap_bytes();

// What this process may still map under its address-space limit (ulimit -v, RLIMIT_AS, less
// what it maps now), in bytes; 0 where there is no limit.
double address_space_left_bytes();

// Throws std::invalid_argument when `bytes` (what a rank holds at the least) exceed
// memory_and_swap_bytes(): "<what> needs at least <N> GB (<how>), more than this machine's
// <M> GiB of memory and swap: <advice>" (or the commit limit under strict overcommit,
// vm.overcommit_memory=2, or what ulimit -v leaves this process, where that is lower).
void require_memory_room(double bytes, const std::string& what, const std::string& how, const std::string& advice);

// require_memory_room for a model of `shape` ("the GPT of --layers 8 --hidden 256 ...") with
// `parameters` trainable elements on `stages` stages (0 or less: 1), `ranks_here` of the job's
// ranks in this process (0 or less: 1), and microbatches of `microbatch_size` x `seq_len` x
// `hidden` activations through blocks of attention of `heads` heads and an MLP of `inner`
// units: each of those ranks needs at least its share of the values and gradients (8 bytes a
// parameter) and what one microbatch keeps for the backward of `blocks` blocks
// (blocks_kept_per_microbatch): the attention's q, k, v and output, the MLP's hidden units and
// the [B, heads, seq-len, seq-len] attention probabilities (4 bytes each). A microbatch size
// typo (-B 100000) passed the one-block bound of before.
void require_model_memory(const std::string& shape, double parameters, int stages, int ranks_here, int microbatch_size,
                          double seq_len, double hidden, double heads, int blocks, double inner);

}  // namespace actorpipe
