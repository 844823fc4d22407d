// `actorpipe doctor`: a line for every check with its status, the exit code from the failures,
// the failures it must find (a busy master port, a missing or non-directory --dir, too few open
// files for --nproc-per-node, user-chosen generic BLAS kernels, a reference BLAS answering
// LibTorch's products), bad flags refused, and the matmul verdict's thresholds.
#include <catch2/catch.hpp>

#include <filesystem>

#include <sys/resource.h>
#include <unistd.h>

#include <fstream>
#include <regex>
#include <string>

#include "apps/doctor_command.hpp"
#include "core/blas_kernels.hpp"
#include "core/checkpoint/checkpoint_store.hpp"
#include "tests/apps/cli_runner.hpp"
#include "tests/apps/process_runner.hpp"

using namespace actorpipe;
using namespace actorpipe::testing;
using Catch::Contains;

namespace {

// The status word of the report line for `item` ("" when there is none).
std::string status_of(const std::string& report, const std::string& item) {
  std::smatch m;
  if (!std::regex_search(report, m, std::regex("\n  (ok|note|warn|FAIL) +" + item + " +[^ \n]"))) return "";
  return m[1];
}

}  // namespace

CATCH_TEST_CASE("doctor reports every check with its status and exits 1 only when one fails", "[apps][doctor]") {
  const std::string dir = temp_path("-doctor");
  std::filesystem::create_directories(dir);
  const auto r = cli({"doctor", "--dir", dir, "--master-port", std::to_string(free_port())});
  CATCH_INFO(r.out << r.err);
  for (const char* item : {"CPU", "memory", "LibTorch", "UCX", "UCX tcp", "GPU", "open files", "host", "master", "job token",
                           "directory"})
    CATCH_CHECK(status_of(r.out, item) != "");
  CATCH_CHECK(r.code == (r.out.find("\n  FAIL ") != std::string::npos ? 1 : 0));
  CATCH_CHECK(r.err.empty());
#ifdef ACTORPIPE_WITH_TORCH
  for (const char* item : {"BLAS", "matmul", "allocator", "own loops", "threads"}) CATCH_CHECK(status_of(r.out, item) != "");
  std::smatch m;
  CATCH_REQUIRE(std::regex_search(r.out, m, std::regex("matmul +([0-9]+) GFLOP/s on one thread")));
  CATCH_CHECK(std::stoi(m[1]) > 0);
#else
  CATCH_CHECK(status_of(r.out, "LibTorch") == "note");
  CATCH_CHECK_THAT(r.out, Contains("none in this build (-DACTORPIPE_WITH_TORCH=OFF)"));
  CATCH_CHECK(status_of(r.out, "matmul") == "");
#endif
  CATCH_CHECK(status_of(r.out, "UCX") == "ok");  // the data plane the multi-process tests use
  CATCH_CHECK_THAT(r.out, Contains("8 messages of 4 MiB between two workers of this process"));
  CATCH_CHECK(status_of(r.out, "UCX tcp") == "ok");  // the multi-process tests use tcp too
  CATCH_CHECK_THAT(r.out, Contains("the same over TCP alone (UCX_TLS=tcp"));
  CATCH_CHECK(status_of(r.out, "directory") == "ok");
  CATCH_CHECK_THAT(r.out, Contains("'" + dir + "' is writable"));
  CATCH_CHECK(std::filesystem::is_empty(dir));  // its probe file is gone
  const bool fails = r.out.find("\n  FAIL ") != std::string::npos, warns = r.out.find("\n  warn ") != std::string::npos;
  CATCH_CHECK_THAT(r.out, Contains(fails   ? "(FAIL above): a run would stop there"
                                   : warns ? "(warn above): runs work, slower than they could"
                                           : "ready: nothing stops"));
}

