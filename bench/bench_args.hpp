// Arguments of the benchmark programs, read whole: a value that is not a whole number in its
// range is refused, where atoi read "abc" or "--help" as 0 or 1 and the bench ran on it.
#pragma once

#include <sys/resource.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>

namespace actorpipe::bench {

// `text` as a whole number from lo to hi, or -1.
inline long long whole_number(const char* text, long long lo, long long hi) {
  char* end = nullptr;
  errno = 0;
  const long long v = std::strtoll(text, &end, 10);
  return end != text && *end == '\0' && errno == 0 && v >= lo && v <= hi ? v : -1;
}

// Whether --help or -h is among the arguments.
inline bool asked_for_help(int argc, char** argv) {
  for (int i = 1; i < argc; ++i)
    if (std::string(argv[i]) == "--help" || std::string(argv[i]) == "-h") return true;
  return false;
}

// CPU time other processes used while a benchmark ran: the machine's busy time (/proc/stat:
// user, nice, system, irq, softirq and steal, over all CPUs) less this program's and its
// waited-for children's. Timings taken while others computed say little; the benchmarks that
// do not check each run themselves say so at their end.
class load_watch {
 public:
  load_watch() : busy0_(machine_busy_s()), own0_(own_cpu_s()) {}
  double others_cpu_s() const { return (machine_busy_s() - busy0_) - (own_cpu_s() - own0_); }
  // Prints a note where others used more than `limit_s` CPU-seconds.
  void say(double limit_s = 2.0) const {
    const double others = others_cpu_s();
    if (others > limit_s)
      std::printf("note: other processes used %.1f CPU-s while this ran (the machine's busy time less this program's, "
                  "steal included): its timings are unreliable; run it on a quiet machine\n",
                  others);
  }

 private:
  static double machine_busy_s() {
    std::ifstream f("/proc/stat");
    std::string cpu;
    double user = 0, nice = 0, system = 0, idle = 0, iowait = 0, irq = 0, softirq = 0, steal = 0;
    if (!(f >> cpu >> user >> nice >> system >> idle >> iowait >> irq >> softirq >> steal) || cpu != "cpu") return 0;
    const long tick = sysconf(_SC_CLK_TCK);
    return (user + nice + system + irq + softirq + steal) / static_cast<double>(tick > 0 ? tick : 100);
  }
  static double own_cpu_s() {
    double total = 0;
    for (const int who : {RUSAGE_SELF, RUSAGE_CHILDREN}) {
      rusage u{};
      if (getrusage(who, &u) != 0) continue;
      total += static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
               static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec) * 1e-6;
    }
    return total;
  }
  double busy0_, own0_;
};

}  // namespace actorpipe::bench
