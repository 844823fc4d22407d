// Benchmark: checkpoints while training.
// 1. Write throughput: each checkpoint's bytes over its write time (from the snapshot's start
//    to the commit: copy, write, fsync, SHA-256, manifest, rename), against this disk's
//    sequential write speed measured in the same run on as many bytes in the same directory
//    (4 MiB write()s, then fsync). Target >= 0.7x.
// 2. The step after a save against a normal step: the training's pause for the save (the
//    snapshot, and any wait for the previous save) plus the step's own time, over the mean of
//    the steps that follow no save (the first step, which pays for warm-up, left out).
//    Target <= 1.2x.
//
//   bench/checkpoint_throughput [--dir DIR] [--layers 8 --hidden 512 --seq-len 128 --microbatch-size 4
//                                --microbatches 8 --steps 10] [--save-every 3]
// The checkpoints go to a folder of their own that it makes in DIR (default: the current one),
// checkpoint-bench-<pid>, and removes at the end; nothing else in DIR is touched.
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstring>
#include <stdexcept>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "actors/pipeline_runtime.hpp"
#include "bench/gpt_bench.hpp"
#include "core/blas_kernels.hpp"

using namespace actorpipe;
namespace fs = std::filesystem;

namespace {

// Seconds to write `bytes` sequentially into a new file in `dir` (4 MiB blocks) and fsync it.
double sequential_write_seconds(const std::string& dir, long long bytes) {
  const std::string path = dir + "/sequential-write.bin";
  std::vector<char> block(4 << 20, 'x');
  for (size_t i = 0; i < block.size(); i += 4096) block[i] = static_cast<char>(i >> 12);
  const auto t0 = std::chrono::steady_clock::now();
  // A failure throws (std::exit skipped the removal of the bench's folder).
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) throw std::runtime_error(path + ": " + std::strerror(errno));
  for (long long left = bytes; left > 0;) {
    const auto n = ::write(fd, block.data(), static_cast<size_t>(std::min<long long>(left, block.size())));
    if (n <= 0) {
      const std::string why = std::strerror(errno);
      ::close(fd);
      fs::remove(path);
      throw std::runtime_error(path + ": " + why);
    }
    left -= n;
  }
  ::fsync(fd);
  ::close(fd);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  fs::remove(path);
  return s;
}

std::string filesystem_of(const std::string& dir) {
  struct statfs f {};
  if (statfs(dir.c_str(), &f) != 0) return "unknown filesystem";
  switch (f.f_type) {
    case 0xEF53: return "ext4";
    case 0x58465342: return "xfs";
    case 0x9123683E: return "btrfs";
    case 0x01021994: return "tmpfs";
    case 0x794c7630: return "overlayfs";
    default: {
      char hexname[32];
      std::snprintf(hexname, sizeof hexname, "filesystem 0x%lx", static_cast<unsigned long>(f.f_type));
      return hexname;
    }
  }
}

}  // namespace