CATCH_TEST_CASE("doctor fails a busy master port and a --dir that is missing or no directory, naming each",
                "[apps][doctor]") {
  loopback_listener busy;
  const std::string file = temp_path(".txt");
  std::ofstream(file) << "x";
  auto r = cli({"doctor", "--master-port", std::to_string(busy.port()), "--dir", file + "/ckpt"});
  CATCH_CHECK(r.code == 1);
  CATCH_CHECK(status_of(r.out, "master") == "FAIL");
  CATCH_CHECK_THAT(r.out, Contains("port " + std::to_string(busy.port()) +
                                   " on 127.0.0.1 is in use: a job started here now would fail to listen"));
  CATCH_CHECK(status_of(r.out, "directory") == "FAIL");
  CATCH_CHECK_THAT(r.out, Contains("'" + file + "/ckpt' does not exist yet, and cannot be made: '" + file +
                                   "' is not a directory (--dir)"));
  CATCH_CHECK_THAT(r.out, Contains("2 failures (FAIL above): a run would stop there"));
  r = cli({"doctor", "--master-port", std::to_string(free_port()), "--dir", file});
  CATCH_CHECK(status_of(r.out, "directory") == "FAIL");
  CATCH_CHECK_THAT(r.out, Contains("'" + file + "' is not a directory (--dir)"));
  CATCH_CHECK(status_of(r.out, "master") == "ok");
  CATCH_CHECK(r.code == 1);
  // A folder train would make (as --save-dir makes its own) is fine: the one above it is checked.
  const std::string above = std::filesystem::path(file).parent_path().string();
  r = cli({"doctor", "--master-port", std::to_string(free_port()), "--dir", above + "/actorpipe-new/ckpt"});
  CATCH_CHECK(status_of(r.out, "directory") == "ok");
  CATCH_CHECK_THAT(r.out, Contains("'" + above + "/actorpipe-new/ckpt' does not exist yet, and would be made in '" + above +
                                   "', which is writable, "));
  CATCH_CHECK(!std::filesystem::exists(above + "/actorpipe-new"));
  // A name past 255 bytes: train refuses it.
  r = cli({"doctor", "--master-port", std::to_string(free_port()), "--dir", above + "/" + std::string(300, 'd')});
  CATCH_CHECK(status_of(r.out, "directory") == "FAIL");
  CATCH_CHECK_THAT(r.out, Contains("is 300 bytes, more than the 255 a name may have (--dir)"));
  // A path whose checkpoints' names would pass PATH_MAX: train refuses it, doctor said ready.
  std::string deep = above;
  while (deep.size() < 4000) deep += "/" + std::string(200, 'p');
  r = cli({"doctor", "--master-port", std::to_string(free_port()), "--dir", deep});
  CATCH_CHECK(status_of(r.out, "directory") == "FAIL");
  CATCH_CHECK_THAT(r.out, Contains("' is " + std::to_string(deep.size()) +
                                   " bytes as an absolute path: with its checkpoints' names below it (up to 128 more) "
                                   "it passes the system's limit of 4096 on a path (--dir)"));
  // Folders named as checkpoints are, without a manifest: a new run there is refused, and said to be.
  const std::string named = above + "/actorpipe-named-" + std::to_string(::getpid());
  std::filesystem::create_directories(named + "/step-00000003");
  r = cli({"doctor", "--master-port", std::to_string(free_port()), "--dir", named});
  CATCH_CHECK(status_of(r.out, "directory") == "ok");
  CATCH_CHECK(status_of(r.out, "checkpoints") == "note");
  CATCH_CHECK_THAT(r.out, Contains("a new run saving here is refused: --save-dir '" + named + "' holds step-00000003, "
                                   "named as this run names its checkpoints but no checkpoint"));
  std::filesystem::remove_all(named);
  // A folder a run holds now: any run saving there is refused (doctor said "ok").
  {
    const std::string held = above + "/actorpipe-held-" + std::to_string(::getpid());
    const save_dir_lock lock(held);
    r = cli({"doctor", "--master-port", std::to_string(free_port()), "--dir", held});
    CATCH_CHECK(status_of(r.out, "in use") == "FAIL");
    CATCH_CHECK_THAT(r.out, Contains("'" + held + "' is the --save-dir of a run going on now (process " +
                                     std::to_string(::getpid()) + " on "));
    CATCH_CHECK(r.code == 1);
    std::filesystem::remove_all(held);
  }
  // A symbolic link to nowhere: nothing can be made under its name (train failed there, exit 1).
  const std::string dangling = temp_path(".dangling");
  std::filesystem::create_symlink(above + "/actorpipe-nowhere", dangling);
  r = cli({"doctor", "--master-port", std::to_string(free_port()), "--dir", dangling});
  CATCH_CHECK(status_of(r.out, "directory") == "FAIL");
  CATCH_CHECK_THAT(r.out, Contains("'" + dangling + "' is a symbolic link to '" + above +
                                   "/actorpipe-nowhere', which does not exist (--dir)"));
  r = cli({"doctor", "--master-port", std::to_string(free_port()), "--dir", dangling + "/ckpt"});
  CATCH_CHECK_THAT(r.out, Contains("'" + dangling + "/ckpt' does not exist yet, and cannot be made: '" + dangling +
                                   "' is a symbolic link to '" + above + "/actorpipe-nowhere', which does not exist (--dir)"));
  std::remove(dangling.c_str());
  // MASTER_PORT that a job could not read: the port is not checked (port 29500 was said free,
  // a port no job would use).
  {
    const char* port_before = std::getenv("MASTER_PORT");
    const std::string port_kept = port_before ? port_before : "";
    setenv("MASTER_PORT", "abc", 1);
    r = cli({"doctor"});
    if (port_before) setenv("MASTER_PORT", port_kept.c_str(), 1); else unsetenv("MASTER_PORT");
    CATCH_CHECK(status_of(r.out, "launcher") == "FAIL");
    CATCH_CHECK(status_of(r.out, "master") == "note");
    CATCH_CHECK_THAT(r.out, Contains("not checked: the job's MASTER_ADDR / MASTER_PORT are not readable"));
    CATCH_CHECK(r.out.find("29500") == std::string::npos);
  }
  // A job token launch and train would refuse is a FAIL here too (it said "ok: set").
  const char* before = std::getenv("ACTORPIPE_JOB_TOKEN");
  const std::string kept = before ? before : "";
  setenv("ACTORPIPE_JOB_TOKEN", "short", 1);
  r = cli({"doctor", "--master-port", std::to_string(free_port())});
  if (before) setenv("ACTORPIPE_JOB_TOKEN", kept.c_str(), 1); else unsetenv("ACTORPIPE_JOB_TOKEN");
  CATCH_CHECK(status_of(r.out, "job token") == "FAIL");
  CATCH_CHECK_THAT(r.out, Contains("ACTORPIPE_JOB_TOKEN must be at least 16 characters (it has 5)"));
  CATCH_CHECK(r.code == 1);
}

