// `actorpipe doctor`: every check a run depends on, one line each, before a run finds out.
#include "apps/doctor_command.hpp"

#include <dlfcn.h>
#include <netdb.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sched.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <ucp/api/ucp.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <ostream>
#include <sstream>
#include <stdexcept>

#include "apps/exit_codes.hpp"
#include "apps/launch_command.hpp"
#include "core/checkpoint/checkpoint_store.hpp"
#include "core/job_place.hpp"
#include "core/job_token.hpp"
#include "core/launch_env.hpp"
#include "core/folder_probe.hpp"
#include "core/number_text.hpp"
#include "core/proc_files.hpp"
#include "core/text_file.hpp"
#include "transport/ucx/ucx_worker.hpp"
#ifdef ACTORPIPE_WITH_TORCH
#include "core/model/compute_threads.hpp"
#endif

namespace actorpipe {
namespace {

namespace fs = std::filesystem;

std::string without_prefix(const std::string& text, const std::string& prefix) {
  return text.rfind(prefix, 0) == 0 ? text.substr(prefix.size()) : text;
}


class report {
 public:
  explicit report(std::vector<doctor_finding>& all) : all_(all) {}
  void add(doctor_status s, const std::string& section, const std::string& item, const std::string& text) {
    all_.push_back({s, section, item, text});
  }