namespace {

int bench_main(int argc, char** argv) {
  ensure_best_blas_kernels(argv);
  train_options o = bench::gpt_bench_options();
  o.model.hidden = 512;
  o.model.heads = 8;
  o.microbatches = 8;
  o.steps = 10;
  o.stages = 2;
  o.schedule = "1f1b";
  o.save_every = 3;
  const int default_every = o.save_every;  // for --help, whatever the flags say
  std::string in = fs::current_path().string();
  // --dir and --save-every here; the model's flags through the shared parser.
  std::vector<char*> rest{argv[0]};
  for (int i = 1; i < argc; ++i) {
    const std::string k = argv[i];
    if (k == "--dir" && i + 1 < argc) {
      in = argv[++i];
    } else if (k == "--save-every" && i + 1 < argc) {
      const char* text = argv[++i];
      const long long every = bench::whole_number(text, 2, 1000000);
      if (every < 0) {  // 1 leaves no step that follows no save to compare
        std::fprintf(stderr, "checkpoint_throughput: --save-every needs a whole number from 2 to 1000000, got '%s'\n",
                     text);
        return 2;
      }
      o.save_every = static_cast<int>(every);
    } else {
      rest.push_back(argv[i]);
    }
  }
  bench::bench_flags accepts;
  accepts.extra = ", --dir, --save-every";
  accepts.extra_defaults = " --dir . --save-every " + std::to_string(default_every);
  if (!bench::parse_gpt_bench_flags(static_cast<int>(rest.size()), rest.data(), o, "checkpoint_throughput", accepts))
    return 2;
  // A step after a save and one after none, each at least once past the first (warm-up) step.
  if (o.save_every < 2 || o.steps < o.save_every + 2) {
    std::fprintf(stderr,
                 "checkpoint_throughput: --save-every %d with --steps %d leaves no %s to compare: --save-every must be "
                 "at least 2 and --steps at least save-every + 2\n",
                 o.save_every, o.steps, o.save_every < 2 ? "step that follows no save" : "step after a save");
    return 2;
  }
  std::error_code ec;
  if (!fs::is_directory(in, ec)) {
    std::fprintf(stderr, "checkpoint_throughput: --dir '%s' is not a folder\n", in.c_str());
    return 2;
  }
  // A folder of its own: --dir . (or a home folder) was removed with everything in it.
  const std::string dir = (fs::path(in) / ("checkpoint-bench-" + std::to_string(::getpid()))).string();
  if (!fs::create_directory(dir, ec)) {
    std::fprintf(stderr, "checkpoint_throughput: cannot make '%s': %s\n", dir.c_str(),
                 ec ? ec.message().c_str() : "it exists");
    return 2;
  }
  o.save_dir = dir;
  struct removed_at_end {  // also when the run throws
    std::string dir;
    ~removed_at_end() {
      std::error_code ignored;
      fs::remove_all(dir, ignored);
    }
  } cleanup{dir};
  bench::print_what_it_runs_on();
  std::printf("GPT %d layers, hidden %d, seq %d; 2 stages (1f1b), %d microbatches x %d; %d steps, a checkpoint every "
              "%d and after the last; 1 thread per rank; into %s (%s)\n\n",
              o.model.layers, o.model.hidden, o.model.seq_len, o.microbatches, o.microbatch_size, o.steps,
              o.save_every, dir.c_str(), filesystem_of(dir).c_str());
  std::fflush(stdout);

  // Ctrl-C or SIGTERM: the run stops after its step in flight, and the folder goes as at the end
  // (it was left, with every checkpoint written).
  static std::atomic<int> stop{0};
  o.stop_signal = &stop;
  for (const int sig : {SIGINT, SIGTERM}) std::signal(sig, [](int s) { stop.store(s); });
  const train_result r = run_pipeline(o);
  if (r.stopped_by_signal != 0) {
    std::fprintf(stderr, "checkpoint_throughput: stopped by signal %d after step %d; no results\n", r.stopped_by_signal,
                 r.steps.empty() ? 0 : r.steps.back().step + 1);
    return 128 + r.stopped_by_signal;
  }
  if (r.checkpoints.empty())
    throw std::runtime_error("no checkpoint was written (" +
                             (r.checkpoint_error.empty() ? std::string("see above") : r.checkpoint_error) +
                             "): nothing to measure");

  // 1. Write throughput against the disk's.
  long long bytes = 0;
  double write = 0;
  std::printf("| checkpoint | MiB | write s | MiB/s | training paused s |\n|---|---|---|---|---|\n");
  for (const auto& c : r.checkpoints) {
    std::printf("| step %d | %.1f | %.3f | %.0f | %.3f |\n", c.step, c.bytes / 1048576.0, c.write_seconds,
                c.bytes / 1048576.0 / c.write_seconds, c.pause_seconds);
    bytes += c.bytes;
    write += c.write_seconds;
  }
  const long long per = bytes / static_cast<long long>(r.checkpoints.size());
  double disk = 0;
  for (int i = 0; i < 3; ++i) disk += sequential_write_seconds(dir, per);
  disk /= 3;
  const double ours = static_cast<double>(bytes) / write, theirs = static_cast<double>(per) / disk;
  std::printf("\nwrite throughput: checkpoints %.0f MiB/s, the disk's sequential write of %.0f MiB %.0f MiB/s "
              "(mean of 3): %.2fx (target >= 0.7x)\n",
              ours / 1048576.0, per / 1048576.0, theirs / 1048576.0, ours / theirs);

  // 2. The step after a save against a normal one.
  // step_metrics::step counts from 0: the step with index `done` follows the save after `done` steps.
  std::vector<double> pause_before(r.steps.size() + 1, 0.0);
  for (const auto& c : r.checkpoints) pause_before[c.step] = c.pause_seconds;
  double after = 0, normal = 0;
  int n_after = 0, n_normal = 0;
  for (const auto& m : r.steps) {
    if (m.step == 0) continue;  // warm-up
    if (m.step % o.save_every == 0)
      after += pause_before[m.step] + m.seconds, ++n_after;
    else
      normal += m.seconds, ++n_normal;
  }
  after /= n_after, normal /= n_normal;
  std::printf("steps: after a save %.3f s (pause + step, mean of %d), normal %.3f s (mean of %d): %.2fx (target <= 1.2x)\n",
              after, n_after, normal, n_normal, after / normal);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return bench::run_reporting_errors("checkpoint_throughput", [&] { return bench_main(argc, argv); });
}