CATCH_TEST_CASE("doctor checks launch's open files for --nproc-per-node against ulimit -n", "[apps][doctor]") {
  rlimit old{};
  CATCH_REQUIRE(getrlimit(RLIMIT_NOFILE, &old) == 0);
  rlimit low = old;
  low.rlim_cur = 256;  // room for (256 - 32) / 4 = 56 processes
  CATCH_REQUIRE(setrlimit(RLIMIT_NOFILE, &low) == 0);
  const auto many = cli({"doctor", "--nproc-per-node", "57", "--master-port", std::to_string(free_port())});
  const auto fits = cli({"doctor", "--nproc-per-node", "56", "--master-port", std::to_string(free_port())});
  setrlimit(RLIMIT_NOFILE, &old);
  CATCH_CHECK(status_of(many.out, "open files") == "FAIL");
  CATCH_CHECK_THAT(many.out, Contains("limit 256 (ulimit -n): launch --nproc-per-node 57 needs 260; raise it (ulimit -n) "
                                      "or start at most 56"));
  CATCH_CHECK(many.code == 1);
  CATCH_CHECK(status_of(fits.out, "open files") == "ok");
  CATCH_CHECK_THAT(fits.out, Contains("limit 256 (ulimit -n): launch can start up to 56 processes a node"));
  // Too few for UCX's two workers: named, not tried (UCX aborted the process: SIGABRT, 134).
  const std::string dir = temp_path(".dr");
  std::filesystem::create_directories(dir);
  const std::string out = temp_path(".doctor.out");
  const int status = std::system(("bash -c 'ulimit -n 30; exec " + std::string(ACTORPIPE_BIN) + " doctor --dir " + dir +
                                  "' >" + out + " 2>&1").c_str());
  CATCH_CHECK(WIFEXITED(status));
  CATCH_CHECK(WEXITSTATUS(status) == 1);
  const std::string text = read_text(out);
  CATCH_CHECK(status_of(text, "UCX") == "FAIL");
  CATCH_CHECK_THAT(text, Contains("not tried: ") && Contains("under the open-files limit of 30 (ulimit -n)"));
}

