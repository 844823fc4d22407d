// Multi-process jobs end to end, through the actorpipe binary on loopback: bit-identity with
// the one-process run (1f1b, interleaved, zbv; 2 and 4 processes; UCX over tcp and over shared
// memory), checkpoints written by several processes and resumed in other process counts,
// launch --max-restarts recovering a killed process, a process killed mid-step, strangers
// that connect without the job token, SIGTERM / Ctrl-C stopping a run after its step, and a
// job that cannot form (a master port taken, a connect that hangs) ending at once.
#include <catch2/catch.hpp>

#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "actors/control_codec.hpp"
#include "apps/launch_command.hpp"
#include "core/checkpoint/checkpoint_store.hpp"
#include "core/job_token.hpp"
#include "tests/apps/cli_runner.hpp"
#include "tests/apps/process_runner.hpp"
#include "tests/support/megatron_files.hpp"
#include "tests/support/sentiment_task.hpp"

using namespace actorpipe::testing;
using Catch::Contains;

namespace {

const std::string bin = ACTORPIPE_BIN;
const std::string token = "a-test-job-token-0123456789abcdef";

std::vector<std::string> job(const std::string& schedule, int chunks, int steps, const std::string& save) {
  std::vector<std::string> a = {"train",          "--stages", "4",           "--layers",        "8",
                                "--hidden",       "32",       "--heads",     "2",               "--seq-len",
                                "16",             "--steps",  std::to_string(steps), "--microbatches", "8",
                                "--microbatch-size", "2",     "--schedule",  schedule,          "--chunks",
                                std::to_string(chunks), "--step-timeout", "60"};
  if (!save.empty()) a.insert(a.end(), {"--save-final", save});
  return a;
}

std::map<std::string, std::string> worker_env(int rank, int world, int port, const std::string& tok = token) {
  return {{"RANK", std::to_string(rank)},      {"WORLD_SIZE", std::to_string(world)},
          {"MASTER_ADDR", "127.0.0.1"},        {"MASTER_PORT", std::to_string(port)},
          {"ACTORPIPE_JOB_TOKEN", tok},        {"UCX_TLS", "tcp,self"}};
}

// `actorpipe launch --nproc-per-node N --master-port <a free one> -- <train...>`.
// A port on 127.0.0.1 that listens and never accepts, its backlog full: a connect to it hangs
// in the kernel (SYN retries), as to a process 0 whose port takes no connections.
class full_backlog {
 public:
  full_backlog() {
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons(static_cast<std::uint16_t>(listener_.port()));
    for (int i = 0; i < 3; ++i) {  // fill the queue: these are never accepted
      const int c = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
      connect(c, reinterpret_cast<sockaddr*>(&a), sizeof a);
      clients_.push_back(c);
    }
  }
  ~full_backlog() {
    for (int c : clients_) close(c);
  }
  full_backlog(const full_backlog&) = delete;
  full_backlog& operator=(const full_backlog&) = delete;
  int port() const { return listener_.port(); }

 private:
  loopback_listener listener_{0};
  std::vector<int> clients_;
};

std::vector<std::string> launched(int processes, const std::vector<std::string>& train) {
  std::vector<std::string> args = {"launch", "--nproc-per-node", std::to_string(processes), "--master-port",
                                   std::to_string(free_port()), "--"};
  args.insert(args.end(), train.begin(), train.end());
  return args;
}

std::string one_process_reference(const std::string& schedule, int chunks, int steps) {
  const std::string ref = temp_path(".ref.safetensors");
  const std::string log = temp_path(".ref.log");
  auto args = job(schedule, chunks, steps, ref);
  pid_t pid = start_process(bin, args, {}, log);
  CATCH_REQUIRE(wait_process(pid, 120) == 0);
  return ref;
}

// One schedule: the one-process reference, then 2 and 4 processes over tcp and over the
// shared-memory transports (UCX's posix, sysv and cma).
void check_bit_identical(const std::string& schedule, int chunks) {
  const std::string ref_bytes = read_bytes(one_process_reference(schedule, chunks, 5));
  CATCH_REQUIRE(ref_bytes.size() > 1000);
  for (const std::string tls : {"tcp,self", "posix,sysv,cma,self"}) {
    for (int processes : {2, 4}) {
      const std::string out = temp_path(".mp.safetensors"), log = temp_path(".mp.log");
      pid_t pid = start_process(bin, launched(processes, job(schedule, chunks, 5, out)), {{"UCX_TLS", tls}}, log);
      const int code = wait_process(pid, 120);
      CATCH_INFO(schedule << ", " << processes << " processes, UCX_TLS=" << tls << ":\n" << process_log(log));
      CATCH_CHECK(code == 0);
      CATCH_CHECK(read_text(log).find("processes: " + std::to_string(processes)) != std::string::npos);
      CATCH_CHECK(read_bytes(out) == ref_bytes);  // every parameter, bit for bit, same layout
    }
  }
}

}  // namespace

CATCH_TEST_CASE("1f1b in 2 and 4 processes is bit-identical to one process", "[multiprocess][slow]") {
  check_bit_identical("1f1b", 1);
}
CATCH_TEST_CASE("interleaved in 2 and 4 processes is bit-identical to one process", "[multiprocess][slow]") {
  check_bit_identical("interleaved", 2);
}
CATCH_TEST_CASE("zbv in 2 and 4 processes is bit-identical to one process", "[multiprocess][slow]") {
  check_bit_identical("zbv", 2);
}

CATCH_TEST_CASE("a user's model with buffers on process 0's stage saves them in 2 processes as in one, and one whose stage gets no gradient trains alike",
                "[multiprocess]") {
  // --save-final of a job of several processes took process 0's stages' parameters without
  // their buffers (a BatchNorm's statistics); the other processes sent theirs.
  const std::string models = TEST_MODELS_BIN;
  const std::vector<std::string> train = {"train", "--model", "test-mlp-bn", "--stages", "2", "--steps", "3",
                                          "--microbatches", "4", "--microbatch-size", "4", "--step-timeout", "60"};
  auto saving = [&](std::vector<std::string> args, const std::string& out) {
    args.insert(args.end(), {"--save-final", out});
    return args;
  };
  const std::string one = temp_path(".bn1.safetensors"), two = temp_path(".bn2.safetensors");
  const std::string log1 = temp_path(".bn1.log"), log2 = temp_path(".bn2.log");
  CATCH_REQUIRE(wait_process(start_process(models, saving(train, one), {}, log1), 120) == 0);
  const int code = wait_process(start_process(models, launched(2, saving(train, two)), {{"UCX_TLS", "tcp,self"}}, log2), 120);
  CATCH_INFO(process_log(log2));
  CATCH_REQUIRE(code == 0);
  const std::string saved = read_bytes(one);
  CATCH_CHECK(saved.find("\"in.1.running_mean\"") != std::string::npos);  // in the header: a buffer of stage 0's
  CATCH_CHECK(read_bytes(two) == saved);
  // "No gradient" crosses processes too: h1 ignores its input, cut right before it.
  const std::vector<std::string> no_path = {"train", "--model", "test-mlp-no-path", "--stages", "2", "--steps", "3",
                                            "--partition", "counts:3,5", "--weight-decay", "0.1", "--schedule", "zb-h1",
                                            "--microbatches", "4", "--microbatch-size", "4", "--step-timeout", "60"};
  CATCH_REQUIRE(wait_process(start_process(models, saving(no_path, one), {}, log1), 120) == 0);
  const int cut_code = wait_process(start_process(models, launched(2, saving(no_path, two)), {{"UCX_TLS", "tcp,self"}}, log2), 120);
  CATCH_INFO(process_log(log2));
  CATCH_REQUIRE(cut_code == 0);
  CATCH_CHECK(read_bytes(two) == read_bytes(one));
  // Two layers on two processes that name their parameters alike: each process is clear of its
  // own, the gathered file is not. The job trained, then failed at --save-final (exit 1; with
  // --save-every, at its first checkpoint): process 0 now gathers every process's names as the
  // job forms and refuses it, exit 2 in every process, and launch does not start it again.
  std::vector<std::string> same = launched(2, {"train", "--model", "test-mlp-same-prefix", "--stages", "2", "--steps",
                                               "2", "--microbatches", "4", "--microbatch-size", "4", "--step-timeout",
                                               "60"});
  same.insert(same.begin() + 1, {"--max-restarts", "2"});
  const auto clock = std::chrono::steady_clock::now();
  const int same_code = wait_process(start_process(models, same, {{"UCX_TLS", "tcp,self"}}, log2), 120);
  CATCH_INFO(process_log(log2));
  CATCH_CHECK(same_code == 2);
  CATCH_CHECK(std::chrono::steady_clock::now() - clock < std::chrono::seconds(60));  // not a join timeout
  const std::string clash = "parameter 'p.fc.weight' is held by virtual stages 0 (process 0) and 1 (process 1): two "
                            "layers give their parameters the same names (give them distinct param prefixes)";
  CATCH_CHECK_THAT(read_text(log2), Contains("the job's model cannot be saved: " + clash));
  CATCH_CHECK_THAT(read_text(log2), Contains("refused this process: the job's model cannot be saved: " + clash));
  CATCH_CHECK(read_text(log2).find("step 1") == std::string::npos);
  CATCH_CHECK(read_text(log2).find("restarting the job") == std::string::npos);
}

// A tensor of no elements or of no dimensions at a cut trained in one process and stopped a
// job of two on CAF's "unhandled exception" (the frame wanted every dimension > 0 and at least
// one); a parameter of no elements failed --save-final there after the whole run, and its own
// checkpoint could not be resumed ("optimizer state of 'expand.none': missing"). A tensor no
// frame holds (9 dimensions) is one error naming what was sent.
CATCH_TEST_CASE("tensors of no elements or no dimensions cross processes and resume as in one process",
                "[multiprocess]") {
  const std::string models = TEST_MODELS_BIN;
  auto train = [](const std::string& cut, int steps) {
    return std::vector<std::string>{"train", "--model", "test-cut-" + cut, "--stages", "2", "--partition", "counts:2,2",
                                    "--steps", std::to_string(steps), "--microbatches", "4", "--microbatch-size", "4",
                                    "--weight-decay", "0.1", "--step-timeout", "60"};
  };
  auto with = [](std::vector<std::string> args, const std::vector<std::string>& more) {
    args.insert(args.end(), more.begin(), more.end());
    return args;
  };
  const std::string one = temp_path(".cut1.safetensors"), two = temp_path(".cut2.safetensors");
  const std::string log1 = temp_path(".cut1.log"), log2 = temp_path(".cut2.log");
  std::string empty_bytes;  // the 3-step run of test-cut-empty
  for (const std::string cut : {"empty", "scalar"}) {
    CATCH_INFO("cut: " << cut);
    CATCH_REQUIRE(wait_process(start_process(models, with(train(cut, 3), {"--save-final", one}), {}, log1), 120) == 0);
    const int code = wait_process(
        start_process(models, launched(2, with(train(cut, 3), {"--save-final", two})), {{"UCX_TLS", "tcp,self"}}, log2),
        120);
    CATCH_INFO(process_log(log2));
    CATCH_CHECK(code == 0);
    CATCH_CHECK(read_bytes(two) == read_bytes(one));
    CATCH_CHECK(read_bytes(one).find("\"expand.none\"") != std::string::npos);
    if (cut == "empty") empty_bytes = read_bytes(one);
  }
  // Its checkpoint resumes to the straight run's bits.
  const std::string dir = temp_path(".cutckpt");
  CATCH_REQUIRE(wait_process(start_process(models, with(train("empty", 2), {"--save-dir", dir}), {}, log1), 120) == 0);
  const int resumed = wait_process(
      start_process(models, with(train("empty", 3), {"--resume", dir, "--save-final", two}), {}, log2), 120);
  CATCH_INFO(process_log(log2));
  CATCH_CHECK(resumed == 0);
  CATCH_CHECK(read_bytes(two) == empty_bytes);
  std::filesystem::remove_all(dir);
  // The same with ZeRO-1 shards over two replicas.
  const std::vector<std::string> zero = {"--dp", "2", "--zero", "1"};
  CATCH_REQUIRE(wait_process(start_process(models, with(with(train("empty", 3), zero), {"--save-final", one}), {}, log1), 120) == 0);
  CATCH_REQUIRE(wait_process(start_process(models, with(with(train("empty", 2), zero), {"--save-dir", dir}), {}, log1), 120) == 0);
  const int zero_resumed = wait_process(
      start_process(models, with(with(train("empty", 3), zero), {"--resume", dir, "--save-final", two}), {}, log2), 120);
  CATCH_INFO(process_log(log2));
  CATCH_CHECK(zero_resumed == 0);
  CATCH_CHECK(read_bytes(two) == read_bytes(one));
  std::filesystem::remove_all(dir);
  // 9 dimensions: no frame holds them. Every run would fail so: refused (exit 2), and launch
  // --max-restarts does not start it again.
  std::vector<std::string> nine_args = launched(2, train("nine-dims", 2));
  nine_args.insert(nine_args.begin() + 1, {"--max-restarts", "2"});
  const int nine = wait_process(start_process(models, nine_args, {{"UCX_TLS", "tcp,self"}}, log2), 120);
  CATCH_INFO(process_log(log2));
  CATCH_CHECK(nine == 2);
  CATCH_CHECK_THAT(read_text(log2), Contains("rank 0, step 1: sending the activation of microbatch 0 to virtual stage 1 "
                                             "(process 1) failed (a tensor no transport frame holds): ucx transport: "
                                             "cannot send this tensor to process 1: frame: ndims=9 is above max_dims=8"));
  CATCH_CHECK(read_text(log2).find("unhandled exception") == std::string::npos);
  CATCH_CHECK(read_text(log2).find("restarting the job") == std::string::npos);
}

// A layer whose forward updates a buffer cannot train under --activation-checkpointing (the
// recompute counts it again): every run fails so at its first forward. It failed with exit 1,
// and launch --max-restarts started it again each time.
CATCH_TEST_CASE("a model --activation-checkpointing cannot run is refused with exit 2, and launch does not restart it",
                "[multiprocess]") {
  const std::string models = TEST_MODELS_BIN;
  const std::vector<std::string> train = {"train", "--model", "test-mlp-counting", "--stages", "2", "--steps", "2",
                                          "--microbatches", "4", "--microbatch-size", "4", "--activation-checkpointing",
                                          "--step-timeout", "60"};
  const std::string log = temp_path(".counting.log");
  CATCH_CHECK(wait_process(start_process(models, train, {}, log), 120) == 2);
  CATCH_CHECK_THAT(read_text(log), Contains("buffer 'h0.count' changed in the forward, which --activation-checkpointing "
                                            "runs again in backward"));
  std::vector<std::string> args = launched(2, train);
  args.insert(args.begin() + 1, {"--max-restarts", "2"});
  const int code = wait_process(start_process(models, args, {{"UCX_TLS", "tcp,self"}}, log), 120);
  CATCH_INFO(process_log(log));
  CATCH_CHECK(code == 2);
  CATCH_CHECK(read_text(log).find("restarting the job") == std::string::npos);
}