 private:
  std::vector<doctor_finding>& all_;
};

void check_machine(report& r, simd_level cpu, const std::map<std::string, std::string>& cpuinfo) {
  std::string model = value_of(cpuinfo, "model name");
  if (model.empty()) model = "a CPU /proc/cpuinfo does not name";
  const std::string family = value_of(cpuinfo, "cpu family"), number = value_of(cpuinfo, "model");
  if (!family.empty() && !number.empty()) model += " (family " + family + ", model " + number + ")";
  cpu_set_t set;
  CPU_ZERO(&set);
  const int usable = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : 0;
  const long online = sysconf(_SC_NPROCESSORS_ONLN);
  std::string text = model + ", " + simd_level_name(cpu) + "; " + std::to_string(usable) + " CPU" +
                     (usable == 1 ? "" : "s") + " for this process (" + std::to_string(online) + " online)";
  doctor_status status = doctor_status::ok;
  // A cgroup's CPU quota ("150000 100000": 1.5 CPUs of time) can be below the CPUs it may run on.
  std::istringstream quota(first_line("/sys/fs/cgroup/cpu.max"));
  std::string max_text;
  double period = 0;
  if (quota >> max_text >> period && max_text != "max" && period > 0) {
    const double cpus = std::atof(max_text.c_str()) / period;
    text += "; its cgroup allows " + fixed_text(cpus, 2) + " CPUs of time (cpu.max)";
    if (cpus + 1e-9 < usable) status = doctor_status::warn, text += ": ranks beyond that share them";
  }
  if (usable == 1) text += "; a pipeline's ranks will take turns on it", status = std::max(status, doctor_status::note);
  r.add(status, "machine", "CPU", text);

  const double total = meminfo_bytes("MemTotal");
  double available = meminfo_bytes("MemAvailable");
  std::string mem = gib_text(total) + ", " + gib_text(available) + " available";
  if (const double cap = cgroup_bytes("memory.max"); cap > 0) {
    const double used = cgroup_bytes("memory.current");
    mem += "; its cgroup allows " + gib_text(cap) + " (memory.max), " + gib_text(std::max(0.0, cap - used)) + " of it free";
    available = std::min(available, std::max(0.0, cap - used));
  }
  if (total <= 0) r.add(doctor_status::note, "machine", "memory", "unknown (/proc/meminfo unreadable)");
  else if (available < 1024.0 * 1024 * 1024)
    r.add(doctor_status::warn, "machine", "memory", mem + ": under 1 GiB free for parameters, moments and activations");
  else r.add(doctor_status::ok, "machine", "memory", mem);
}

// What doctor tells a program of the user's that runs generic kernels (it did not ask for the
// best ones; actorpipe's binary does).
constexpr char own_program_hint[] =
    " (a program of your own picks the best ones by calling actorpipe::ensure_best_blas_kernels(argv) first in main, "
    "as actorpipe's binary does)";

void check_compute(report& r, simd_level cpu, const std::map<std::string, std::string>& cpuinfo) {
#ifdef ACTORPIPE_WITH_TORCH
  {
    // Its vectorised kernels against the CPU's (LibTorch 1.13 has them up to AVX-512): generic
    // ones cost a multiple of the time in every op outside the BLAS.
    const std::string kernels = aten_kernels();
    const simd_level have = kernels.find("512") != std::string::npos ? simd_level::avx512
                            : kernels.find("AVX2") != std::string::npos ? simd_level::avx2
                                                                        : simd_level::sse;
    const simd_level best = cpu >= simd_level::avx512 ? simd_level::avx512 : cpu >= simd_level::avx2 ? simd_level::avx2 : simd_level::sse;
    std::string text = without_prefix(libtorch_version(), "LibTorch ") + "; computes on the CPU";
    doctor_status status = doctor_status::ok;
    if (!kernels.empty() && have < best) {
      status = doctor_status::warn;
      const char* asked = std::getenv(aten_capability_variable);
      text += ": kernels for " + simd_level_name(have) + " on a CPU with " + simd_level_name(cpu) +
              (asked && *asked ? std::string(" (unset ") + aten_capability_variable + " and LibTorch or actorpipe picks " +
                                     simd_level_name(best) + ")"
                               : std::string(own_program_hint));
    }
    r.add(status, "compute", "LibTorch", text);
  }
#else
  (void)cpu;
  (void)cpuinfo;
  r.add(doctor_status::note, "compute", "LibTorch",
        "none in this build (-DACTORPIPE_WITH_TORCH=OFF): simulate and launch work; train needs a build with LibTorch");
  return;
#endif
  const blas_info blas = current_blas();
  doctor_status blas_status = doctor_status::ok;
  std::string blas_text = without_prefix(describe_blas(blas), "BLAS: ");
  if (!blas.other_sgemm.empty()) {
    blas_status = doctor_status::warn;
  } else if (blas.openblas && openblas_core_level(blas.core) < std::min(cpu, simd_level::avx512) &&
             !best_openblas_core(cpu).empty()) {
    // Below AVX-512 only: float32 products run the same kernels on SkylakeX and Cooperlake
    // (which adds bfloat16 ones), so SkylakeX on a CPU with AVX-512 BF16 is as fast.
    blas_status = doctor_status::warn;
    const char* asked = std::getenv("OPENBLAS_CORETYPE");
    blas_text += ": kernels for " + simd_level_name(openblas_core_level(blas.core)) + " on a CPU with " +
                 simd_level_name(cpu) +
                 (asked && *asked ? " (unset OPENBLAS_CORETYPE and actorpipe picks " + best_openblas_core(cpu) + ")"
                                  : own_program_hint);
  } else if (blas.openblas && blas.user_core_ignored) {
    blas_status = doctor_status::warn;  // a typo of the user's: OpenBLAS picked a core itself
  }
#ifdef ACTORPIPE_WITH_TORCH
  if (!blas.openblas) {  // LibTorch's build says which: its own MKL, or whatever libblas.so.3 is
    const std::string info = libtorch_blas_info();
    if (info == "generic") {
      blas_status = doctor_status::warn;
      blas_text = "LibTorch calls the system's libblas.so.3, and it is not OpenBLAS: the reference BLAS is ~20x slower "
                  "(apt-get install libopenblas0-openmp)";
    } else {
      blas_text = "LibTorch's own" + (info.empty() ? std::string() : " (BLAS_INFO=" + info + ")");
    }
  }
#endif
  r.add(blas_status, "compute", "BLAS", blas_text);
#ifdef ACTORPIPE_WITH_TORCH
  const double mhz = std::atof(value_of(cpuinfo, "cpu MHz").c_str());
  const double gflops = matmul_gflops(512, 1024, 1024, 5);
  std::string text = fixed_text(gflops, 0) + " GFLOP/s on one thread (fp32, 512x1024 by 1024x1024, best of 5)";
  const std::string peak = peak_text(cpu, mhz, value_of(cpuinfo, "vendor_id"), std::atoi(value_of(cpuinfo, "cpu family").c_str()));
  if (!peak.empty()) text += "; " + peak;
  const doctor_status verdict = judge_matmul(gflops, cpu, mhz);
  if (verdict == doctor_status::warn) text += ": slow for this CPU; generic kernels, or other work on this core";
  r.add(verdict, "compute", "matmul", text);
#endif
  const std::string allocator = describe_allocator();
  r.add(allocator.find("tcmalloc") != std::string::npos ? doctor_status::ok : doctor_status::note, "compute", "allocator",
        allocator.find("tcmalloc") != std::string::npos ? allocator
                                                        : allocator + " (actorpipe links tcmalloc where libgoogle-perftools-dev is installed)");
  r.add(doctor_status::ok, "compute", "own loops", describe_own_kernels());
  std::string set;  // what the user set (actorpipe's own choices of kernels carry a marker)
  for (const char* v : {"OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_CORETYPE", "ATEN_CPU_CAPABILITY"}) {
    if (const char* value = std::getenv(v); value && !set_by_actorpipe(v))
      set += std::string(set.empty() ? "" : ", ") + v + "=" + shown_text(value, 40);
  }
  r.add(set.empty() ? doctor_status::ok : doctor_status::note, "compute", "threads",
        "each rank computes on a thread of its own with --threads-per-stage torch threads (default 1)" +
            (set.empty() ? std::string() : "; set here: " + set));
}

// Two UCX workers of this process, one sending 8 messages of 4 MiB to the other: the data
// plane a multi-process job uses, end to end (context, worker, address exchange, endpoint,
// tagged send and receive). "" and the GB/s, or what failed.
struct loopback_result {
  std::string error;
  double gb_per_s = 0;
};

loopback_result ucx_loopback(const std::vector<std::pair<std::string, std::string>>& settings) {
  constexpr std::size_t bytes = std::size_t{4} << 20;
  constexpr int rounds = 8;
  // Declared before the workers, so that a callback their destruction still runs (a receive
  // cancelled after a timeout) finds them alive.
  std::vector<char> out(bytes, 'x'), in(bytes);
  std::mutex m;
  std::condition_variable cv;
  int done = 0;
  std::string error;
  auto finish = [&](const std::string& e) {
    std::lock_guard<std::mutex> lock(m);
    if (!e.empty() && error.empty()) error = e;
    ++done;
    cv.notify_all();
  };
  loopback_result result;
  try {
    transport::ucx::ucx_worker a(settings), b(settings);
    const int peer = b.connect(a.address());
    const auto start = std::chrono::steady_clock::now();
    for (int k = 0; k < rounds; ++k) {
      a.receive(100 + k, in.data(), bytes, [&](std::string e, std::size_t) { finish(e); });
      b.send(peer, 100 + k, out.data(), bytes, [&](std::string e) { finish(e); });
      std::unique_lock<std::mutex> lock(m);
      if (!cv.wait_for(lock, std::chrono::seconds(10), [&] { return done == 2 * (k + 1) || !error.empty(); }))
        error = "no message after 10 s";
      if (!error.empty()) break;
    }
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    {
      std::lock_guard<std::mutex> lock(m);  // not held past here: a callback may still want it
      result.error = error;
    }
    if (result.error.empty() && in != out) result.error = "a message arrived altered";
    if (result.error.empty()) result.gb_per_s = rounds * bytes / seconds / 1e9;
  } catch (const std::exception& e) {
    result.error = e.what();
  }
  return result;
}

void check_ucx(report& r) {
  const char* tls = std::getenv("UCX_TLS");
  const std::string version = std::string("UCX ") + ucp_get_version_string();
  // Two workers take about 30 file descriptors, and UCX aborts the process where it cannot
  // open one (doctor crashed under ulimit -n 30): not tried without room for them.
  constexpr long long workers_files = 32;
  struct rlimit files {};
  if (getrlimit(RLIMIT_NOFILE, &files) == 0 && files.rlim_cur != RLIM_INFINITY) {
    std::error_code ec;
    long long open_now = 0;
    for (auto it = std::filesystem::directory_iterator("/proc/self/fd", ec); !ec && it != std::filesystem::directory_iterator();
         it.increment(ec))
      ++open_now;
    const long long free_files = static_cast<long long>(files.rlim_cur) - open_now;
    if (free_files < workers_files) {
      r.add(doctor_status::fail, "data plane", "UCX",
            version + ": not tried: " + std::to_string(free_files) + " file descriptors free under the open-files limit of " +
                std::to_string(files.rlim_cur) + " (ulimit -n), and two UCX workers need about " +
                std::to_string(workers_files) + " (UCX ends the process without them); raise it");
      return;
    }
  }
  const loopback_result any = ucx_loopback({});
  if (!any.error.empty())
    r.add(doctor_status::fail, "data plane", "UCX",
          version + (tls ? std::string(" (UCX_TLS=") + tls + ")" : std::string()) +
              ": 4 MiB messages between two workers of this process failed: " + any.error);
  else
    r.add(doctor_status::ok, "data plane", "UCX",
          version + (tls ? std::string(" (UCX_TLS=") + tls + ")" : std::string()) +
              ": 8 messages of 4 MiB between two workers of this process, " + fixed_text(any.gb_per_s, 1) +
              " GB/s (processes on this host use it)");
  // What reaches other nodes: TCP (UCX also takes RDMA where there is some).
  const loopback_result tcp = ucx_loopback({{"TLS", "tcp"}});
  if (!tcp.error.empty())
    r.add(doctor_status::warn, "data plane", "UCX tcp",
          "the same over TCP alone (UCX_TLS=tcp) failed: " + tcp.error +
              "; a job across nodes needs TCP or RDMA between them");
  else
    r.add(doctor_status::ok, "data plane", "UCX tcp",
          "the same over TCP alone (UCX_TLS=tcp, as between nodes without RDMA): " + fixed_text(tcp.gb_per_s, 1) + " GB/s");
}

// GPUs and NCCL, through their libraries if present (nothing of CUDA is linked in).
void check_gpu(report& r) {
  std::string gpus;
  doctor_status status = doctor_status::note;
  void* cuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!cuda) {
    gpus = "none: no NVIDIA driver (libcuda.so.1 is not installed)";
  } else {
    using init_fn = int (*)(unsigned);
    using count_fn = int (*)(int*);
    using device_fn = int (*)(int*, int);       // CUdevice is an int
    using name_fn = int (*)(char*, int, int);
    auto init = reinterpret_cast<init_fn>(dlsym(cuda, "cuInit"));
    auto count = reinterpret_cast<count_fn>(dlsym(cuda, "cuDeviceGetCount"));
    auto device_of = reinterpret_cast<device_fn>(dlsym(cuda, "cuDeviceGet"));
    auto device_name = reinterpret_cast<name_fn>(dlsym(cuda, "cuDeviceGetName"));
    int n = 0;
    if (!init || !count || !device_of || !device_name) gpus = "unknown: libcuda.so.1 lacks the driver API";
    else if (const int e = init(0); e != 0) gpus = "none: the driver found no usable device (cuInit error " + std::to_string(e) + ")";
    else if (count(&n) != 0 || n == 0) gpus = "none: the driver lists no device";
    else {
      status = doctor_status::ok;
      gpus = std::to_string(n) + " GPU" + (n == 1 ? "" : "s") + ":";
      for (int i = 0; i < n && i < 16; ++i) {
        char text[256] = {0};
        int device = 0;
        if (device_of(&device, i) == 0 && device_name(text, sizeof text, device) == 0)
          gpus += std::string(i ? "," : "") + " " + text;
      }
    }
  }
  std::string nccl = "NCCL not installed (libnccl.so.2)";
  if (void* lib = dlopen("libnccl.so.2", RTLD_NOW | RTLD_LOCAL)) {
    using version_fn = int (*)(int*);
    int v = 0;
    if (auto get = reinterpret_cast<version_fn>(dlsym(lib, "ncclGetVersion")); get && get(&v) == 0)
      nccl = "NCCL " + std::to_string(v / 10000) + "." + std::to_string(v / 100 % 100) + "." + std::to_string(v % 100);
    else nccl = "NCCL (libnccl.so.2, version unknown)";
  }
  r.add(status, "data plane", "GPU",
        gpus + "; " + nccl + ". actorpipe trains on the CPU (the LibTorch it builds with is CPU-only); transport/nccl "
        "moves device buffers between GPUs (tested where there is one)");
}

// Where rank 0's supervisor would listen: free here, or not this host's.
void check_master_port(report& r, const std::string& addr, int port) {
  const std::string where = "port " + std::to_string(port) + " on " + addr;
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV;
  addrinfo* target = nullptr;
  if (getaddrinfo(addr.c_str(), std::to_string(port).c_str(), &hints, &target) != 0 || !target) {
    r.add(doctor_status::fail, "jobs", "master", "'" + addr + "' does not resolve (--master-addr / MASTER_ADDR)");
    return;
  }
  const int fd = socket(target->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  const int one = 1;
  if (fd >= 0) setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  const int bound = fd >= 0 ? bind(fd, target->ai_addr, target->ai_addrlen) : -1;
  const int why = bound == 0 ? 0 : errno;
  if (fd >= 0) close(fd);
  freeaddrinfo(target);
  if (bound == 0)
    r.add(doctor_status::ok, "jobs", "master", where + " is free: rank 0's supervisor can listen there");
  else if (why == EADDRINUSE)
    r.add(doctor_status::fail, "jobs", "master",
          where + " is in use: a job started here now would fail to listen (launch --master-port picks another)");
  else if (why == EADDRNOTAVAIL)
    r.add(doctor_status::note, "jobs", "master",
          where + ": not an address of this host; run actorpipe doctor on the node that has it to check the port");
  else
    r.add(doctor_status::warn, "jobs", "master", where + ": cannot listen there: " + std::strerror(why));
}

void check_jobs(report& r, const doctor_options& o) {
  struct rlimit files {};
  if (getrlimit(RLIMIT_NOFILE, &files) == 0) {
    const bool unlimited = files.rlim_cur == RLIM_INFINITY;
    const unsigned long long most =
        unlimited ? 0 : (files.rlim_cur > launch_files_needed(0) ? (files.rlim_cur - launch_files_needed(0)) / 4 : 0);
    const std::string limit = unlimited ? "unlimited" : std::to_string(files.rlim_cur);
    if (o.nproc_per_node > 0 && !unlimited && launch_files_needed(o.nproc_per_node) > files.rlim_cur)
      r.add(doctor_status::fail, "jobs", "open files",
            "limit " + limit + " (ulimit -n): launch --nproc-per-node " + std::to_string(o.nproc_per_node) + " needs " +
                std::to_string(launch_files_needed(o.nproc_per_node)) + "; raise it (ulimit -n) or start at most " +
                std::to_string(most));
    else
      r.add(doctor_status::ok, "jobs", "open files",
            "limit " + limit + " (ulimit -n): launch can start " +
                (unlimited ? std::string("any number of") : "up to " + std::to_string(most)) + " processes a node");
  }

  char host[256] = {0};
  gethostname(host, sizeof host - 1);
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (getaddrinfo(host, nullptr, &hints, &found) == 0 && found) {
    char address[NI_MAXHOST] = {0};
    getnameinfo(found->ai_addr, found->ai_addrlen, address, sizeof address, nullptr, 0, NI_NUMERICHOST);
    const bool loopback = (found->ai_family == AF_INET && (ntohl(reinterpret_cast<sockaddr_in*>(found->ai_addr)->sin_addr.s_addr) >> 24) == 127) ||
                          (found->ai_family == AF_INET6 && IN6_IS_ADDR_LOOPBACK(&reinterpret_cast<sockaddr_in6*>(found->ai_addr)->sin6_addr));
    freeaddrinfo(found);
    if (loopback)
      r.add(doctor_status::note, "jobs", "host",
            std::string("'") + host + "' resolves to " + address +
                ", a loopback address: other nodes reach this one by another (give it as launch --master-addr)");
    else
      r.add(doctor_status::ok, "jobs", "host", std::string("'") + host + "' resolves to " + address);
  } else {
    r.add(doctor_status::note, "jobs", "host",
          std::string("'") + host + "' does not resolve: give other nodes this node's address (launch --master-addr), not its name");
  }

  // Where rank 0's supervisor would listen: free here, or not this host's.
  launch_env env;
  bool env_read = true;
  try {
    env = read_launch_env();
    if (env.launcher != "none")
      r.add(doctor_status::note, "jobs", "launcher",
            "this process is rank " + std::to_string(env.process) + " of " + std::to_string(env.processes) + " (" +
                env.launcher + "'s variables); train here would join that job");
  } catch (const std::invalid_argument& e) {
    r.add(doctor_status::fail, "jobs", "launcher", std::string("the job's variables are inconsistent: ") + e.what());
    env_read = false;
  }
  // The variables a job would take could not be read (MASTER_PORT=abc): no port of theirs to
  // check, and the defaults are not what the job would use.
  if (!env_read && (o.master_addr.empty() || o.master_port == 0))
    r.add(doctor_status::note, "jobs", "master",
          "not checked: the job's MASTER_ADDR / MASTER_PORT are not readable (above); --master-addr and --master-port "
          "name the ones to check");
  else
    check_master_port(r, !o.master_addr.empty() ? o.master_addr : env.master_addr,
                      o.master_port > 0 ? o.master_port : env.master_port);
  const char* token = std::getenv(job_token_variable);
  std::string weak;  // what launch and train would refuse
  if (token && *token) try {
      check_job_token(token);
    } catch (const std::invalid_argument& e) {
      weak = e.what();
    }
  // A job's process (WORLD_SIZE > 1 here) without a token: train refuses to start. Empty is unset.
  if (weak.empty() && (!token || !*token) && env_read && env.processes > 1)
    weak = env.size_variable + "=" + std::to_string(env.processes) + " but " + job_token_variable +
           " is not set: train would refuse to start (start the job with actorpipe launch, which makes one, or export "
           "the same token to every process)";
  if (!weak.empty())
    r.add(doctor_status::fail, "jobs", "job token", weak);
  else
    r.add(doctor_status::ok, "jobs", "job token",
          token && *token ? std::string(job_token_variable) + " is set (never printed)"
                : std::string(job_token_variable) +
                      " is not set: launch makes one for a single node; a job of several nodes needs the same one "
                      "exported on every node (openssl rand -hex 32)");
}

// --dir: a folder that takes files, with its free space. One that does not exist yet is fine
// where train can make it (--save-dir makes its folder): then the folder it would be made in
// is checked, and the line says so.
void check_dir(report& r, const std::string& dir) {
  std::error_code ec;
  const fs::path full = fs::absolute(dir, ec);
  if (const std::string too_long = long_name_part(full); !too_long.empty()) {  // train refuses it
    r.add(doctor_status::fail, "files", "directory", "'" + dir + "': " + too_long + " (--dir)");
    return;
  }
  if (const std::string too_long = checkpoint_path_too_long(full); !too_long.empty()) {  // train refuses it too
    r.add(doctor_status::fail, "files", "directory", "'" + dir + "' " + too_long + " (--dir)");
    return;
  }
  const fs::path at = nearest_existing(ec ? fs::path(dir) : full);  // the folder checked
  const bool made = at != full;
  const std::string named = "'" + dir + "'" + (made ? " does not exist yet, and" : "");
  if (const std::string dangling = dangling_link_text(at); !dangling.empty()) {
    r.add(doctor_status::fail, "files", "directory",
          (made ? named + " cannot be made: '" + at.string() + "' " : "'" + dir + "' ") + dangling + " (--dir)");
    return;
  }
  if (!fs::is_directory(at, ec)) {
    r.add(doctor_status::fail, "files", "directory",
          made ? named + " cannot be made: '" + at.string() + "' is not a directory (--dir)"
               : "'" + dir + "' is not a directory (--dir)");
    return;
  }
  const std::string where = made ? named + " would be made in '" + at.string() + "', which" : "'" + dir + "'";
  if (const folder_probe probe = probe_folder(at, true); !probe.error.empty()) {
    r.add(doctor_status::fail, "files", "directory",
          where + (probe.created ? " takes no writes: " : " takes no new file: ") + probe.error + " (--dir)");
    return;
  }
  struct statvfs fsinfo {};
  const double free_bytes = statvfs(at.c_str(), &fsinfo) == 0 ? double(fsinfo.f_bavail) * fsinfo.f_frsize : -1;
  const std::string text = where + " is writable" + (free_bytes >= 0 ? ", " + gib_text(free_bytes) + " free" : "") +
                           " (checkpoints: parameters and two AdamW moments, 12 bytes a parameter)";
  r.add(free_bytes >= 0 && free_bytes < 1024.0 * 1024 * 1024 ? doctor_status::warn : doctor_status::ok, "files",
        "directory", text);
  // A folder of another run's checkpoints takes a --resume of that run, not a new run (train
  // refuses it as --save-dir without --resume): said, as train would say it.
  if (!made) {
    if (const std::string holder = save_dir_holder(dir); !holder.empty()) {
      r.add(doctor_status::fail, "files", "in use",
            "'" + dir + "' is the --save-dir of a run going on now (" + holder +
                ", holding its .lock): a run saving there is refused until that one ends");
      return;
    }
    try {
      check_save_dir_is_ours(dir, "", 0);
    } catch (const std::invalid_argument& e) {
      r.add(doctor_status::note, "files", "checkpoints", std::string("a new run saving here is refused: ") + e.what());
    }
  }
}

const char* status_word(doctor_status s) {
  switch (s) {
    case doctor_status::ok: return "ok";
    case doctor_status::note: return "note";
    case doctor_status::warn: return "warn";
    case doctor_status::fail: return "FAIL";
  }
  return "?";
}

}  // namespace

double peak_gflops(simd_level cpu, double mhz) {
  if (!(mhz > 0) || !std::isfinite(mhz)) return 0;
  double flops_per_cycle = 8;  // SSE: a 4-wide multiply and add a cycle
  switch (cpu) {
    case simd_level::sse: flops_per_cycle = 8; break;
    case simd_level::avx: flops_per_cycle = 16; break;
    case simd_level::avx2: flops_per_cycle = 32; break;
    case simd_level::avx512:
    case simd_level::avx512_bf16: flops_per_cycle = 64; break;
  }
  return flops_per_cycle * mhz / 1000;
}

std::string peak_text(simd_level cpu, double mhz, const std::string& vendor, int family) {
  const double peak = peak_gflops(cpu, mhz);
  if (peak <= 0) return "";
  std::string text = simd_level_name(cpu) + " at the " + fixed_text(mhz / 1000, 2) + " GHz /proc/cpuinfo gives: ";
  if (vendor == "AuthenticAMD" && family == 25 && cpu >= simd_level::avx512)
    return text + fixed_text(peak / 2, 0) + " (Zen 4 runs a 512-bit FMA on both its 256-bit units; turbo clocks go higher)";
  return text + fixed_text(peak / 2, 0) + " with one FMA unit, " + fixed_text(peak, 0) + " with two (turbo clocks go higher)";
}

doctor_status judge_matmul(double gflops, simd_level cpu, double mhz) {
  const double peak = peak_gflops(cpu, mhz);
  if (peak <= 0) return doctor_status::note;
  return gflops >= 0.3 * peak ? doctor_status::ok : doctor_status::warn;
}

namespace {
// Bad input is refused before the report starts.
void check_doctor_options(const doctor_options& o) {
  if (o.dir.empty()) throw std::invalid_argument("--dir must not be empty");
  if (o.master_port < 0 || o.master_port > 65535)
    throw std::invalid_argument("--master-port=" + std::to_string(o.master_port) + " must be in 1..65535");
  if (o.nproc_per_node < 0)
    throw std::invalid_argument("--nproc-per-node=" + std::to_string(o.nproc_per_node) + " must be >= 1");
}
}  // namespace

std::vector<doctor_finding> run_doctor_checks(const doctor_options& o) {
  check_doctor_options(o);
  std::vector<doctor_finding> all;
  report r(all);
  const simd_level cpu = cpu_simd_level();
  const auto cpuinfo = proc_values("/proc/cpuinfo");
  check_machine(r, cpu, cpuinfo);
  check_compute(r, cpu, cpuinfo);
  check_ucx(r);
  check_gpu(r);
  check_jobs(r, o);
  check_dir(r, o.dir);
  return all;
}

int run_doctor(const doctor_options& o, std::ostream& out) {
  check_doctor_options(o);
  out << "actorpipe doctor: what this machine gives a training run (ok; note; warn: slower than it could be; "
         "FAIL: a run would stop)\n";
  const auto findings = run_doctor_checks(o);
  std::string section;
  int counts[4] = {0, 0, 0, 0};
  for (const auto& f : findings) {
    if (f.section != section) out << '\n' << (section = f.section) << '\n';
    char head[64];
    std::snprintf(head, sizeof head, "  %-5s %-11s ", status_word(f.status), f.item.c_str());
    out << head << f.text << '\n';
    ++counts[static_cast<int>(f.status)];
  }
  const int warns = counts[static_cast<int>(doctor_status::warn)], fails = counts[static_cast<int>(doctor_status::fail)];
  out << '\n';
  if (fails > 0)
    out << fails << (fails == 1 ? " failure" : " failures") << " (FAIL above): a run would stop there; "
        << warns << (warns == 1 ? " warning\n" : " warnings\n");
  else if (warns > 0)
    out << warns << (warns == 1 ? " warning" : " warnings") << " (warn above): runs work, slower than they could\n";
  else
#ifdef ACTORPIPE_WITH_TORCH
    out << "ready: nothing stops or slows a run here (next: actorpipe train, or actorpipe simulate to see a schedule)\n";
#else
    out << "ready: nothing stops a run here (next: actorpipe simulate to see a schedule)\n";
#endif
  return fails > 0 ? exit_failed : 0;
}

}  // namespace actorpipe