CATCH_TEST_CASE("doctor fails a job's process without a job token, as train refuses it", "[apps][doctor]") {
  // It said "ok job token ... is not set: launch makes one" and "ready", exit 0.
  const std::string log = temp_path(".log");
  const int port = free_port();
  const pid_t pid = start_process(ACTORPIPE_BIN, {"doctor"},
                                  {{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "127.0.0.1"},
                                   {"MASTER_PORT", std::to_string(port)}, {"ACTORPIPE_JOB_TOKEN", ""}},
                                  log);
  const int code = wait_process(pid, 120);
  const std::string out = read_text(log);
  CATCH_INFO(out);
  CATCH_CHECK(code == 1);
  CATCH_CHECK(status_of(out, "job token") == "FAIL");
  CATCH_CHECK_THAT(out, Contains("WORLD_SIZE=2 but ACTORPIPE_JOB_TOKEN is not set: train would refuse to start"));
}

CATCH_TEST_CASE("doctor warns of LibTorch's generic kernels the user chose on a CPU with better ones", "[apps][doctor]") {
#ifndef ACTORPIPE_WITH_TORCH
  return;
#endif
  // ATEN_CPU_CAPABILITY=default: LibTorch's ops run without AVX, and doctor said "ok ... ready".
  const simd_level cpu = cpu_simd_level();
  const std::string log = temp_path(".log");
  const pid_t pid = start_process(ACTORPIPE_BIN, {"doctor", "--master-port", std::to_string(free_port())},
                                  {{aten_capability_variable, "default"}, {aten_marker_variable, ""}}, log);
  const int code = wait_process(pid, 120);
  const std::string out = read_text(log);
  CATCH_INFO(out);
  CATCH_CHECK(code == (out.find("\n  FAIL ") != std::string::npos ? 1 : 0));
  if (cpu >= simd_level::avx2) {
    CATCH_CHECK(status_of(out, "LibTorch") == "warn");
    CATCH_CHECK_THAT(out, Contains("kernels for SSE on a CPU with " + simd_level_name(cpu) +
                                   " (unset ATEN_CPU_CAPABILITY and LibTorch or actorpipe picks AVX"));
  } else {
    CATCH_CHECK(status_of(out, "LibTorch") == "ok");
  }
}

CATCH_TEST_CASE("doctor warns of generic BLAS kernels the user chose on a CPU with better ones", "[apps][doctor]") {
  // As a user's shell has it (no marker of actorpipe's own choice), and as a process a run
  // started has it (the marker inherited, a core of its own set): that was "chosen by actorpipe".
  for (const char* marker : {"", "Prescott"}) {
    CATCH_INFO("marker '" << marker << "'");
    const simd_level cpu = cpu_simd_level();
    const std::string log = temp_path(".log");
    const pid_t pid = start_process(ACTORPIPE_BIN, {"doctor", "--master-port", std::to_string(free_port())},
                                    {{"OPENBLAS_CORETYPE", "Prescott"}, {blas_marker_variable, marker}}, log);
    const int code = wait_process(pid, 120);
    const std::string out = read_text(log);
    CATCH_INFO(out);
    CATCH_CHECK(code == (out.find("\n  FAIL ") != std::string::npos ? 1 : 0));
#ifndef ACTORPIPE_WITH_TORCH
    CATCH_CHECK(status_of(out, "BLAS") == "");  // no LibTorch, no BLAS to judge
    return;
#endif
    CATCH_CHECK_THAT(out, Contains("set here: OPENBLAS_CORETYPE=Prescott"));
    if (!current_blas().openblas) {  // LibTorch's own BLAS (the pip build's MKL): the variable changes nothing
      CATCH_CHECK(status_of(out, "BLAS") == "ok");
      CATCH_CHECK_THAT(out, Contains("BLAS        LibTorch's own (BLAS_INFO="));
    } else if (!best_openblas_core(cpu).empty()) {  // OpenBLAS, on a CPU above SSE
      CATCH_CHECK_THAT(out, Contains("OPENBLAS_CORETYPE=Prescott set by the user"));
      CATCH_CHECK(status_of(out, "BLAS") == "warn");
      CATCH_CHECK_THAT(out, Contains("kernels for SSE on a CPU with " + simd_level_name(cpu) +
                                     " (unset OPENBLAS_CORETYPE and actorpipe picks " + best_openblas_core(cpu) + ")"));
    } else {
      CATCH_CHECK(status_of(out, "BLAS") == "ok");
    }
  }
}