// Started through the dynamic loader (ld.so actorpipe launch ...), launch ran the loader as
// "the running program" in every process, on "train" (exit 127).
CATCH_TEST_CASE("launch started through the dynamic loader starts actorpipe in every process", "[multiprocess]") {
  const std::string loader = "/lib64/ld-linux-x86-64.so.2";
  CATCH_REQUIRE(std::filesystem::exists(loader));
  const std::string ref_bytes = read_bytes(one_process_reference("1f1b", 1, 2));
  const std::string out = temp_path(".loader.safetensors"), log = temp_path(".loader.log");
  std::vector<std::string> args = launched(2, job("1f1b", 1, 2, out));
  args.insert(args.begin(), bin);
  const int code = wait_process(start_process(loader, args, {{"UCX_TLS", "tcp,self"}}, log), 120);
  CATCH_INFO(process_log(log));
  CATCH_CHECK(code == 0);
  CATCH_CHECK(read_bytes(out) == ref_bytes);
  CATCH_CHECK_THAT(read_text(log), Contains("ld-linux-x86-64.so.2 " + bin + " train "));
}

CATCH_TEST_CASE("three of four ranks in one process still match one process bit for bit", "[multiprocess][slow]") {
  const std::string ref_bytes = read_bytes(one_process_reference("1f1b", 1, 3));
  const int port = free_port();
  const std::string out = temp_path(".rpp.safetensors");
  std::vector<std::string> logs = {temp_path(".p0.log"), temp_path(".p1.log")};
  std::vector<pid_t> pids;
  for (int p = 0; p < 2; ++p) {
    auto args = job("1f1b", 1, 3, p == 0 ? out : "");
    args.insert(args.end(), {"--ranks-per-process", "1,3"});
    pids.push_back(start_process(bin, args, worker_env(p, 2, port), logs[p]));
  }
  for (int p = 0; p < 2; ++p) {
    CATCH_INFO("process " << p << ":\n" << process_log(logs[p]));
    CATCH_CHECK(wait_process(pids[p], 120) == 0);
  }
  CATCH_CHECK(read_text(logs[0]).find("ranks per process 1 3") != std::string::npos);
  CATCH_CHECK(read_bytes(out) == ref_bytes);
}

CATCH_TEST_CASE("dp=2 x pp=2 in 4 processes and in 2 processes of 2 ranks is bit-identical to one process",
                "[multiprocess][dp]") {
  auto dp_job = [](int zero, const std::string& save) {
    auto a = job("1f1b", 1, 3, save);
    a[2] = "2";  // --stages
    a.insert(a.end(), {"--dp", "2", "--zero", std::to_string(zero), "--bucket-mb", "0.01"});
    return a;
  };
  const std::string ref = temp_path(".dpref.safetensors"), ref_log = temp_path(".dpref.log");
  CATCH_REQUIRE(wait_process(start_process(bin, dp_job(1, ref), {}, ref_log), 120) == 0);
  const std::string ref_bytes = read_bytes(ref);
  CATCH_REQUIRE(ref_bytes.size() > 1000);
  for (int zero : {0, 1})
    for (int processes : {4, 2}) {
      const std::string out = temp_path(".dp.safetensors"), log = temp_path(".dp.log");
      const int code =
          wait_process(start_process(bin, launched(processes, dp_job(zero, out)), {{"UCX_TLS", "tcp,self"}}, log), 120);
      CATCH_INFO("zero " << zero << ", " << processes << " processes:\n" << process_log(log));
      CATCH_CHECK(code == 0);
      CATCH_CHECK(read_text(log).find("pipelines (ranks): 0-1 | 2-3; data-parallel groups: 0,2 | 1,3") != std::string::npos);
      CATCH_CHECK(read_bytes(out) == ref_bytes);
    }
}

// Per step of a --metrics file: step -> (loss, grad norm), as written (full precision).
std::map<long long, std::pair<double, double>> losses_of(const std::string& metrics_path) {
  std::map<long long, std::pair<double, double>> out;
  std::istringstream in(read_text(metrics_path));
  for (std::string line; std::getline(in, line);) {
    const auto j = nlohmann::json::parse(line);
    out[j.at("step").get<long long>()] = {j.at("loss").get<double>(), j.at("grad_norm").get<double>()};
  }
  return out;
}

CATCH_TEST_CASE("10 steps in 2 processes, saved at 4, resume to 10 in 2 processes and in 1 bit for bit (1f1b, zbv)",
                "[multiprocess][checkpoint]") {
  auto launch = [&](const std::vector<std::string>& train, int processes, const std::string& log) {
    return wait_process(start_process(bin, launched(processes, train), {{"UCX_TLS", "tcp,self"}}, log), 120);
  };
  for (const auto& [schedule, chunks] : {std::pair<std::string, int>{"1f1b", 1}, {"zbv", 2}}) {
    CATCH_INFO(schedule);
    const std::string ref = temp_path(".ckref.safetensors"), ref_metrics = temp_path(".ckref.jsonl");
    auto straight = job(schedule, chunks, 10, ref);
    straight.insert(straight.end(), {"--metrics", ref_metrics});
    CATCH_REQUIRE(wait_process(start_process(bin, straight, {}, temp_path(".ckref.log")), 120) == 0);
    const std::string ref_bytes = read_bytes(ref);
    CATCH_REQUIRE(ref_bytes.size() > 1000);
    const auto ref_losses = losses_of(ref_metrics);
    CATCH_REQUIRE(ref_losses.size() == 10);

    // The saving run: 2 processes, each writing its ranks' parts.
    const std::string dir = temp_path(".ckdir"), saved = temp_path(".cksaved.safetensors");
    auto saving = job(schedule, chunks, 10, saved);
    saving.insert(saving.end(), {"--save-dir", dir, "--save-every", "4"});
    const std::string save_log = temp_path(".cksave.log");
    const int save_code = launch(saving, 2, save_log);
    CATCH_INFO(process_log(save_log));
    CATCH_REQUIRE(save_code == 0);
    CATCH_CHECK(read_bytes(saved) == ref_bytes);

    for (int processes : {2, 1}) {
      const std::string out = temp_path(".ckres.safetensors"), log = temp_path(".ckres.log");
      const std::string metrics = temp_path(".ckres.jsonl");
      auto resume = job(schedule, chunks, 10, out);
      resume.insert(resume.end(), {"--resume", dir + "/step-00000004", "--metrics", metrics});
      const int code = processes == 1 ? wait_process(start_process(bin, resume, {}, log), 120) : launch(resume, 2, log);
      CATCH_INFO(processes << " processes:\n" << process_log(log));
      CATCH_CHECK(code == 0);
      CATCH_CHECK(read_text(log).find("resumed from " + dir + "/step-00000004 (steps 5..10 ran here)") != std::string::npos);
      CATCH_CHECK(read_bytes(out) == ref_bytes);
      const auto losses = losses_of(metrics);
      CATCH_CHECK(losses.size() == 6);
      for (const auto& [step, value] : losses) {
        CATCH_INFO("step " << step);
        CATCH_CHECK(ref_losses.count(step) == 1);
        if (ref_losses.count(step) == 1) CATCH_CHECK(value == ref_losses.at(step));
      }
    }
  }
}

CATCH_TEST_CASE("a run SIGKILLed at 20 moments while it saves every step leaves only complete checkpoints, and the "
                "restart resumes bit-identical", "[multiprocess][checkpoint][crash]") {
  const int steps = 12;
  auto saving = [&](const std::string& dir, const std::string& out) {
    auto a = job("1f1b", 1, steps, out);
    a.insert(a.end(), {"--save-dir", dir, "--save-every", "1"});
    return a;
  };
  // The uninterrupted run, also timing the span from its first checkpoint to its end.
  const std::string ref = temp_path(".crref.safetensors"), ref_dir = temp_path(".crref");
  const auto t0 = std::chrono::steady_clock::now();
  const pid_t straight = start_process(bin, saving(ref_dir, ref), {}, temp_path(".crref.log"));
  const double first_save = wait_for_file(ref_dir + "/latest", 60);
  CATCH_REQUIRE(wait_process(straight, 120) == 0);
  const double window = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() - first_save;
  const std::string ref_bytes = read_bytes(ref);
  CATCH_REQUIRE(ref_bytes.size() > 1000);

  int partial_seen = 0, restarted_from_scratch = 0;
  const int trials = 20;
  for (int trial = 0; trial < trials; ++trial) {
    CATCH_INFO("trial " << trial);
    const std::string dir = temp_path(".crdir"), log = temp_path(".cr.log");
    const pid_t pid = start_process(bin, saving(dir, ""), {}, log);
    CATCH_REQUIRE(wait_for_file(dir + "/latest", 60) >= 0);
    // Spread the kills over the rest of the run.
    std::this_thread::sleep_for(std::chrono::duration<double>(window * (trial + 0.5) / trials));
    kill(pid, SIGKILL);
    wait_process(pid, 10);

    // What the kill left: every step directory complete, `latest` naming one of them.
    for (const auto& e : std::filesystem::directory_iterator(dir)) {
      const std::string name = e.path().filename().string();
      if (name.rfind("step-", 0) == 0) {
        CATCH_INFO(name);
        CATCH_CHECK_NOTHROW(actorpipe::verify_checkpoint(e.path().string()));
      }
      if (name.rfind(".partial-", 0) == 0) ++partial_seen;
    }
    const std::string latest = read_text(dir + "/latest");
    CATCH_CHECK_NOTHROW(actorpipe::verify_checkpoint(dir + "/" + latest.substr(0, latest.find('\n'))));

    // The restart, as launch --max-restarts would start it: resumes and ends where the
    // uninterrupted run did.
    const std::string out = temp_path(".cr.safetensors"), rlog = temp_path(".cr.resume.log");
    const int code = wait_process(start_process(bin, saving(dir, out), {{"ACTORPIPE_RESTART_COUNT", "1"}}, rlog), 120);
    CATCH_INFO(process_log(rlog));
    CATCH_CHECK(code == 0);
    // (A kill after the last step's checkpoint: the restart trains no more, and writes
    // --save-final from it.)
    CATCH_CHECK((read_text(rlog).find("restart 1 of the job: resuming from " + dir + "/step-000000") != std::string::npos ||
                 read_text(rlog).find("restart 1 of the job: " + dir + "/step-00000012 holds the last step") !=
                     std::string::npos));
    if (read_text(rlog).find("training starts again") != std::string::npos) ++restarted_from_scratch;
    CATCH_CHECK(read_bytes(out) == ref_bytes);
    std::filesystem::remove_all(dir);
  }
  CATCH_CHECK(restarted_from_scratch == 0);
  // How many kills caught a checkpoint half-written (timing decides; reported, not asserted).
  CATCH_WARN(partial_seen << " of " << trials << " kills left a partial checkpoint behind");
  std::filesystem::remove_all(ref_dir);
}