// A core OpenBLAS does not have (a typo) was "ok", though OpenBLAS picks one itself; SkylakeX
// on a CPU with AVX-512 BF16 was a warning, though its float32 kernels are Cooperlake's.
CATCH_TEST_CASE("doctor warns of an OPENBLAS_CORETYPE that OpenBLAS does not have, and takes SkylakeX for Cooperlake",
                "[apps][doctor]") {
#ifndef ACTORPIPE_WITH_TORCH
  return;
#endif
  if (!current_blas().openblas) return;  // LibTorch's own BLAS: the variable changes nothing (the test above)
  auto doctor = [](const std::string& core) {
    const std::string log = temp_path(".log");
    const pid_t pid = start_process(ACTORPIPE_BIN, {"doctor", "--master-port", std::to_string(free_port())},
                                    {{"OPENBLAS_CORETYPE", core}, {blas_marker_variable, ""}}, log);
    CATCH_CHECK(wait_process(pid, 120) >= 0);
    return read_text(log);
  };
  const std::string long_typo = "Skylakx" + std::string(100, 'y');
  const std::string typo = doctor(long_typo);
  CATCH_INFO(typo);
  CATCH_CHECK(status_of(typo, "BLAS") == "warn");
  CATCH_CHECK_THAT(typo, Contains("OPENBLAS_CORETYPE=" + long_typo.substr(0, 40) + "... set by the user, a core this "
                                  "OpenBLAS does not have (or cannot run here): it picked "));
  CATCH_CHECK(typo.find(long_typo) == std::string::npos);  // not echoed whole
  if (cpu_simd_level() == simd_level::avx512_bf16) {
    const std::string skylake = doctor("SkylakeX");
    CATCH_INFO(skylake);
    CATCH_CHECK(status_of(skylake, "BLAS") == "ok");
  }
}

CATCH_TEST_CASE("doctor names a reference BLAS that LibTorch's products come from beside a loaded OpenBLAS",
                "[apps][doctor]") {
  // Debian's libblas3 (make deps installs it for this test): the netlib reference BLAS. First in
  // the library path, it answers LibTorch's sgemm_ although actorpipe loads OpenBLAS too.
  const std::string reference = "/usr/lib/x86_64-linux-gnu/blas";
  CATCH_REQUIRE(std::filesystem::exists(reference + "/libblas.so.3"));
  const std::string log = temp_path(".log");
  const pid_t pid = start_process(ACTORPIPE_BIN, {"doctor", "--master-port", std::to_string(free_port())},
                                  {{"LD_LIBRARY_PATH", reference}}, log);
  const int code = wait_process(pid, 120);
  const std::string out = read_text(log);
  CATCH_INFO(out);
  CATCH_CHECK(code == (out.find("\n  FAIL ") != std::string::npos ? 1 : 0));
#ifndef ACTORPIPE_WITH_TORCH
  CATCH_CHECK(status_of(out, "BLAS") == "");
  return;
#endif
  if (!current_blas().openblas) {  // the pip build: MKL inside LibTorch, whatever libblas.so.3 is
    CATCH_CHECK(status_of(out, "BLAS") == "ok");
    return;
  }
  CATCH_CHECK(status_of(out, "BLAS") == "warn");
  CATCH_CHECK_THAT(out, Contains("BLAS        matrix products from " + reference + "/libblas.so.3, not from the OpenBLAS"));
  CATCH_CHECK(status_of(out, "matmul") == "warn");  // ~5 GFLOP/s here against 117-167
  // train says so as it starts, and its summary names where the products came from
  const std::string train_log = temp_path(".log");
  const pid_t train = start_process(ACTORPIPE_BIN,
                                    {"train", "--layers", "2", "--hidden", "32", "--heads", "2", "--seq-len", "16",
                                     "--vocab", "64", "--microbatches", "2", "--microbatch-size", "2", "--steps", "1"},
                                    {{"LD_LIBRARY_PATH", reference}}, train_log);
  CATCH_CHECK(wait_process(train, 120) == 0);
  const std::string trained = read_text(train_log);
  CATCH_CHECK_THAT(trained, Contains("warning: LibTorch's matrix products come from " + reference +
                                     "/libblas.so.3, not from the OpenBLAS this process loaded"));
  CATCH_CHECK_THAT(trained, Contains("BLAS: matrix products from " + reference + "/libblas.so.3"));
}

CATCH_TEST_CASE("doctor refuses bad flags naming them", "[apps][doctor]") {
  auto r = cli({"doctor", "--master-port", "70000"});
  CATCH_CHECK(r.code == 2);
  CATCH_CHECK_THAT(r.err, Contains("actorpipe doctor: error: --master-port=70000 must be in 1..65535"));
  CATCH_CHECK(r.out.empty());  // refused before the report starts (its header came first)
  r = cli({"doctor", "--master-port", "0"});  // 0 is "not given" inside; given, it is refused as launch refuses it
  CATCH_CHECK(r.code == 2);
  CATCH_CHECK(r.err == "actorpipe doctor: error: --master-port=0 must be in 1..65535\n");  // the flag named once
  r = cli({"doctor", "--master-port", "-0"});  // a zero however written (-0 checked the default port)
  CATCH_CHECK(r.code == 2);
  CATCH_CHECK(r.err == "actorpipe doctor: error: --master-port=-0 must be in 1..65535\n");
  r = cli({"doctor", "--nproc-per-node", "00"});
  CATCH_CHECK(r.code == 2);
  CATCH_CHECK(r.err == "actorpipe doctor: error: --nproc-per-node=0 must be >= 1\n");
  r = cli({"doctor", "--nproc-per-node", "-3"});
  CATCH_CHECK(r.code == 2);
  CATCH_CHECK_THAT(r.err, Contains("--nproc-per-node=-3 must be >= 1"));
  r = cli({"doctor", "--dir", ""});
  CATCH_CHECK(r.code == 2);
  CATCH_CHECK_THAT(r.err, Contains("--dir: must not be empty (leave the flag out for its default)"));
  r = cli({"doctor", "--frobnicate"});
  CATCH_CHECK(r.code == 2);
  CATCH_CHECK_THAT(r.err, Contains("actorpipe doctor: error:"));
}

CATCH_TEST_CASE("the matmul verdict: a share of the CPU's fp32 peak at its clock", "[apps][doctor]") {
  CATCH_CHECK(peak_gflops(simd_level::avx512, 2300) == Approx(147.2));
  CATCH_CHECK(peak_gflops(simd_level::avx512_bf16, 2300) == Approx(147.2));
  CATCH_CHECK(peak_gflops(simd_level::avx2, 3000) == Approx(96));
  CATCH_CHECK(peak_gflops(simd_level::avx, 3000) == Approx(48));
  CATCH_CHECK(peak_gflops(simd_level::sse, 3000) == Approx(24));
  CATCH_CHECK(peak_gflops(simd_level::avx512, 0) == 0);
  // Intel's AVX-512 cores have one or two 512-bit units; a Zen 4 splits one 512-bit FMA over its two 256-bit units.
  CATCH_CHECK(peak_text(simd_level::avx512, 2300, "GenuineIntel", 6) ==
              "AVX-512 at the 2.30 GHz /proc/cpuinfo gives: 74 with one FMA unit, 147 with two (turbo clocks go higher)");
  CATCH_CHECK(peak_text(simd_level::avx512_bf16, 2600, "AuthenticAMD", 25) ==
              "AVX-512 BF16 at the 2.60 GHz /proc/cpuinfo gives: 83 (Zen 4 runs a 512-bit FMA on both its 256-bit units; "
              "turbo clocks go higher)");
  CATCH_CHECK_THAT(peak_text(simd_level::avx2, 3000, "AuthenticAMD", 25), Contains("48 with one FMA unit, 96 with two"));
  CATCH_CHECK(peak_text(simd_level::avx512, 0, "AuthenticAMD", 25).empty());
  // This machine (Xeon vCPUs, 2.3 GHz): OpenBLAS's SkylakeX kernels 117-167 GFLOP/s, its generic
  // Prescott kernels 31-34.
  CATCH_CHECK(judge_matmul(117, simd_level::avx512, 2300) == doctor_status::ok);
  CATCH_CHECK(judge_matmul(34, simd_level::avx512, 2300) == doctor_status::warn);
  CATCH_CHECK(judge_matmul(45, simd_level::avx512, 2300) == doctor_status::ok);  // one FMA unit, well under turbo
  CATCH_CHECK(judge_matmul(20, simd_level::avx2, 3000) == doctor_status::warn);
  CATCH_CHECK(judge_matmul(34, simd_level::avx512, 0) == doctor_status::note);  // clock unknown: no verdict
}