// A 2-process job of `steps` steps saving every 3 into `dir`, started by run_launch with
// --max-restarts 2. Each process runs actorpipe train through a shell; on the attempts
// `doomed` names (a shell test of $ACTORPIPE_RESTART_COUNT) process 1 is SIGKILLed (its
// train, then the shell launch watches) once the checkpoint of step 3 x (attempt + 1) is
// complete: mid-run, or at the latest just after the run, a failure either way.
struct restart_run {
  int code = -1;
  std::string text;  // launch's lines and the processes'
};
restart_run launch_with_kills(int steps, const std::string& dir, const std::string& out, const std::string& doomed) {
  auto train = job("1f1b", 1, steps, out);
  train.insert(train.end(), {"--save-dir", dir, "--save-every", "3"});
  std::string cmd = bin;
  for (const auto& a : train) cmd += " '" + a + "'";
  const std::string script =
      "if " + doomed + " && [ \"$RANK\" = 1 ]; then " + cmd + " & pid=$!; i=0; "
      "f=$(printf '%s/step-%08d/manifest.json' " + dir + " $((3 * (ACTORPIPE_RESTART_COUNT + 1)))); "
      "while [ ! -e $f ] && [ $i -lt 3000 ]; do sleep 0.02; i=$((i+1)); done; "
      "kill -9 $pid; kill -9 $$; fi; exec " + cmd;
  actorpipe::launch_options o;
  o.nproc_per_node = 2;
  o.master_port = free_port();
  o.max_restarts = 2;
  o.grace_s = 5;
  o.program = "/bin/sh";
  o.command = {"-c", script};
  o.env = {"UCX_TLS=tcp,self", "ACTORPIPE_JOB_TOKEN=" + token};
  const std::string out_log = temp_path(".rs.out"), err_log = temp_path(".rs.err");
  o.out_fd = open(out_log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  o.err_fd = open(err_log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  std::ostringstream log;
  restart_run r;
  r.code = actorpipe::run_launch(o, log);
  close(o.out_fd);
  close(o.err_fd);
  r.text = log.str() + read_text(out_log) + read_text(err_log);
  return r;
}

CATCH_TEST_CASE("launch --max-restarts: a process killed mid-run is restarted with the job, which resumes and ends "
                "bit-identical to a straight run", "[multiprocess][checkpoint][restart]") {
  const int steps = 12;
  const std::string ref = temp_path(".rsref.safetensors"), dir = temp_path(".rsdir");
  CATCH_REQUIRE(wait_process(start_process(bin, job("1f1b", 1, steps, ref), {}, temp_path(".rsref.log")), 120) == 0);
  const std::string ref_bytes = read_bytes(ref);
  CATCH_REQUIRE(ref_bytes.size() > 1000);
  const std::string out = temp_path(".rs.safetensors");
  const restart_run r = launch_with_kills(steps, dir, out, "[ \"$ACTORPIPE_RESTART_COUNT\" = 0 ]");
  CATCH_INFO(r.text);
  CATCH_CHECK(r.code == 0);
  CATCH_CHECK(r.text.find("attempt 1 failed (process 1 (local 1) was killed by signal 9); restarting the job "
                          "(restart 1 of 2)") != std::string::npos);
  CATCH_CHECK(r.text.find("restart 1 of the job: resuming from " + dir + "/step-0000000") != std::string::npos);
  CATCH_CHECK(r.text.find("resumed from " + dir + "/step-0000000") != std::string::npos);
  CATCH_CHECK(r.text.find("giving up") == std::string::npos);
  CATCH_CHECK(read_bytes(out) == ref_bytes);
}

CATCH_TEST_CASE("Ctrl-C to launch's process group stops the job checkpointed, and a stop sent to one process (either) "
                "stops the job the same way and is not restarted", "[multiprocess][checkpoint][restart]") {
  // A terminal's Ctrl-C reaches every process of the group, and launch passes it on too: the
  // second copy ended process 0 at once, before its checkpoint (exit 130, nothing saved). A
  // signal to process 1 alone (one node of a job preempted) went unheard by process 0 until
  // process 1 ended itself after --step-timeout, without a checkpoint, and launch restarted.
  for (const int to : {-1, 0, 1}) {  // -1: the group
    const bool whole_group = to < 0;
    CATCH_CAPTURE(to);
    const std::string dir = temp_path(".cc"), log = temp_path(".cc.log");
    std::vector<std::string> args = {bin, "launch", "--nproc-per-node", "2", "--master-port", std::to_string(free_port()),
                                     "--max-restarts", "1", "--"};
    for (const auto& a : job("1f1b", 1, 100000, "")) args.push_back(a);
    args.insert(args.end(), {"--save-dir", dir, "--save-every", "50"});
    // setsid: launch leads a process group of its own, as a shell's foreground job does.
    const pid_t pid = start_process("/usr/bin/setsid", args, {{"UCX_TLS", "tcp,self"}}, log);
    CATCH_REQUIRE(wait_for_file(dir + "/latest", 90) >= 0);
    if (whole_group) {
      kill(-pid, SIGINT);
    } else {  // SIGINT to one process alone: the job stops, checkpointed, and exits 130
      std::istringstream children(read_text("/proc/" + std::to_string(pid) + "/task/" + std::to_string(pid) + "/children"));
      std::vector<pid_t> kids;
      for (pid_t k; children >> k;) kids.push_back(k);
      CATCH_REQUIRE(kids.size() == 2);
      kill(kids[to], SIGINT);  // launch starts process 0 first
    }
    const int code = wait_process(pid, 90);
    CATCH_INFO(process_log(log));
    CATCH_CHECK(code == 130);
    CATCH_CHECK(read_text(log).find("stopped by SIGINT after step ") != std::string::npos);
    CATCH_CHECK(read_text(log).find("restarting the job") == std::string::npos);
    if (!whole_group)
      CATCH_CHECK(read_text(log).find("not restarting: the job stopped on the SIGINT one of its processes was sent "
                                      "(after its checkpoint where it could take one)") != std::string::npos);
    if (to == 1) CATCH_CHECK(read_text(log).find("process 1 got SIGINT: the job stops after the step in flight") != std::string::npos);
    const std::string latest = read_text(dir + "/latest");
    CATCH_CHECK_NOTHROW(actorpipe::verify_checkpoint(dir + "/" + latest.substr(0, latest.find('\n'))));
    std::filesystem::remove_all(dir);
  }
}

CATCH_TEST_CASE("launch --max-restarts 2 with a process killed on every attempt gives up after 2 restarts with the history",
                "[multiprocess][checkpoint][restart]") {
  const std::string dir = temp_path(".rsdir"), out = temp_path(".rs.safetensors");
  const restart_run r = launch_with_kills(12, dir, out, "true");
  CATCH_INFO(r.text);
  CATCH_CHECK(r.code == 128 + 9);
  CATCH_CHECK(r.text.find("restart 2 of 2: starting 2 processes again") != std::string::npos);
  CATCH_CHECK(r.text.find("giving up after 2 restarts (--max-restarts 2); the job failed 3 times:\n"
                          "  attempt 1: process 1 (local 1) was killed by signal 9 after ") != std::string::npos);
  CATCH_CHECK(r.text.find("\n  attempt 3: process 1 (local 1) was killed by signal 9 after ") != std::string::npos);
  // Each attempt went on from the last one's checkpoint: at least the one it was killed after.
  auto resumed_step = [&](int restart) {
    const std::string head = "restart " + std::to_string(restart) + " of the job: resuming from " + dir + "/step-";
    const auto at = r.text.find(head);
    return at == std::string::npos ? -1 : std::stoi(r.text.substr(at + head.size(), 8));
  };
  CATCH_CHECK(resumed_step(1) >= 3);
  CATCH_CHECK(resumed_step(2) >= 6);
  CATCH_CHECK(resumed_step(2) >= resumed_step(1));  // equal when attempt 1 was killed before it saved
}

namespace {

// A --metrics file's lines with the timings left out: what two layouts of one job must share.
std::vector<std::string> metrics_numbers(const std::string& path) {
  std::vector<std::string> out;
  std::istringstream in(read_text(path));
  for (std::string line; std::getline(in, line);) {
    auto j = nlohmann::json::parse(line);
    for (const char* k : {"seconds", "tokens_per_s", "bubble_ratio", "eval_seconds", "peak_activations", "busy_seconds"}) j.erase(k);
    out.push_back(j.dump());
  }
  return out;
}

}  // namespace

CATCH_TEST_CASE("bert with evaluation in 2 processes gives one process's losses and eval results bit for bit",
                "[multiprocess][bert]") {
  const std::string train = temp_path(".train.tsv"), dev = temp_path(".dev.tsv");
  std::ofstream(train) << actorpipe::testing::sentiment_tsv(actorpipe::testing::sentiment_rows(120, 21));
  std::ofstream(dev) << actorpipe::testing::sentiment_tsv(actorpipe::testing::sentiment_rows(50, 22));
  auto args = [&](const std::string& metrics) {
    return std::vector<std::string>{"train", "--model", "bert", "--stages", "2", "--chunks", "2", "--schedule", "zbv",
                                    "--layers", "4", "--hidden", "32", "--heads", "2", "--seq-len", "16",
                                    "--microbatches", "4", "--microbatch-size", "4", "--steps", "6", "--eval-every", "3",
                                    "--data-file", train, "--eval-file", dev, "--metrics", metrics};
  };
  const std::string one = temp_path(".b1.jsonl"), two = temp_path(".b2.jsonl");
  CATCH_REQUIRE(wait_process(start_process(bin, args(one), {}, temp_path(".b1.log")), 120) == 0);
  const std::string log = temp_path(".b2.log");
  const int code = wait_process(start_process(bin, launched(2, args(two)), {{"UCX_TLS", "tcp,self"}}, log), 120);
  CATCH_INFO(process_log(log));
  CATCH_REQUIRE(code == 0);
  // Every loss, gradient norm and eval result the same; timings aside.
  const auto a = metrics_numbers(one), b = metrics_numbers(two);
  CATCH_CHECK(a.size() == 8);  // 6 steps, 2 passes
  CATCH_CHECK(a == b);
}

CATCH_TEST_CASE("the gpt with evaluation in 2 processes gives one process's losses and eval results bit for bit",
                "[multiprocess][eval]") {
  const std::vector<std::string> job = {"train", "--stages", "2", "--schedule", "1f1b", "--layers", "2", "--hidden", "32",
                                        "--heads", "2", "--seq-len", "16", "--vocab", "64", "--microbatches", "4",
                                        "--microbatch-size", "2", "--steps", "4", "--eval-every", "2", "--metrics"};
  auto args = [&](const std::string& metrics) {
    std::vector<std::string> a = job;
    a.push_back(metrics);
    return a;
  };
  const std::string one = temp_path(".g1.jsonl"), two = temp_path(".g2.jsonl");
  CATCH_REQUIRE(wait_process(start_process(bin, args(one), {}, temp_path(".g1.log")), 120) == 0);
  const std::string log = temp_path(".g2.log");
  const int code = wait_process(start_process(bin, launched(2, args(two)), {{"UCX_TLS", "tcp,self"}}, log), 120);
  CATCH_INFO(process_log(log));
  CATCH_REQUIRE(code == 0);
  const auto a = metrics_numbers(one), b = metrics_numbers(two);
  CATCH_CHECK(a.size() == 6);  // 4 steps, 2 passes
  CATCH_CHECK(a == b);
  CATCH_CHECK(read_text(one).find("\"perplexity\"") != std::string::npos);
}

CATCH_TEST_CASE("a process killed with SIGKILL mid-step stops the job within 10 s, naming the lost rank",
                "[multiprocess][failure]") {
  const int port = free_port();
  std::vector<std::string> logs;
  std::vector<pid_t> pids;
  for (int p = 0; p < 3; ++p) {
    logs.push_back(temp_path(".kill" + std::to_string(p) + ".log"));
    auto args = job("1f1b", 1, 100000, "");
    args.insert(args.end(), {"--ranks-per-process", "2,1,1"});
    pids.push_back(start_process(bin, args, worker_env(p, 3, port), logs[p]));
  }
  // Training is under way once process 0 reports its third step.
  const bool started = wait_for_text(logs[0], "step 3/", 60);
  CATCH_INFO("process 0:\n" << process_log(logs[0]));
  CATCH_REQUIRE(started);
  kill(pids[1], SIGKILL);
  const auto killed = std::chrono::steady_clock::now();
  const int code0 = wait_process(pids[0], 10);
  const int code2 = wait_process(pids[2], 10);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - killed).count();
  wait_process(pids[1], 5);
  CATCH_INFO("process 0:\n" << process_log(logs[0]) << "\nprocess 2:\n" << process_log(logs[2]));
  CATCH_CHECK(code0 > 0);  // -1 would mean it hung and had to be killed
  CATCH_CHECK(code2 > 0);
  CATCH_CHECK(seconds < 10);
  CATCH_CHECK(read_text(logs[0]).find("lost process 1 (rank 2") != std::string::npos);
  CATCH_CHECK(read_text(logs[2]).find("lost process 1 (rank 2") != std::string::npos);
}

CATCH_TEST_CASE("losing process 0 stops the other processes", "[multiprocess][failure]") {
  const int port = free_port();
  std::vector<std::string> logs = {temp_path(".k0.log"), temp_path(".k1.log")};
  std::vector<pid_t> pids;
  for (int p = 0; p < 2; ++p) pids.push_back(start_process(bin, job("1f1b", 1, 100000, ""), worker_env(p, 2, port), logs[p]));
  CATCH_REQUIRE(wait_for_text(logs[0], "step 2/", 60));
  kill(pids[0], SIGKILL);
  const int code1 = wait_process(pids[1], 10);
  wait_process(pids[0], 5);
  CATCH_INFO("process 1:\n" << process_log(logs[1]));
  CATCH_CHECK(code1 > 0);
  CATCH_CHECK(read_text(logs[1]).find("lost the connection to process 0") != std::string::npos);
}

CATCH_TEST_CASE("strangers without the job token are refused and logged while the job goes on unaffected",
                "[multiprocess][security]") {
  const int steps = 200;  // long enough to still run while the strangers knock
  const std::string ref_bytes = read_bytes(one_process_reference("1f1b", 1, steps));
  const int port = free_port();
  const std::string out = temp_path(".stray.safetensors");
  std::vector<std::string> logs = {temp_path(".s0.log"), temp_path(".s1.log")};
  std::vector<pid_t> pids;
  for (int p = 0; p < 2; ++p)
    pids.push_back(start_process(bin, job("1f1b", 1, steps, p == 0 ? out : ""), worker_env(p, 2, port), logs[p]));
  CATCH_REQUIRE(wait_for_text(logs[0], "step 2/", 60));

  // An actorpipe process with the wrong token, claiming to be process 1.
  const std::string stray_log = temp_path(".stray.log");
  pid_t stray = start_process(bin, job("1f1b", 1, steps, ""), worker_env(1, 2, port, "not-the-job-token-but-long-enough"),
                              stray_log);

  // Raw connections: garbage instead of a hello, an oversized frame, and a silent one that hangs up.
  auto connect_raw = [&] {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(port));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    CATCH_REQUIRE(connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
    return fd;
  };
  {
    int fd = connect_raw();
    const char garbage[] = "\x08\x00\x00\x00MXXXXXXX";  // a message frame before any hello
    CATCH_CHECK(send(fd, garbage, sizeof garbage - 1, MSG_NOSIGNAL) > 0);
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    close(fd);
  }
  {
    int fd = connect_raw();
    const unsigned char huge[] = {0xff, 0xff, 0xff, 0x7f, 'H'};
    CATCH_CHECK(send(fd, huge, sizeof huge, MSG_NOSIGNAL) > 0);
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    close(fd);
  }
  close(connect_raw());
  const int stray_code = wait_process(stray, 30);
  CATCH_INFO("stray:\n" << process_log(stray_log));
  CATCH_CHECK(stray_code > 0);
  CATCH_CHECK(read_text(stray_log).find("refused this process: wrong job token") != std::string::npos);

  for (int p = 0; p < 2; ++p) {
    const int code = wait_process(pids[p], 120);
    CATCH_INFO("process " << p << ":\n" << process_log(logs[p]));
    CATCH_CHECK(code == 0);
  }
  const std::string log0 = read_text(logs[0]);
  CATCH_CHECK(log0.find("[p0 r0-1] actorpipe: warning: refused a connection from 127.0.0.1:") != std::string::npos);
  CATCH_CHECK(log0.find("wrong job token") != std::string::npos);
  CATCH_CHECK(log0.find("before proving the job token") != std::string::npos);
  CATCH_CHECK(log0.find("a frame of 2147483647 bytes") != std::string::npos);
  CATCH_CHECK(log0.find(token) == std::string::npos);  // the token is never logged
  CATCH_CHECK(read_bytes(out) == ref_bytes);
}

namespace {
int open_files(pid_t pid) {
  int n = 0;
  for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator("/proc/" + std::to_string(pid) + "/fd")) ++n;
  return n;
}

int count_of(const std::string& text, const std::string& what) {
  int n = 0;
  for (auto at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}
}  // namespace

// A flood of connections that never say hello: process 0 held each for its 10 s with no bound,
// its open files ran out, and the next checkpoint failed and stopped the job (3 of 3 with
// ulimit -n 1024); every refusal was a line (32,840 in 25 s). Now at most 64 + 2 x processes
// wait at once, the oldest that has not proven the token closed for a newer one (closing the
// newest turned away a member that came during a flood: the job never formed), and the
// refusals are said once a minute.
CATCH_TEST_CASE("a flood of connections that never say hello costs process 0 no more than its cap of open files, "
                "and the job forms and goes on",
                "[multiprocess][security]") {
  const int steps = 200;
  const std::string ref_bytes = read_bytes(one_process_reference("1f1b", 1, steps));
  const int port = free_port();
  const std::string out = temp_path(".flood.safetensors");
  std::vector<std::string> logs = {temp_path(".f0.log"), temp_path(".f1.log")};
  std::vector<pid_t> pids;
  pids.push_back(start_process(bin, job("1f1b", 1, steps, out), worker_env(0, 2, port), logs[0]));
  CATCH_REQUIRE(wait_for_text(logs[0], "listening", 60));
  const int before = open_files(pids[0]);
  std::vector<int> flood;
  const auto knock = [&](int n) {
    for (int i = 0; i < n; ++i)
      if (const int fd = connect_loopback(port); fd >= 0) flood.push_back(fd);
  };
  knock(300);  // held while the job forms and trains
  pids.push_back(start_process(bin, job("1f1b", 1, steps, ""), worker_env(1, 2, port), logs[1]));
  CATCH_CHECK(wait_for_text(logs[0], "step 2/", 60));
  knock(300);  // and more while it trains
  std::this_thread::sleep_for(std::chrono::seconds(2));
  const int during = open_files(pids[0]);
  for (const int fd : flood) close(fd);
  CATCH_CHECK(flood.size() == 600);
  CATCH_CHECK(during - before <= 64 + 2 * 2 + 16);  // the cap, and the job's own (process 1, UCX)
  for (int p = 0; p < 2; ++p) {
    const int code = wait_process(pids[p], 120);
    CATCH_INFO("process " << p << ":\n" << process_log(logs[p]));
    CATCH_CHECK(code == 0);
  }
  CATCH_CHECK(read_bytes(out) == ref_bytes);
  const std::string log0 = read_text(logs[0]);
  CATCH_INFO(log0);
  CATCH_CHECK(count_of(log0, "refused a connection from 127.0.0.1:") <= 3);
  CATCH_CHECK(log0.find("closed for a newer connection: 68 connections wait to join already, the most process 0 keeps") !=
              std::string::npos);
  CATCH_CHECK(log0.find(" more connections from 127.0.0.1 (not each said: one line a minute for each address and "
                        "reason)") != std::string::npos);
}

namespace {
// A connection to process 0 that proves the job token as `process` (it holds the token) and
// sends nothing more: no join. Closed when it goes.
class silent_token_holder {
 public:
  silent_token_holder(int port, int process) {
    fd_ = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(port));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    CATCH_REQUIRE(connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
    char head[5];
    CATCH_REQUIRE(recv(fd_, head, 5, MSG_WAITALL) == 5);
    CATCH_REQUIRE(head[4] == actorpipe::control_wire::challenge);
    std::vector<std::uint8_t> challenge(actorpipe::control_wire::frame_length(head) - 1);
    CATCH_REQUIRE(recv(fd_, challenge.data(), challenge.size(), MSG_WAITALL) == static_cast<ssize_t>(challenge.size()));
    actorpipe::control_wire::hello_frame h;
    h.process = process;
    h.joiner = "a token holder that never joins";
    h.answer = actorpipe::answer_challenge(token, challenge, h.joiner);
    const std::vector<char> frame =
        actorpipe::control_wire::make_frame(actorpipe::control_wire::hello, actorpipe::control_wire::encode_hello(h));
    CATCH_REQUIRE(send(fd_, frame.data(), frame.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(frame.size()));
  }
  ~silent_token_holder() { close(fd_); }
  // An envelope frame of bytes that are no envelope.
  void send_garbage_envelope() {
    const std::string junk = "not an envelope";
    const std::vector<char> frame = actorpipe::control_wire::make_frame(actorpipe::control_wire::envelope,
                                                                        std::vector<char>(junk.begin(), junk.end()));
    CATCH_CHECK(send(fd_, frame.data(), frame.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(frame.size()));
  }
  silent_token_holder(const silent_token_holder&) = delete;
  silent_token_holder& operator=(const silent_token_holder&) = delete;

 private:
  int fd_ = -1;
};
}  // namespace

// A connection that proved the token and never joined was kept for ever; the real process
// with its index joined beside it, and when it closed, process 0 dropped the real one: a
// running job failed, blaming process 1. Now such a connection is refused 10 s after its
// hello, and one that closes first is not the process that joined.
CATCH_TEST_CASE("a token holder that never joins is refused after 10 s, and its going costs the job nothing",
                "[multiprocess][security]") {
  const std::string ref_bytes = read_bytes(one_process_reference("1f1b", 1, 40));
  const int port = free_port();
  const std::string out = temp_path(".holder.safetensors");
  std::vector<std::string> logs = {temp_path(".h0.log"), temp_path(".h1.log")};
  auto args0 = job("1f1b", 1, 40, out);  // still running when the stray connection speaks
  args0.insert(args0.end(), {"--join-timeout", "40"});
  const pid_t p0 = start_process(bin, args0, worker_env(0, 2, port), logs[0]);
  CATCH_REQUIRE(wait_for_text(logs[0], "listening", 30));
  {
    silent_token_holder first(port, 1);
    CATCH_CHECK(wait_for_text(logs[0], "proved the job token as process 1 but sent no join within 10 s", 20));
  }
  pid_t p1 = 0;
  {
    silent_token_holder second(port, 1);
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    p1 = start_process(bin, job("1f1b", 1, 40, ""), worker_env(1, 2, port), logs[1]);
    CATCH_REQUIRE(wait_for_text(logs[0], "every process joined", 30));
    // Its malformed envelope dropped the real process 1 and failed the job, blaming it.
    second.send_garbage_envelope();
    CATCH_CHECK(wait_for_text(logs[0], "before joining", 20));
  }  // closes while the job runs
  for (const pid_t pid : {p0, p1}) {
    const int code = wait_process(pid, 120);
    CATCH_INFO("process 0:\n" << process_log(logs[0]) << "\nprocess 1:\n" << process_log(logs[1]));
    CATCH_CHECK(code == 0);
  }
  CATCH_CHECK(read_bytes(out) == ref_bytes);
}

namespace {
// A "process 0" that accepts one connection, sends `bytes`, and holds the connection open
// until it goes: not actorpipe's hub (another program on MASTER_PORT).
class fake_process_0 {
 public:
  explicit fake_process_0(std::string bytes) {
    fd_ = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t size = sizeof a;
    CATCH_REQUIRE(bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
    CATCH_REQUIRE(listen(fd_, 4) == 0);
    CATCH_REQUIRE(getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &size) == 0);
    port_ = ntohs(a.sin_port);
    server_ = std::thread([this, bytes = std::move(bytes)] {
      const int c = accept(fd_, nullptr, nullptr);
      if (c < 0) return;
      send(c, bytes.data(), bytes.size(), MSG_NOSIGNAL);
      for (int i = 0; i < 300 && !done_.load(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(100));
      close(c);
    });
  }
  ~fake_process_0() {
    done_.store(true);
    shutdown(fd_, SHUT_RDWR);
    server_.join();
    close(fd_);
  }
  fake_process_0(const fake_process_0&) = delete;
  fake_process_0& operator=(const fake_process_0&) = delete;
  int port() const { return port_; }

 private:
  int fd_ = -1, port_ = 0;
  std::atomic<bool> done_{false};
  std::thread server_;
};
}  // namespace

// A member met a process 0 that sent it what actorpipe's does not (another program on the
// port): a bad frame length or an unknown frame type was dropped without a word and the
// member waited out --join-timeout, then blamed the other processes; a challenge of another
// length ended in CAF's "unhandled exception"; a refusal's control bytes reached the terminal.
CATCH_TEST_CASE("a member ends at once on what no actorpipe process 0 sends, naming it", "[multiprocess][security]") {
  struct sent { std::string bytes, expected; };
  const std::vector<sent> cases = {
      {std::string("\xff\xff\xff\x7f", 4), "sent a frame of 2147483647 bytes"},
      {std::string("\x05\x00\x00\x00" "Cabcd", 9), "sent a challenge of 4 bytes (actorpipe's are 32)"},
      {std::string("\x01\x00\x00\x00" "Z", 5), "sent a frame of unknown type 'Z'"},
      {std::string("\x07\x00\x00\x00" "R\x1b[2Jx!", 11), "refused this process: \\x1b[2Jx!"},
  };
  for (const sent& c : cases) {
    CATCH_INFO(c.expected);
    fake_process_0 fake(c.bytes);
    const std::string log = temp_path(".fake0.log");
    auto args = job("1f1b", 1, 2, "");
    args.insert(args.end(), {"--join-timeout", "30"});
    const auto t0 = std::chrono::steady_clock::now();
    const int code = wait_process(start_process(bin, args, worker_env(1, 2, fake.port()), log), 60);
    const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    CATCH_INFO(process_log(log));
    CATCH_CHECK(code == 1);
    CATCH_CHECK(waited < 15);
    const std::string text = read_text(log);
    CATCH_CHECK(text.find(c.expected) != std::string::npos);
    CATCH_CHECK(text.find('\x1b') == std::string::npos);
    CATCH_CHECK(text.find("unhandled exception") == std::string::npos);
  }
}

// A program that accepts and says nothing: the member blamed "the other processes" when its
// --join-timeout ran out.
CATCH_TEST_CASE("a member whose MASTER_PORT answers with silence says another program may listen there",
                "[multiprocess][security]") {
  fake_process_0 silent("");
  const std::string log = temp_path(".silent0.log");
  auto args = job("1f1b", 1, 2, "");
  args.insert(args.end(), {"--join-timeout", "3"});
  const int code = wait_process(start_process(bin, args, worker_env(1, 2, silent.port()), log), 60);
  CATCH_INFO(process_log(log));
  CATCH_CHECK(code == 1);
  CATCH_CHECK_THAT(read_text(log), Contains("accepted the connection but sent nothing of actorpipe's handshake within 3 "
                                            "s (--join-timeout): is another program listening on MASTER_PORT?"));
}

// Process 0's join timeout under a flood said to check MASTER_ADDR, MASTER_PORT, WORLD_SIZE and
// the token, where it had closed thousands of connections for newer ones meanwhile.
CATCH_TEST_CASE("process 0's join timeout names a flood of connections it closed meanwhile", "[multiprocess][security]") {
  const int port = free_port();
  const std::string log = temp_path(".flood0.log");
  auto args = job("1f1b", 1, 2, "");
  args.insert(args.end(), {"--join-timeout", "3"});
  const pid_t p0 = start_process(bin, args, worker_env(0, 2, port), log);
  CATCH_REQUIRE(wait_for_text(log, "listening", 60));
  std::vector<int> flood;
  for (int i = 0; i < 100; ++i)
    if (const int fd = connect_loopback(port); fd >= 0) flood.push_back(fd);
  const int code = wait_process(p0, 60);
  for (const int fd : flood) close(fd);
  CATCH_INFO(process_log(log));
  CATCH_CHECK(code == 1);
  CATCH_CHECK_THAT(read_text(log), Contains("only 1 of 2 processes joined within 3 s (--join-timeout); missing: 1; "
                                            "meanwhile ") &&
                                       Contains(" connections were closed for newer ones, past 68 waiting at once: a "
                                                "flood of connections may have kept the missing processes out"));
}

namespace {
// Between a member and process 0 on 127.0.0.1: its first `crowded` connections get process 0's
// refusal under a flood ("closed for a newer connection: ...") and are closed; the next is
// relayed to process 0's port, both ways, until either side closes.
class crowding_relay {
 public:
  crowding_relay(int target_port, int crowded) {
    server_ = std::thread([this, target_port, crowded] {
      const std::string why = std::string(actorpipe::control_wire::refusal_crowded) +
                              "68 connections wait to join already, the most process 0 keeps (a flood of connections?)";
      const std::vector<char> refusal =
          actorpipe::control_wire::make_frame(actorpipe::control_wire::refusal, std::vector<char>(why.begin(), why.end()));
      while (!done_.load()) {
        pollfd p{listener_.fd(), POLLIN, 0};
        if (poll(&p, 1, 100) != 1) continue;
        const int c = accept(listener_.fd(), nullptr, nullptr);
        if (c < 0) continue;
        if (accepted_.fetch_add(1) < crowded) {
          send(c, refusal.data(), refusal.size(), MSG_NOSIGNAL);
          close(c);
          continue;
        }
        relay(c, target_port);
        close(c);
      }
    });
  }
  ~crowding_relay() {
    done_.store(true);
    server_.join();
  }
  crowding_relay(const crowding_relay&) = delete;
  crowding_relay& operator=(const crowding_relay&) = delete;
  int port() const { return listener_.port(); }
  int accepted() const { return accepted_.load(); }

 private:
  void relay(int c, int target_port) {
    const int u = connect_loopback(target_port);
    if (u >= 0) {
      char buf[65536];
      while (!done_.load()) {
        pollfd p[2] = {{c, POLLIN, 0}, {u, POLLIN, 0}};
        if (poll(p, 2, 100) <= 0) continue;
        bool open = true;
        for (int i = 0; i < 2 && open; ++i) {
          if (p[i].revents == 0) continue;
          const ssize_t n = recv(p[i].fd, buf, sizeof buf, 0);
          open = n > 0 && send(p[1 - i].fd, buf, static_cast<std::size_t>(n), MSG_NOSIGNAL) == n;
        }
        if (!open) break;
      }
      close(u);
    }
  }

  loopback_listener listener_{4};
  std::atomic<bool> done_{false};
  std::atomic<int> accepted_{0};
  std::thread server_;  // last: it starts once the listener is there
};
}  // namespace

// Under a flood of connections process 0 closes the oldest that has not proven the token for
// each new one; a member's connection could be that one within its handshake, and the member
// failed at once ("process 0 refused this process"), so the job never formed. It now connects
// again until --join-timeout.
CATCH_TEST_CASE("a member closed for a newer connection connects again and the job trains to the same bits",
                "[multiprocess][security]") {
  const std::string ref_bytes = read_bytes(one_process_reference("1f1b", 1, 3));
  const int port = free_port();
  crowding_relay relay(port, 2);
  const std::string out = temp_path(".crowded.safetensors");
  std::vector<std::string> logs = {temp_path(".c0.log"), temp_path(".c1.log")};
  const pid_t p0 = start_process(bin, job("1f1b", 1, 3, out), worker_env(0, 2, port), logs[0]);
  CATCH_REQUIRE(wait_for_text(logs[0], "listening", 30));
  const pid_t p1 = start_process(bin, job("1f1b", 1, 3, ""), worker_env(1, 2, relay.port()), logs[1]);
  for (const pid_t pid : {p0, p1}) {
    const int code = wait_process(pid, 120);
    CATCH_INFO("process 0:\n" << process_log(logs[0]) << "\nprocess 1:\n" << process_log(logs[1]));
    CATCH_CHECK(code == 0);
  }
  CATCH_CHECK(read_bytes(out) == ref_bytes);
  CATCH_CHECK(relay.accepted() == 3);
  const std::string log1 = read_text(logs[1]);
  CATCH_CHECK(count_of(log1, "closed this process's connection: closed for a newer connection: 68 connections") == 1);
  CATCH_CHECK(log1.find("connecting again until --join-timeout") != std::string::npos);
}

// A process 0 that closes every connection for a newer one: the member says so when its
// --join-timeout runs out (not "the other processes did not all join").
CATCH_TEST_CASE("a member that process 0 keeps closing for newer connections says so at its join timeout",
                "[multiprocess][security]") {
  crowding_relay always(free_port(), 1000000);
  const std::string log = temp_path(".crowd.log");
  auto args = job("1f1b", 1, 2, "");
  args.insert(args.end(), {"--join-timeout", "3"});
  const auto t0 = std::chrono::steady_clock::now();
  const int code = wait_process(start_process(bin, args, worker_env(1, 2, always.port()), log), 60);
  const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  CATCH_INFO(process_log(log));
  CATCH_CHECK(code == 1);
  CATCH_CHECK(waited > 2.5);
  CATCH_CHECK(always.accepted() >= 5);
  CATCH_CHECK_THAT(read_text(log), Contains("did not admit this process within 3 s (--join-timeout): it closed its "
                                            "connection ") &&
                                       Contains(" times for newer ones (the last: closed for a newer connection: 68 "
                                                "connections wait to join already"));
}

CATCH_TEST_CASE("multi-process setup errors are one clear line", "[multiprocess]") {
  // A missing token, a bad --ranks-per-process, a process 0 that never comes.
  const std::string log = temp_path(".err.log");
  auto env = worker_env(1, 2, free_port());
  env.erase("ACTORPIPE_JOB_TOKEN");
  CATCH_CHECK(wait_process(start_process(bin, job("1f1b", 1, 2, ""), env, log), 30) == 2);
  CATCH_CHECK(read_text(log).find("ACTORPIPE_JOB_TOKEN is not set") != std::string::npos);

  auto args = job("1f1b", 1, 2, "");
  args.insert(args.end(), {"--ranks-per-process", "1,2"});
  CATCH_CHECK(wait_process(start_process(bin, args, worker_env(0, 2, free_port()), log), 30) == 2);
  CATCH_CHECK(read_text(log).find("--ranks-per-process=1,2 sums to 3 but the job has --stages=4 ranks") != std::string::npos);

  args = job("1f1b", 1, 2, "");
  args.insert(args.end(), {"--join-timeout", "1"});
  CATCH_CHECK(wait_process(start_process(bin, args, worker_env(1, 2, free_port()), log), 30) > 0);
  CATCH_CHECK(read_text(log).find("could not reach process 0 at 127.0.0.1:") != std::string::npos);

  CATCH_CHECK(wait_process(start_process(bin, args, worker_env(0, 2, free_port()), log), 30) > 0);
  CATCH_CHECK(read_text(log).find("only 1 of 2 processes joined within 1 s (--join-timeout); missing: 1") != std::string::npos);
}

CATCH_TEST_CASE("a process started with other options is refused, told which ones differ", "[multiprocess]") {
  const int port = free_port();
  const std::string log0 = temp_path(".j0.log"), log1 = temp_path(".j1.log");
  auto args0 = job("1f1b", 1, 2, "");
  args0.insert(args0.end(), {"--join-timeout", "6", "--lr", "0.003"});
  auto args1 = job("1f1b", 1, 3, "");
  args1.insert(args1.end(), {"--lr", "0.01"});
  const pid_t p0 = start_process(bin, args0, worker_env(0, 2, port), log0);
  const pid_t p1 = start_process(bin, args1, worker_env(1, 2, port), log1);
  const int code1 = wait_process(p1, 30);
  CATCH_INFO("process 1:\n" << process_log(log1));
  CATCH_CHECK(code1 > 0);
  CATCH_CHECK(read_text(log1).find("refused this process: process 1 runs a different job: --steps 3 against process 0's "
                                   "--steps 2; --lr 0.01 against process 0's --lr 0.003") != std::string::npos);
  // Process 0 logs the refusal and goes on waiting for a process 1 that matches; when none
  // comes, its error says why the missing one is missing.
  CATCH_CHECK(wait_for_text(log0, "runs a different job: --steps 3", 10));
  const int code0 = wait_process(p0, 30);
  CATCH_INFO("process 0:\n" << process_log(log0));
  CATCH_CHECK(code0 == 1);
  CATCH_CHECK(read_text(log0).find("missing: 1; the last process refused: process 1 runs a different job: --steps 3") !=
              std::string::npos);
}

CATCH_TEST_CASE("processes resuming from checkpoints of other steps are refused, told which steps", "[multiprocess]") {
  // They formed the job, trained mixed states, then waited on each other until --step-timeout.
  const std::string dir = temp_path(".resume-mix"), log = temp_path(".rm.log");
  auto saving = job("1f1b", 1, 4, "");
  saving.insert(saving.end(), {"--save-dir", dir, "--save-every", "2"});
  CATCH_REQUIRE(wait_process(start_process(bin, saving, {}, log), 120) == 0);
  const int port = free_port();
  const std::string log0 = temp_path(".rm0.log"), log1 = temp_path(".rm1.log");
  auto args0 = job("1f1b", 1, 6, ""), args1 = job("1f1b", 1, 6, "");
  args0.insert(args0.end(), {"--resume", dir + "/step-00000002", "--join-timeout", "4"});
  args1.insert(args1.end(), {"--resume", dir + "/step-00000004"});
  const pid_t p0 = start_process(bin, args0, worker_env(0, 2, port), log0);
  const pid_t p1 = start_process(bin, args1, worker_env(1, 2, port), log1);
  CATCH_CHECK(wait_process(p1, 30) > 0);
  CATCH_INFO("process 1:\n" << process_log(log1));
  CATCH_CHECK_THAT(read_text(log1), Contains("runs a different job: --resume of a step-4 checkpoint against process 0's "
                                             "--resume of a step-2 checkpoint"));
  CATCH_CHECK(wait_process(p0, 30) == 1);
  // Step 2 of another run (each machine's own folder, filled by another run): the same step
  // passed, and the job trained process 0's stages from one and process 1's from the other.
  const std::string other = temp_path(".resume-other");
  auto saving_other = job("1f1b", 1, 2, "");
  saving_other.insert(saving_other.end(), {"--save-dir", other, "--lr", "0.01"});
  CATCH_REQUIRE(wait_process(start_process(bin, saving_other, {}, log), 120) == 0);
  args1 = job("1f1b", 1, 6, "");
  args1.insert(args1.end(), {"--resume", other + "/step-00000002"});
  const int port2 = free_port();
  const pid_t q0 = start_process(bin, args0, worker_env(0, 2, port2), log0);
  const pid_t q1 = start_process(bin, args1, worker_env(1, 2, port2), log1);
  CATCH_CHECK(wait_process(q1, 30) > 0);
  CATCH_INFO("process 1:\n" << process_log(log1));
  CATCH_CHECK_THAT(read_text(log1), Contains("runs a different job: --resume of another step-2 checkpoint than process 0's "
                                             "(its manifest's digest ") &&
                                        Contains("each process must resume from a copy of the same checkpoint"));
  CATCH_CHECK(wait_process(q0, 30) == 1);
  std::filesystem::remove_all(dir);
  std::filesystem::remove_all(other);
}

CATCH_TEST_CASE("a default given aloud forms the job, a difference is named by its flag, and every process exits as the "
                "job ended", "[multiprocess]") {
  // The documented defaults, written out by one process only: "partition=type:^blocks\\. against process 0's
  // partition=" refused the same job (and launch --max-restarts retried it).
  {
    const int port = free_port();
    const std::string log0 = temp_path(".d0.log"), log1 = temp_path(".d1.log"), out = temp_path(".d.safetensors");
    auto args1 = job("1f1b", 1, 2, "");
    args1.insert(args1.end(), {"--partition", "type:^blocks\\.", "--ranks-per-process", "2,2"});
    const pid_t p0 = start_process(bin, job("1f1b", 1, 2, out), worker_env(0, 2, port), log0);
    const pid_t p1 = start_process(bin, args1, worker_env(1, 2, port), log1);
    CATCH_CHECK(wait_process(p1, 120) == 0);
    CATCH_INFO("process 0:\n" << process_log(log0));
    CATCH_CHECK(wait_process(p0, 120) == 0);
    CATCH_CHECK(read_bytes(out) == read_bytes(one_process_reference("1f1b", 1, 2)));
  }
  // A difference reads as the flags say it (it was "warmup=2", "replan=false").
  {
    const int port = free_port();
    const std::string log0 = temp_path(".w0.log"), log1 = temp_path(".w1.log");
    auto args0 = job("1f1b", 1, 2, ""), args1 = job("1f1b", 1, 2, "");
    args0.insert(args0.end(), {"--join-timeout", "4"});
    args1.insert(args1.end(), {"--warmup-steps", "2", "--unit-cost-plan", "--save-dir", temp_path(".member-ckpt"),
                               "--heartbeat-timeout", "0"});
    const pid_t p0 = start_process(bin, args0, worker_env(0, 2, port), log0);
    const pid_t p1 = start_process(bin, args1, worker_env(1, 2, port), log1);
    CATCH_CHECK(wait_process(p1, 30) > 0);
    CATCH_INFO("process 1:\n" << process_log(log1));
    CATCH_CHECK_THAT(read_text(log1), Contains("--warmup-steps 2 against process 0's --warmup-steps 5") &&
                                          Contains("--unit-cost-plan against process 0's no --unit-cost-plan") &&
                                          Contains("--save-dir against process 0's no --save-dir") &&
                                          Contains("--heartbeat-timeout 0 against process 0's --heartbeat-timeout 60"));
    CATCH_CHECK(wait_process(p0, 30) == 1);
  }
  // SIGTERM to process 0 alone stops the job: process 1 exits 143 too (it exited 0, a success
  // to srun).
  {
    const int port = free_port();
    const std::string log0 = temp_path(".s0.log"), log1 = temp_path(".s1.log");
    const pid_t p0 = start_process(bin, job("1f1b", 1, 2000, ""), worker_env(0, 2, port), log0);
    const pid_t p1 = start_process(bin, job("1f1b", 1, 2000, ""), worker_env(1, 2, port), log1);
    CATCH_REQUIRE(wait_for_text(log0, "step 3/2000", 60));
    kill(p0, SIGTERM);
    CATCH_CHECK(wait_process(p0, 60) == 143);
    CATCH_INFO("process 1:\n" << process_log(log1));
    CATCH_CHECK(wait_process(p1, 60) == 143);
  }
}

CATCH_TEST_CASE("processes compare what their plan and data files hold, not their paths", "[multiprocess]") {
  // Each process reads its own copy: one path may hold different plans (the job formed, then
  // hung until --step-timeout), and one plan may lie under two names.
  auto plan_text = [](bool reversed) {  // gpipe on 4 ranks, 8 microbatches; the other in reverse order
    std::string text;
    for (int r = 0; r < 4; ++r) {
      text += std::to_string(r) + ":";
      for (const char* op : {"F", "B"})
        for (int i = 0; i < 8; ++i) text += std::string(" ") + op + std::to_string(r) + "." + std::to_string(reversed ? 7 - i : i);
      text += "\n";
    }
    return text;
  };
  const std::string dir0 = temp_path(".p0"), dir1 = temp_path(".p1");
  std::filesystem::create_directories(dir0);
  std::filesystem::create_directories(dir1);
  std::ofstream(dir0 + "/plan.txt") << plan_text(false);
  std::ofstream(dir1 + "/plan.txt") << plan_text(true);
  std::ofstream(dir1 + "/same.txt") << plan_text(false);
  auto with_file = [](const std::string& path, const std::vector<std::string>& more) {
    auto a = job("1f1b", 1, 1, "");
    const auto at = std::find(a.begin(), a.end(), "--schedule");
    a.erase(at, at + 2);
    a.insert(a.end(), {"--schedule-file", path});
    a.insert(a.end(), more.begin(), more.end());
    return a;
  };
  const std::string log0 = temp_path(".f0.log"), log1 = temp_path(".f1.log");
  {
    const int port = free_port();
    const pid_t p0 = start_process(bin, with_file(dir0 + "/plan.txt", {"--join-timeout", "4"}), worker_env(0, 2, port), log0);
    const pid_t p1 = start_process(bin, with_file(dir1 + "/plan.txt", {}), worker_env(1, 2, port), log1);
    CATCH_CHECK(wait_process(p1, 30) > 0);
    CATCH_INFO("process 1:\n" << process_log(log1));
    CATCH_CHECK_THAT(read_text(log1), Contains("runs a different job: --schedule-file (a plan of digest ") &&
                                          Contains(" against process 0's --schedule-file (a plan of digest "));
    CATCH_CHECK(wait_process(p0, 30) == 1);
  }
  {  // the same plan under another name, and token files of one name with other tokens
    const int port = free_port();
    std::vector<char> tokens(2 * 4096);
    for (std::size_t i = 0; i < tokens.size(); i += 2) tokens[i] = static_cast<char>(i % 251);
    std::ofstream(dir0 + "/tokens.bin", std::ios::binary).write(tokens.data(), static_cast<std::streamsize>(tokens.size()));
    tokens[2 * 4000] = 7;
    std::ofstream(dir1 + "/tokens.bin", std::ios::binary).write(tokens.data(), static_cast<std::streamsize>(tokens.size()));
    const pid_t p0 = start_process(bin, with_file(dir0 + "/plan.txt", {"--join-timeout", "4"}), worker_env(0, 2, port), log0);
    const pid_t p1 = start_process(bin, with_file(dir1 + "/same.txt", {}), worker_env(1, 2, port), log1);
    CATCH_CHECK(wait_process(p0, 60) == 0);
    CATCH_CHECK(wait_process(p1, 60) == 0);
    // Process 0 on dir0's tokens.bin, process 1 on dir1's: process 1 is refused, saying what.
    const auto refused_for_data = [&](const Catch::Matchers::Impl::MatcherBase<std::string>& said) {
      const int at = free_port();
      const pid_t q0 = start_process(bin, with_file(dir0 + "/plan.txt", {"--join-timeout", "4", "--data-file", dir0 + "/tokens.bin"}),
                                     worker_env(0, 2, at), log0);
      const pid_t q1 = start_process(bin, with_file(dir0 + "/plan.txt", {"--data-file", dir1 + "/tokens.bin"}),
                                     worker_env(1, 2, at), log1);
      CATCH_CHECK(wait_process(q1, 30) > 0);
      CATCH_INFO("process 1:\n" << process_log(log1));
      CATCH_CHECK_THAT(read_text(log1), Contains("runs a different job: --data-file (8192 bytes, digest ") &&
                                            Contains(" against process 0's --data-file (8192 bytes, digest ") && said);
      CATCH_CHECK(wait_process(q0, 30) == 1);
    };
    refused_for_data(!Contains("its index"));
    // The same tokens, where process 0 has a Megatron index beside them (which gives their
    // type) and process 1 none: they would read the bytes as other tokens.
    std::ofstream(dir1 + "/tokens.bin", std::ios::binary).write(tokens.data(), static_cast<std::streamsize>(tokens.size()));
    std::ofstream(dir0 + "/tokens.bin", std::ios::binary).write(tokens.data(), static_cast<std::streamsize>(tokens.size()));
    write_bytes(dir0 + "/tokens.idx", megatron_index(8, {4096}, {0}, 2));  // uint16, one sequence
    refused_for_data(Contains("; its index 62 bytes, digest "));
  }
  std::filesystem::remove_all(dir0);
  std::filesystem::remove_all(dir1);
}

CATCH_TEST_CASE("processes started with srun's or mpirun's variables form the job", "[multiprocess]") {
  const std::string ref_bytes = read_bytes(one_process_reference("1f1b", 1, 2));
  for (const std::string launcher : {"srun", "mpirun"}) {
    const int port = free_port();
    const std::string out = temp_path(".launcher.safetensors");
    std::vector<std::string> logs = {temp_path(".l0.log"), temp_path(".l1.log")};
    std::vector<pid_t> pids;
    for (int p = 0; p < 2; ++p) {
      std::map<std::string, std::string> env = {{"MASTER_ADDR", "127.0.0.1"},
                                                {"MASTER_PORT", std::to_string(port)},
                                                {"ACTORPIPE_JOB_TOKEN", token},
                                                {"UCX_TLS", "tcp,self"}};
      if (launcher == "srun")
        env.insert({{"SLURM_PROCID", std::to_string(p)}, {"SLURM_NTASKS", "2"}, {"SLURM_LOCALID", std::to_string(p)}});
      else
        env.insert({{"OMPI_COMM_WORLD_RANK", std::to_string(p)},
                    {"OMPI_COMM_WORLD_SIZE", "2"},
                    {"OMPI_COMM_WORLD_LOCAL_RANK", std::to_string(p)}});
      pids.push_back(start_process(bin, job("1f1b", 1, 2, p == 0 ? out : ""), env, logs[p]));
    }
    for (int p = 0; p < 2; ++p) {
      const int code = wait_process(pids[p], 120);
      CATCH_INFO(launcher << ", process " << p << ":\n" << process_log(logs[p]));
      CATCH_CHECK(code == 0);
    }
    CATCH_CHECK(read_text(logs[0]).find("processes: 2") != std::string::npos);
    CATCH_CHECK(read_bytes(out) == ref_bytes);
  }
}

CATCH_TEST_CASE("a diverging multi-process run stops with the reason instead of hanging", "[multiprocess][failure]") {
  // An absurd learning rate without clipping: the gradient norm becomes NaN at step 2; its
  // parts (and the losses) cross processes as non-finite doubles.
  const std::string log = temp_path(".diverge.log");
  auto train = job("1f1b", 1, 30, "");
  train.insert(train.end(), {"--lr", "1e4", "--grad-clip", "0", "--warmup-steps", "0", "--weight-decay", "0"});
  const int code = wait_process(start_process(bin, launched(2, train), {{"UCX_TLS", "tcp,self"}}, log), 60);
  CATCH_INFO(process_log(log));
  CATCH_CHECK(code > 0);
  CATCH_CHECK(read_text(log).find("training diverged (try a lower --lr or --grad-clip)") != std::string::npos);
}

// The ranks of every process time their actions on process 0's clock: in the merged trace no
// action starts before the input it waits for left the other process. (A member's clock once
// ran 0.1-3 ms behind, so that F2.0 seemed to start before F1.0 had ended.)
CATCH_TEST_CASE("a 2-process trace keeps cause before effect across the processes", "[multiprocess][trace]") {
  const std::string trace = temp_path(".mp.trace.json"), log = temp_path(".mp.trace.log");
  auto train = job("1f1b", 1, 3, "");  // 4 ranks: 0-1 in process 0, 2-3 in process 1
  train.insert(train.end(), {"--trace", trace});
  const int code = wait_process(start_process(bin, launched(2, train), {{"UCX_TLS", "tcp,self"}}, log), 120);
  CATCH_INFO(process_log(log));
  CATCH_REQUIRE(code == 0);
  std::ifstream t(trace);
  const auto tj = nlohmann::json::parse(t);
  std::map<std::string, nlohmann::json> by_name;  // "F1.3" -> its event (the last step's)
  for (const auto& e : tj["traceEvents"])
    if (e["ph"] == "X") by_name[e["name"].get<std::string>()] = e;
  int checked = 0;
  for (int m = 0; m < 8; ++m) {
    CATCH_CAPTURE(m);
    const std::string mb = std::to_string(m);
    CATCH_REQUIRE((by_name.count("F1." + mb) && by_name.count("F2." + mb) && by_name.count("B1." + mb) &&
                   by_name.count("B2." + mb)));
    const auto &f1 = by_name["F1." + mb], &f2 = by_name["F2." + mb], &b1 = by_name["B1." + mb], &b2 = by_name["B2." + mb];
    // Forward: rank 2 (process 1) starts after rank 1 (process 0) ended its F.
    CATCH_CHECK(f2["ts"].get<double>() >= f1["ts"].get<double>() + f1["dur"].get<double>());
    // Backward: rank 1 (process 0) starts after rank 2 (process 1) sent its input gradient.
    CATCH_CHECK(b1["ts"].get<double>() >= b2["args"]["input_grad_sent_at"].get<double>());
    ++checked;
  }
  CATCH_CHECK(checked == 8);
  std::remove(trace.c_str());
}

CATCH_TEST_CASE("every line of a launched job says its process, log lines its ranks too", "[multiprocess][log]") {
  const std::string log = temp_path(".prefix.log"), file = temp_path(".prefix.file.log");
  std::vector<std::string> args = {"launch", "--nproc-per-node", "2", "--master-port", std::to_string(free_port()),
                                   "--log-level", "debug", "--log-file", file, "--"};
  auto train = job("1f1b", 1, 2, "");
  args.insert(args.end(), train.begin(), train.end());
  const int code = wait_process(start_process(bin, args, {{"UCX_TLS", "tcp,self"}}, log), 120);
  const std::string text = read_text(log);
  CATCH_INFO(text);
  CATCH_CHECK(code == 0);
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    CATCH_CAPTURE(line);
    CATCH_CHECK((line.rfind("[p0] ", 0) == 0 || line.rfind("[p1] ", 0) == 0 || line.rfind("[p0 r0-1] ", 0) == 0 ||
                 line.rfind("[p1 r2-3] ", 0) == 0 || line.rfind("actorpipe launch: ", 0) == 0));
  }
  // Forming the job, at info; steps at debug (launch passed its level on).
  CATCH_CHECK(text.find("[p0 r0-1] actorpipe: process 1 (ranks 2, 3 on ") != std::string::npos);
  CATCH_CHECK(text.find("[p0 r0-1] actorpipe: every process joined: the job has formed") != std::string::npos);
  CATCH_CHECK(text.find("[p1 r2-3] actorpipe: joined the job of process 0 at 127.0.0.1:") != std::string::npos);
  CATCH_CHECK(text.find("[p1 r2-3] actorpipe: debug: rank 3: step 2 done") != std::string::npos);
  CATCH_CHECK(text.find("[p0] final loss") != std::string::npos);
  const std::string logged = read_text(file);
  CATCH_CHECK(logged.find(" info: actorpipe launch: starting 2 processes") != std::string::npos);
  // Stamped with the level its text says (debug lines were stamped info).
  CATCH_CHECK(logged.find(" debug: [p1 r2-3] actorpipe: debug: rank 2: step 1 done") != std::string::npos);
  std::remove(file.c_str());
}

namespace {

// Lines in a file (0 while it does not exist).
int lines_in(const std::string& path) {
  std::ifstream f(path);
  int n = 0;
  for (std::string line; std::getline(f, line);) ++n;
  return n;
}

// Waits until `done()` or `seconds` pass; whether it came.
template <class Done>
bool wait_for(Done&& done, double seconds) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (!done()) {
    if (std::chrono::steady_clock::now() > end) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return true;
}

// The step a "stopped by SIG... after step N of M" line names, or -1.
int stopped_after(const std::string& text, const std::string& signal, int of) {
  const std::string head = "stopped by " + signal + " after step ";
  const auto at = text.find(head);
  if (at == std::string::npos) return -1;
  const int n = std::atoi(text.c_str() + at + head.size());
  return text.compare(at + head.size() + std::to_string(n).size(), 4 + std::to_string(of).size(),
                      " of " + std::to_string(of)) == 0 ? n : -1;
}

// `args` started (with `env`), sent `sig` once its --metrics file has `after` lines, waited for:
// its exit code and its output.
struct signalled_run {
  int code;
  std::string text;
};
signalled_run run_and_signal(const std::vector<std::string>& args, const std::map<std::string, std::string>& env,
                             const std::string& metrics, int after, int sig, int copies = 1) {
  const std::string log = temp_path(".signal.log");
  const pid_t pid = start_process(bin, args, env, log);
  CATCH_REQUIRE(wait_for([&] { return lines_in(metrics) >= after; }, 120));
  for (int i = 0; i < copies; ++i) {  // copies of one request, as GNU timeout sends (its child, then its group)
    if (i > 0) std::this_thread::sleep_for(std::chrono::milliseconds(50));
    kill(pid, sig);
  }
  const int code = wait_process(pid, 120);
  return {code, read_text(log)};
}

// The checkpoint directory of step n in `dir`.
std::string step_dir(const std::string& dir, int n) {
  char name[32];
  std::snprintf(name, sizeof name, "/step-%08d", n);
  return dir + name;
}

// 2 stages of a GPT whose steps take a few hundred ms, so that a signal lands inside one.
std::vector<std::string> slow_job(const std::string& metrics) {
  return {"train", "--stages", "2", "--layers", "4", "--hidden", "256", "--heads", "4", "--seq-len", "128",
          "--microbatches", "8", "--steps", "500", "--step-timeout", "60", "--metrics", metrics};
}

}  // namespace

CATCH_TEST_CASE("SIGTERM stops train after the step in flight with a checkpoint of it (twice at once is one request), a "
                "second Ctrl-C a second later stops it at once",
                "[multiprocess][signal]") {
  {
    const std::string metrics = temp_path(".stop.jsonl"), dir = temp_path(".stop.ckpt");
    auto args = slow_job(metrics);
    args.insert(args.end(), {"--save-dir", dir});
    const auto [code, text] = run_and_signal(args, {}, metrics, 2, SIGTERM, 2);
    CATCH_INFO(text);
    CATCH_CHECK(code == 128 + SIGTERM);
    CATCH_CHECK_THAT(text, Contains("actorpipe: SIGTERM: stopping after the step in flight, with a checkpoint of it; "
                                    "again (a second or more later) to stop at once"));
    const int n = stopped_after(text, "SIGTERM", 500);
    CATCH_CHECK(n >= 2);
    CATCH_CHECK(n < 500);
    CATCH_CHECK_THAT(text, Contains(": the same command with --resume " + dir + " goes on from there"));
    CATCH_CHECK_THAT(text, Contains("final loss"));
    CATCH_CHECK(lines_in(metrics) == n);  // every step it ran, reported
    CATCH_CHECK(actorpipe::find_resume_checkpoint(dir).path == step_dir(dir, n));  // the step it stopped after
  }
  {
    const std::string metrics = temp_path(".stop2.jsonl"), log = temp_path(".stop2.log");
    auto args = slow_job(metrics);
    // Steps of a few seconds (128 microbatches): the second signal, over a second after the
    // first (which lands early in step 2), still finds the step in flight.
    *(std::find(args.begin(), args.end(), "--microbatches") + 1) = "128";
    const pid_t pid = start_process(bin, args, {}, log);
    CATCH_REQUIRE(wait_for([&] { return lines_in(metrics) >= 1; }, 120));
    // Into step 2: step 1's metrics line is written just before the supervisor looks for a
    // stop, and a signal in between (a loaded machine) made step 1 the last, ended in order.
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    kill(pid, SIGINT);
    // The first was taken (the handler says so at once), so the second finds the default action.
    CATCH_REQUIRE(wait_for([&] { return read_text(log).find("SIGINT: stopping after the step in flight") != std::string::npos; }, 30));
    std::this_thread::sleep_for(std::chrono::milliseconds(1200));  // within a second it is a copy of the first
    kill(pid, SIGINT);
    const int code = wait_process(pid, 60);
    const std::string text = read_text(log);
    CATCH_INFO(text);
    CATCH_CHECK(code == 128 + SIGINT);
    CATCH_CHECK(text.find("final loss") == std::string::npos);  // ended at once, not after its step
    CATCH_CHECK(text.find("stopped by") == std::string::npos);
  }
}

// A closed terminal (SIGHUP) stops train as SIGTERM does, with a checkpoint (UCX's debug
// handler took it: the run went on, unseen); under nohup (SIGHUP ignored from the start) it
// goes on.
CATCH_TEST_CASE("SIGHUP stops train after its step with a checkpoint, exit 129, and nohup keeps it running",
                "[multiprocess][signal]") {
  {
    const std::string metrics = temp_path(".hup.jsonl"), dir = temp_path(".hup.ckpt");
    auto args = slow_job(metrics);
    args.insert(args.end(), {"--save-dir", dir});
    const auto [code, text] = run_and_signal(args, {}, metrics, 2, SIGHUP);
    CATCH_INFO(text);
    CATCH_CHECK(code == 128 + SIGHUP);
    CATCH_CHECK_THAT(text, Contains("actorpipe: SIGHUP: stopping after the step in flight, with a checkpoint of it"));
    const int n = stopped_after(text, "SIGHUP", 500);
    CATCH_CHECK(actorpipe::find_resume_checkpoint(dir).path == step_dir(dir, n));
  }
  {
    const std::string metrics = temp_path(".nohup.jsonl"), log = temp_path(".nohup.log");
    std::vector<std::string> args = {"-c", "trap '' HUP; exec \"$0\" \"$@\"", bin};
    for (const auto& a : slow_job(metrics)) args.push_back(a);
    const pid_t pid = start_process("/bin/sh", args, {}, log);
    CATCH_REQUIRE(wait_for([&] { return lines_in(metrics) >= 1; }, 120));
    kill(pid, SIGHUP);
    const int before = lines_in(metrics);
    CATCH_CHECK(wait_for([&] { return lines_in(metrics) >= before + 2; }, 60));  // it trains on
    kill(pid, SIGKILL);
    wait_process(pid, 30);
    CATCH_CHECK(read_text(log).find("SIGHUP") == std::string::npos);
  }
  // A hangup in the process's first moments, before train's handler: UCX's own handler took it
  // and the run went on to its end, exit 0. It ends the process, whenever it comes.
  for (const int ms : {150, 250, 350, 500}) {
    CATCH_INFO("SIGHUP after " << ms << " ms");
    const std::string metrics = temp_path(".hup-early.jsonl"), log = temp_path(".hup-early.log");
    const pid_t pid = start_process(bin, slow_job(metrics), {}, log);
    std::this_thread::sleep_for(std::chrono::milliseconds(ms));
    kill(pid, SIGHUP);
    CATCH_CHECK(wait_process(pid, 60) == 128 + SIGHUP);
  }
}

// A Ctrl-C or SIGTERM while train loads (LibTorch's initialisers take ~0.3 s before main) or
// sets up its run killed it outright: no word, "killed by signal" where 130 / 143 was promised.
// The executable holds them from its first initialiser on, and train lets them through once its
// handlers are in place: it ends at once, nothing trained, by exit. Here the signal is pending
// (held) before the program starts at all: the mask and the pending signal survive exec.
CATCH_TEST_CASE("a stop signal while train starts ends it by exit 130 / 143 / 129, nothing trained", "[signal]") {
  for (const int sig : {SIGINT, SIGTERM, SIGHUP}) {  // a hangup in setup killed it by the default action
    CATCH_INFO("signal " << sig);
    const std::string log = temp_path(".early-stop.log"), metrics = temp_path(".early-stop.jsonl");
    const std::vector<std::string> args = slow_job(metrics);
    const pid_t pid = fork();
    CATCH_REQUIRE(pid >= 0);
    if (pid == 0) {
      sigset_t held;
      sigemptyset(&held);
      sigaddset(&held, sig);
      sigprocmask(SIG_BLOCK, &held, nullptr);
      raise(sig);  // pending
      const int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      dup2(fd, 1);
      dup2(fd, 2);
      std::vector<char*> argv = {const_cast<char*>(bin.c_str())};
      for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
      argv.push_back(nullptr);
      execv(bin.c_str(), argv.data());
      _exit(127);
    }
    int status = 0;
    CATCH_REQUIRE(waitpid(pid, &status, 0) == pid);
    CATCH_INFO(read_text(log));
    CATCH_CHECK(WIFEXITED(status));  // not killed by the signal
    CATCH_CHECK((WIFEXITED(status) ? WEXITSTATUS(status) : -1) == 128 + sig);
    CATCH_CHECK(read_text(log).find("before the run began: nothing was trained") != std::string::npos);
    CATCH_CHECK(lines_in(metrics) == 0);
  }
}

// A setup that waits for ever (a pipe given as --config with nothing at its other end) held
// the stop signals for ever too: only SIGKILL ended it.
CATCH_TEST_CASE("a stop signal while train's setup waits on a pipe ends it within seconds, nothing trained", "[signal]") {
  for (const int sig : {SIGINT, SIGHUP}) {  // a hangup there ended it by the default action, without a word
    CATCH_INFO("signal " << sig);
    const std::string fifo = temp_path(".config-fifo"), log = temp_path(".fifo-stop.log");
    CATCH_REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
    const pid_t pid = start_process(bin, {"train", "--config", fifo, "--steps", "2"}, {}, log);
    std::this_thread::sleep_for(std::chrono::milliseconds(1500));  // in open(), waiting for a writer
    ::kill(pid, sig);
    const auto t0 = std::chrono::steady_clock::now();
    const int code = wait_process(pid, 30);
    CATCH_INFO(read_text(log));
    CATCH_CHECK(code == 128 + sig);
    CATCH_CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(10));
    CATCH_CHECK_THAT(read_text(log), Contains("actorpipe train: stopped by " + std::string(sig == SIGINT ? "SIGINT" : "SIGHUP") +
                                              " before the run began: nothing was trained"));
    std::remove(fifo.c_str());
    std::remove(log.c_str());
  }
}

// --metrics >(tool): a pipe with its reader gets every line (the check that a pipe has a
// reader keeps its end open, so the reader does not see its input end before the first line).
CATCH_TEST_CASE("train metrics into a pipe that has a reader: every step's line arrives", "[signal]") {
  const std::string fifo = temp_path(".metrics-fifo"), log = temp_path(".metrics-fifo.log");
  CATCH_REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  std::string got;
  std::thread reader([&] {
    std::ifstream in(fifo);  // waits for the writer
    got.assign(std::istreambuf_iterator<char>(in), {});
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // the reader in its open() first
  const pid_t pid = start_process(bin, {"train", "--layers", "2", "--hidden", "16", "--heads", "2", "--seq-len", "8",
                                        "--microbatches", "2", "--microbatch-size", "2", "--steps", "3", "--metrics", fifo},
                                  {}, log);
  const int code = wait_process(pid, 120);
  reader.join();
  CATCH_INFO(read_text(log));
  CATCH_CHECK(code == 0);
  CATCH_CHECK(std::count(got.begin(), got.end(), '\n') == 3);
  CATCH_CHECK_THAT(got, Contains("\"step\":2"));
  std::remove(fifo.c_str());
  std::remove(log.c_str());
}

// A crash is reported on standard error (apps/crash_report); from outside, the report says who
// sent the signal. The executable exports its functions, so the frames in it are named.
CATCH_TEST_CASE("train ended by a SIGSEGV from outside says who sent it, with frames, and exits by it", "[signal]") {
  const std::string metrics = temp_path(".segv.jsonl");
  const auto [code, text] = run_and_signal(slow_job(metrics), {}, metrics, 1, SIGSEGV);
  CATCH_INFO(text);
  CATCH_CHECK(code == 128 + SIGSEGV);
  CATCH_CHECK_THAT(text, Contains("actorpipe: ended by SIGSEGV, sent by process " + std::to_string(getpid()) +
                                  ". The thread it reached was here:\n"));
  CATCH_CHECK_THAT(text, Contains("[0x"));
  CATCH_CHECK(text.find("this is a bug") == std::string::npos);
}

// A process that stops answering without closing its connections (SIGSTOP here; a frozen
// host or a cut network alike) is found by its silence on the control plane, from either side,
// long before --step-timeout.
CATCH_TEST_CASE("a stopped process is lost after --heartbeat-timeout, whichever side stopped", "[multiprocess][failure]") {
  for (const int stopped : {1, 0}) {
    const int port = free_port();
    const std::string metrics = temp_path(".hb.jsonl");
    std::vector<std::string> logs = {temp_path(".hb0.log"), temp_path(".hb1.log")};
    std::vector<pid_t> pids;
    for (int p = 0; p < 2; ++p) {
      auto args = slow_job(p == 0 ? metrics : temp_path(".hb1.jsonl"));
      args.insert(args.end(), {"--heartbeat-timeout", "3"});
      pids.push_back(start_process(bin, args, worker_env(p, 2, port), logs[p]));
    }
    CATCH_REQUIRE(wait_for([&] { return lines_in(metrics) >= 1; }, 120));
    kill(pids[stopped], SIGSTOP);
    const int other = 1 - stopped;
    const auto start = std::chrono::steady_clock::now();
    const int code = wait_process(pids[other], 60);
    const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    kill(pids[stopped], SIGCONT);
    const int stopped_code = wait_process(pids[stopped], 60);
    const std::string text = read_text(logs[other]);
    CATCH_INFO("process " << stopped << " stopped; process " << other << ":\n" << process_log(logs[other]) << "\nprocess "
                          << stopped << ":\n" << process_log(logs[stopped]));
    CATCH_CHECK(code == 1);
    CATCH_CHECK(took >= 2);  // 3 s of silence, less what passed since it was last heard (< 0.75 s)
    CATCH_CHECK(took < 30);    // not the 60 s --step-timeout
    const std::string silence = "nothing heard from it for 3 s (--heartbeat-timeout): it is stopped, frozen or cut off";
    if (stopped == 1)
      CATCH_CHECK_THAT(text, Contains("error: lost process 1 (rank 1") && Contains(silence + "; its control connection is closed"));
    else
      CATCH_CHECK_THAT(text, Contains("error: lost process 0 (the supervisor, at 127.0.0.1:" + std::to_string(port) + "): " + silence));
    CATCH_CHECK(stopped_code == 1);  // resumed, it finds the job gone
  }
}

// With heartbeats off, a member waited on a stopped process 0 for ever (only process 0 kept
// --step-timeout). Process 0 speaks at every step: silent for twice --step-timeout and 10 s,
// it is lost.
CATCH_TEST_CASE("with --heartbeat-timeout 0 a member still gives up on a stopped process 0, after twice --step-timeout",
                "[multiprocess][failure]") {
  const int port = free_port();
  const std::string metrics = temp_path(".nohb.jsonl");
  std::vector<std::string> logs = {temp_path(".nohb0.log"), temp_path(".nohb1.log")};
  std::vector<pid_t> pids;
  for (int p = 0; p < 2; ++p) {
    auto args = slow_job(p == 0 ? metrics : temp_path(".nohb1.jsonl"));
    const auto limit = std::find(args.begin(), args.end(), "--step-timeout");
    *(limit + 1) = "5";
    args.insert(args.end(), {"--heartbeat-timeout", "0"});
    pids.push_back(start_process(bin, args, worker_env(p, 2, port), logs[p]));
  }
  CATCH_REQUIRE(wait_for([&] { return lines_in(metrics) >= 1; }, 120));
  kill(pids[0], SIGSTOP);
  const auto start = std::chrono::steady_clock::now();
  const int code = wait_process(pids[1], 90);
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  kill(pids[0], SIGCONT);
  wait_process(pids[0], 60);
  CATCH_INFO("process 1:\n" << process_log(logs[1]) << "\nprocess 0:\n" << process_log(logs[0]));
  CATCH_CHECK(code == 1);
  CATCH_CHECK(took >= 15);  // 20 s of silence, less what passed since process 0 last spoke
  CATCH_CHECK(took < 60);
  CATCH_CHECK_THAT(read_text(logs[1]), Contains("error: lost process 0 (the supervisor, at 127.0.0.1:" + std::to_string(port) +
                                                "): nothing heard from it for 2") &&
                                           Contains(" s, where it speaks at every step (twice --step-timeout and 10 s"));
}

// A process lost while the job stops on a signal (its launch's --stop-timeout SIGKILLed it) ended
// process 0 as a failure (exit 1), which the other node's launch restarted, to wait out
// --join-timeout twice: it ends as the stop asked for (128 + N), naming the loss.
CATCH_TEST_CASE("a process lost while the job stops on a signal ends the job as that stop, not as a failure",
                "[multiprocess][signal]") {
  const int port = free_port();
  const std::string metrics = temp_path(".lost-stop.jsonl");
  std::vector<std::string> logs = {temp_path(".lost-stop0.log"), temp_path(".lost-stop1.log")};
  std::vector<pid_t> pids;
  for (int p = 0; p < 2; ++p)
    pids.push_back(start_process(bin, slow_job(p == 0 ? metrics : temp_path(".lost-stop1.jsonl")), worker_env(p, 2, port), logs[p]));
  CATCH_REQUIRE(wait_for([&] { return lines_in(metrics) >= 1; }, 120));
  kill(pids[1], SIGTERM);
  CATCH_REQUIRE(wait_for([&] { return read_text(logs[0]).find("process 1 got SIGTERM") != std::string::npos; }, 30));
  kill(pids[1], SIGKILL);
  const int code = wait_process(pids[0], 60);
  wait_process(pids[1], 10);
  CATCH_INFO("process 0:\n" << process_log(logs[0]));
  // The step may also have ended before the loss was seen: then the stop itself (143) says so.
  CATCH_CHECK(code == 128 + SIGTERM);
  if (read_text(logs[0]).find("lost process 1") != std::string::npos)
    CATCH_CHECK_THAT(read_text(logs[0]), Contains("(as the job stopped on the SIGTERM asked for)"));
}

// A signal to process 0 alone (another machine's scheduler preempting it) ends a member with
// 143 too: it now says why (it exited without a word).
CATCH_TEST_CASE("a member stopped by a signal process 0 got says so", "[multiprocess][signal]") {
  const int port = free_port();
  const std::string metrics = temp_path(".p0-stop.jsonl");
  std::vector<std::string> logs = {temp_path(".p0-stop0.log"), temp_path(".p0-stop1.log")};
  std::vector<pid_t> pids;
  for (int p = 0; p < 2; ++p)
    pids.push_back(start_process(bin, slow_job(p == 0 ? metrics : temp_path(".p0-stop1.jsonl")), worker_env(p, 2, port), logs[p]));
  CATCH_REQUIRE(wait_for([&] { return lines_in(metrics) >= 1; }, 120));
  kill(pids[0], SIGTERM);
  CATCH_CHECK(wait_process(pids[0], 60) == 128 + SIGTERM);
  CATCH_CHECK(wait_process(pids[1], 30) == 128 + SIGTERM);
  CATCH_INFO("process 1:\n" << process_log(logs[1]));
  CATCH_CHECK_THAT(read_text(logs[1]), Contains("the job stopped after the step in flight: another of its processes got "
                                                "SIGTERM (this one exits as if it had; process 0 says after which step)"));
}

CATCH_TEST_CASE("Ctrl-C to launch stops a 2-process job after a step, with a checkpoint, and launch exits 130",
                "[multiprocess][signal]") {
  const std::string metrics = temp_path(".lstop.jsonl"), dir = temp_path(".lstop.ckpt");
  auto train = slow_job(metrics);
  train.insert(train.end(), {"--save-dir", dir});
  const auto [code, text] = run_and_signal(launched(2, train), {{"UCX_TLS", "tcp,self"}}, metrics, 2, SIGINT);
  CATCH_INFO(text);
  CATCH_CHECK(code == 128 + SIGINT);
  CATCH_CHECK_THAT(text, Contains("actorpipe launch: got SIGINT, passing it on to process 0 (local 0), process 1 (local 1)"));
  CATCH_CHECK_THAT(text, Contains("[p1 r1] actorpipe: SIGINT: this process stops when the job does"));
  const int n = stopped_after(text, "SIGINT", 500);
  CATCH_CHECK(n >= 2);
  CATCH_CHECK(n < 500);
  CATCH_CHECK(text.find("was killed") == std::string::npos);  // both ended on their own, before any SIGKILL
  CATCH_CHECK(actorpipe::find_resume_checkpoint(dir).path == step_dir(dir, n));
}

// A hangup to launch alone (its terminal's, or `kill -HUP`) was swallowed by UCX's handler: the
// job ran on and launch exited 0. It is passed on as SIGINT and SIGTERM are.
CATCH_TEST_CASE("SIGHUP to launch stops a 2-process job after a step, with a checkpoint, and launch exits 129",
                "[multiprocess][signal]") {
  const std::string metrics = temp_path(".lhup.jsonl"), dir = temp_path(".lhup.ckpt");
  auto train = slow_job(metrics);
  train.insert(train.end(), {"--save-dir", dir});
  const auto [code, text] = run_and_signal(launched(2, train), {{"UCX_TLS", "tcp,self"}}, metrics, 2, SIGHUP);
  CATCH_INFO(text);
  CATCH_CHECK(code == 128 + SIGHUP);
  CATCH_CHECK_THAT(text, Contains("actorpipe launch: got SIGHUP, passing it on to process 0 (local 0), process 1 (local 1)"));
  const int n = stopped_after(text, "SIGHUP", 500);
  CATCH_CHECK(n >= 2);
  CATCH_CHECK(n < 500);
  CATCH_CHECK(actorpipe::find_resume_checkpoint(dir).path == step_dir(dir, n));
}

CATCH_TEST_CASE("a signal while the job forms ends a process at once, the hub and a member alike",
                "[multiprocess][signal]") {
  // Neither finds its peer (each is alone, with a 60 s --join-timeout); a stop ends the wait.
  for (int process : {0, 1}) {
    CATCH_INFO("process " << process);
    const std::string log = temp_path(".join-stop.log");
    auto args = job("1f1b", 1, 2, "");
    args.insert(args.end(), {"--log-level", "debug"});
    const pid_t pid = start_process(bin, args, worker_env(process, 2, free_port()), log);
    const std::string waiting = process == 0 ? "listening on 127.0.0.1:" : "joining the job of process 0 at 127.0.0.1:";
    CATCH_REQUIRE(wait_for([&] { return read_text(log).find(waiting) != std::string::npos; }, 60));
    const auto t0 = std::chrono::steady_clock::now();
    kill(pid, SIGTERM);
    const int code = wait_process(pid, 30);
    const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const std::string text = read_text(log);
    CATCH_INFO(text);
    CATCH_CHECK(code == 128 + SIGTERM);  // a stop asked for, as after a step: launch --max-restarts does not restart it (it did, on 1)
    CATCH_CHECK_THAT(text, Contains("error: SIGTERM before every process had joined the job: nothing was trained"));
    // Its notice says so too (process 0's spoke only of the step in flight).
    CATCH_CHECK_THAT(text, Contains(process == 0 ? "(before the job has formed, at once)" : "before the job has formed, at once"));
    CATCH_CHECK(took < 10);  // not the 60 s --join-timeout
  }
  {  // a member whose connect hangs (process 0's port takes no connections): the same
    full_backlog silent;
    const std::string log = temp_path(".join-stop-hung.log");
    auto args = job("1f1b", 1, 2, "");
    args.insert(args.end(), {"--log-level", "debug"});
    const pid_t pid = start_process(bin, args, worker_env(1, 2, silent.port()), log);
    CATCH_REQUIRE(wait_for([&] { return read_text(log).find("joining the job of process 0") != std::string::npos; }, 60));
    std::this_thread::sleep_for(std::chrono::milliseconds(500));  // inside a connect attempt
    kill(pid, SIGTERM);
    const int code = wait_process(pid, 30);  // the old blocking connect held it until SIGKILL
    const std::string text = read_text(log);
    CATCH_INFO(text);
    CATCH_CHECK(code == 128 + SIGTERM);
    CATCH_CHECK_THAT(text, Contains("error: SIGTERM before every process had joined the job: nothing was trained"));
  }
}

CATCH_TEST_CASE("a master port already taken refuses the job (exit 2): launch stops the rest at once and does not "
                "restart",
                "[multiprocess][launch]") {
  full_backlog taken;
  const std::string log = temp_path(".port-taken.log");
  const pid_t pid = start_process(bin,
                                  {"launch", "--nproc-per-node", "2", "--master-port", std::to_string(taken.port()),
                                   "--max-restarts", "2", "--grace", "60", "--", "train", "--layers", "2", "--hidden",
                                   "32", "--heads", "2", "--seq-len", "16", "--vocab", "64", "--microbatches", "4",
                                   "--microbatch-size", "2", "--steps", "2", "--stages", "2"},
                                  {}, log);
  const int code = wait_process(pid, 40);  // not 3 attempts of the 60 s grace
  const std::string text = read_text(log);
  CATCH_INFO(text);
  CATCH_CHECK(code == 2);
  CATCH_CHECK_THAT(text, Contains("error: cannot listen on 127.0.0.1:" + std::to_string(taken.port())));
  // Why, in words (CAF's "tcp socket creation failed" said it for a port taken and for an
  // address of another host alike).
  CATCH_CHECK_THAT(text, Contains("Address already in use (another job, or another program, listens there: give this job "
                                  "its own port)"));
  CATCH_CHECK_THAT(text, Contains("process 0 (local 0) exited with code 2"));
  CATCH_CHECK_THAT(text, Contains("a process was refused (exit 2): giving the other 1 running process 2 s to exit"));
  CATCH_CHECK_THAT(text, Contains("not restarting: exit code 2"));
  CATCH_CHECK(text.find("attempt 2") == std::string::npos);
}

CATCH_TEST_CASE("a member with the wrong job token is refused (exit 2) while process 0 waits on for the right one",
                "[multiprocess]") {
  const int port = free_port();
  const std::string hub_log = temp_path(".wrong-token-hub.log"), member_log = temp_path(".wrong-token-member.log");
  const auto args = job("1f1b", 1, 2, "");
  const pid_t hub = start_process(bin, args, worker_env(0, 2, port), hub_log);
  CATCH_REQUIRE(wait_for([&] { return read_text(hub_log).find("listening on 127.0.0.1:") != std::string::npos; }, 60));
  const pid_t member = start_process(bin, args, worker_env(1, 2, port, "not-the-job-token-0123456789abcdef"), member_log);
  const int member_code = wait_process(member, 60);
  kill(hub, SIGTERM);
  const int hub_code = wait_process(hub, 30);
  const std::string member_text = read_text(member_log), hub_text = read_text(hub_log);
  CATCH_INFO(member_text << hub_text);
  CATCH_CHECK(member_code == 2);  // launch would not restart it: the token is the same next time
  CATCH_CHECK_THAT(member_text, Contains("refused this process: wrong job token"));
  // Reaching another job's process 0 on a shared port reads the same: the hint says so.
  CATCH_CHECK_THAT(member_text, Contains("or whether this is another job's process 0 on the same MASTER_PORT: give each "
                                         "job its own --master-port"));
  CATCH_CHECK_THAT(hub_text, Contains("refused a connection from"));
  CATCH_CHECK(hub_code == 128 + SIGTERM);  // stopped while forming: a stop asked for, not a refusal of its own
}


// --init-from with the weights of a deeper model: process 0 holds none of the layers the file
// has too many of, and tells them from the prefixes of the layers the other processes hold.
CATCH_TEST_CASE("init from weights in 2 processes: a deeper model's are refused, naming what the model lacks",
                "[multiprocess]") {
  const std::string deeper = one_process_reference("1f1b", 1, 1);  // 8 layers
  std::vector<std::string> train = job("1f1b", 1, 1, "");
  const auto layers = std::find(train.begin(), train.end(), "--layers");
  *(layers + 1) = "4";
  train.insert(train.end(), {"--init-from", deeper});
  const std::string log = temp_path(".init.log");
  const int code = wait_process(start_process(bin, launched(2, train), {{"UCX_TLS", "tcp,self"}}, log), 120);
  CATCH_INFO(process_log(log));
  CATCH_CHECK(code == 2);
  CATCH_CHECK(read_text(log).find("--init-from " + deeper + ": the parameters do not fit the model: 48 not in the model: "
                                  "blocks.4.") != std::string::npos);
  std::remove(deeper.c_str());
}

// A UCX setting that reaches no other process (UCX_TLS=self) hung the job for ever once it had
// formed: the data plane's connect threw, the control plane heartbeated on, and the actor
// system's end waited for it. Now one error naming the setting, exit 2 (a restart would meet
// it again); a UCX_TLS with no transport at all is the same.
CATCH_TEST_CASE("a UCX setting that reaches no other process is one error naming it, exit 2, not a hang",
                "[multiprocess][failure]") {
  const std::vector<std::string> train = {"train",  "--layers", "2", "--hidden", "32", "--heads", "2", "--seq-len",
                                          "16",     "--vocab",  "64", "--microbatches", "4", "--microbatch-size", "2",
                                          "--steps", "2", "--stages", "2", "--join-timeout", "20"};
  for (const std::string tls : {"self", "bogus"}) {
    CATCH_INFO("UCX_TLS=" << tls);
    const std::string log = temp_path(".ucx-" + tls + ".log");
    auto args = launched(2, train);
    args.insert(args.begin() + 1, {"--max-restarts", "2"});
    const int code = wait_process(start_process(bin, args, {{"UCX_TLS", tls}}, log), 60);
    const std::string text = read_text(log);
    CATCH_INFO(text);
    CATCH_CHECK(code == 2);
    CATCH_CHECK_THAT(text, Contains("UCX_TLS=" + tls));
    CATCH_CHECK_THAT(text, Contains(tls == "self" ? "reaches this peer: keep tcp in UCX_TLS" : "no usable transport in it"));
    CATCH_CHECK_THAT(text, Contains("not restarting: exit code 2"));
  }
}

// launch ended by SIGKILL (or the OOM killer): its processes get SIGTERM (PR_SET_PDEATHSIG) and
// stop after the step in flight with a checkpoint of it. They wrote their notice into launch's
// pipes, now without a reader, and died of SIGPIPE before: nothing was saved.
CATCH_TEST_CASE("launch killed outright: its processes still stop after their step with a checkpoint",
                "[multiprocess][checkpoint]") {
  const std::string dir = temp_path(".orphans"), log = temp_path(".orphans.log");
  std::vector<std::string> args = {bin, "launch", "--nproc-per-node", "2", "--master-port", std::to_string(free_port()), "--"};
  for (const auto& a : job("1f1b", 1, 100000, "")) args.push_back(a);
  args.insert(args.end(), {"--save-dir", dir, "--save-every", "100000"});
  const pid_t pid = start_process("/usr/bin/setsid", args, {{"UCX_TLS", "tcp,self"}}, log);
  CATCH_REQUIRE(wait_for_text(log, "step 2/", 90));
  kill(pid, SIGKILL);
  CATCH_CHECK(wait_process(pid, 10) == 128 + SIGKILL);
  // The orphans save and exit: the checkpoint appears, complete.
  CATCH_REQUIRE(wait_for_file(dir + "/latest", 60) >= 0);
  const std::string latest = read_text(dir + "/latest");
  CATCH_CHECK_NOTHROW(actorpipe::verify_checkpoint(dir + "/" + latest.substr(0, latest.find('\n'))));
  // Gone by themselves (their command line names the folder).
  bool gone = false;
  for (int i = 0; i < 200 && !gone; ++i) {
    gone = std::system(("pgrep -f -- '[-]-save-dir " + dir + "' >/dev/null").c_str()) != 0;  // [-]: not this shell
    if (!gone) usleep(100000);
  }
  CATCH_CHECK(gone);
  std::filesystem::remove_all(dir);
}

// Two machines, each with a --save-dir of its own (here: one relative path, two working
// folders): every process writes its part into process 0's folder, so the first save failed
// after training, and a restart failed alike. Now refused once the job forms, exit 2, and
// process 0 says why.
// A copy of the folder an earlier run of the job wrote (its .lock, naming the job by its token,
// went with it) passed the check: the job trained, then failed at its first save.
CATCH_TEST_CASE("a --save-dir that a process does not share with process 0 is refused once the job forms",
                "[multiprocess][checkpoint]") {
  const std::string base = temp_path(".unshared");
  // Process p runs in `home(p)`, with --save-dir ck there.
  const auto home = [&](int p) { return base + "-node" + std::to_string(p); };
  const auto run = [&](int steps, const std::vector<std::string>& extra, bool shared, std::vector<std::string>& logs) {
    const int port = free_port();
    std::vector<pid_t> pids;
    logs.clear();
    for (int p = 0; p < 2; ++p) {
      std::filesystem::create_directories(home(p));
      logs.push_back(temp_path(".unshared" + std::to_string(p) + ".log"));
      std::vector<std::string> args = {"-c", "cd \"$1\" && shift && exec \"$0\" \"$@\"", bin, home(shared ? 0 : p)};
      for (const auto& a : job("1f1b", 1, steps, "")) args.push_back(a);
      args.insert(args.end(), {"--save-dir", "ck", "--join-timeout", "30"});
      args.insert(args.end(), extra.begin(), extra.end());
      pids.push_back(start_process("/bin/sh", args, worker_env(p, 2, port), logs[p]));
    }
    const int follower = wait_process(pids[1], 60), leader = wait_process(pids[0], 60);
    return std::make_pair(leader, follower);
  };
  for (const bool copied : {false, true}) {
    CATCH_INFO((copied ? "process 1's folder: a copy of process 0's" : "process 1's folder: a new one"));
    std::vector<std::string> logs;
    std::vector<std::string> extra;
    if (copied) {  // an earlier run in a shared folder, copied to process 1's machine: both resume
      CATCH_REQUIRE(run(1, {}, true, logs) == std::make_pair(0, 0));
      std::filesystem::copy(home(0) + "/ck", home(1) + "/ck", std::filesystem::copy_options::recursive);
      extra = {"--resume", "ck"};
    }
    const auto [leader, follower] = run(3, extra, false, logs);
    const std::string text = read_text(logs[1]);
    CATCH_INFO(text << "\n---- process 0:\n" << read_text(logs[0]));
    CATCH_CHECK(follower == 2);
    CATCH_CHECK_THAT(text, Contains("--save-dir 'ck': process 1 does not see the folder process 0 saves into (its .lock "
                                    "does not name this run of the job)"));
    CATCH_CHECK(leader == 2);  // refused, as the member is: launch --max-restarts restarted it (exit 1)
    // Process 0 names the member's reason (it said "died or was killed").
    CATCH_CHECK_THAT(read_text(logs[0]), Contains("process 1 (ranks 2, 3) refused the job once it formed: --save-dir 'ck': "
                                                  "process 1 does not see the folder process 0 saves into"));
    CATCH_CHECK_THAT(read_text(logs[0]), !Contains("died or was killed"));
    CATCH_CHECK(!std::filesystem::exists(home(0) + "/ck/step-00000003"));  // nothing trained
    for (int p = 0; p < 2; ++p) std::filesystem::remove_all(home(p));
  }
}

// A checkpoint process 0 cannot write (here its file-size limit) stops the run after the step
// in flight, exit 1 once its outputs are written: the other processes exited 0, as if the job
// had finished.
CATCH_TEST_CASE("a run that process 0 stops on a failed checkpoint ends every process with its error",
                "[multiprocess][checkpoint]") {
  const int port = free_port();
  const std::string dir = temp_path(".fsz-ck");
  std::vector<pid_t> pids;
  std::vector<std::string> logs;
  for (int p = 0; p < 2; ++p) {
    logs.push_back(temp_path(".fsz" + std::to_string(p) + ".log"));
    // Process 0 may write files of 8 KiB at most: its stages' parts are larger.
    std::vector<std::string> args = {"-c", std::string(p == 0 ? "ulimit -f 8; " : "") + "exec \"$0\" \"$@\"", bin};
    for (const auto& a : job("1f1b", 1, 4, "")) args.push_back(a);
    args.insert(args.end(), {"--save-dir", dir, "--save-every", "1"});
    pids.push_back(start_process("/bin/sh", args, worker_env(p, 2, port), logs[p]));
  }
  const int follower = wait_process(pids[1], 60), leader = wait_process(pids[0], 60);
  CATCH_INFO("process 0:\n" << read_text(logs[0]) << "\n---- process 1:\n" << read_text(logs[1]));
  CATCH_CHECK(leader == 1);
  CATCH_CHECK_THAT(read_text(logs[0]), Contains("checkpoint at step 1: writing stage-") && Contains("File too large"));
  CATCH_CHECK(follower == 1);
  CATCH_CHECK_THAT(read_text(logs[1]), Contains("process 0 stopped the run: checkpoint at step 1: writing stage-"));
  std::filesystem::remove_all(dir);
}

// On a terminal the progress line is redrawn in place and the last step ends it; a run stopped
// early left it open, and the summary began on it ("bubble 37.6%model: GPT, ...").
CATCH_TEST_CASE("a run stopped on a terminal ends its progress line before the summary", "[signal]") {
  if (std::system("script -V >/dev/null 2>&1") != 0) {
    CATCH_WARN("script (util-linux) not found: skipped");
    return;
  }
  const std::string log = temp_path(".tty.log"), typescript = temp_path(".typescript");
  const std::string dir = temp_path(".tty-ckpt");
  std::string command = "timeout --preserve-status -s TERM 6 " + bin + " train --stages 2 --layers 2 --hidden 32 --heads 2 --seq-len 16 "
                        "--vocab 64 --microbatches 4 --steps 1000000 --save-dir " + dir + " --save-every 20";
  const pid_t pid = start_process("/usr/bin/script", {"-qfec", command, typescript}, {}, log);
  CATCH_CHECK(wait_process(pid, 60) == 128 + SIGTERM);
  const std::string text = read_text(typescript);
  CATCH_INFO(text);
  const auto at = text.find("stopped by SIGTERM after step ");
  CATCH_REQUIRE(at != std::string::npos);
  const auto model = text.find("model: ");
  CATCH_REQUIRE(model != std::string::npos);
  CATCH_CHECK(model > 0);
  CATCH_CHECK(text[model - 1] == '\n');  // not glued to "bubble ...%"
  // Log lines while the progress line is drawn ("saved checkpoint"): each on a row of its own
  // (they were glued on after "bubble ...%").
  int saved = 0;
  for (auto at = text.find("actorpipe: saved checkpoint"); at != std::string::npos;
       at = text.find("actorpipe: saved checkpoint", at + 1), ++saved)
    CATCH_CHECK(text[at - 1] == '\n');
  CATCH_CHECK(saved > 0);
  // Each redraw clears the row first (a shorter line left the old one's end behind).
  CATCH_CHECK_THAT(text, Contains("\r\033[Kstep "));
  std::filesystem::remove_all(dir);
}
