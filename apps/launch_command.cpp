// `actorpipe launch` implementation (no CLI parsing here; see cli.cpp): fork/exec the local
// processes and watch them with SIGCHLD, SIGINT and SIGTERM blocked and read from a signalfd,
// polled together with the pipes of the processes' output, so one thread without signal
// handlers or global state does it all.
#include "apps/launch_command.hpp"

#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <optional>
#include <ostream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>

#include "apps/exit_codes.hpp"
#include "apps/process_output.hpp"
#include "apps/train_command.hpp"
#include "apps/write_signals.hpp"
#include "core/job_token.hpp"
#include "core/launch_env.hpp"
#include "core/number_text.hpp"
#include "core/proc_files.hpp"
#include "core/signal_name.hpp"
#include "core/time_limits.hpp"

extern char** environ;

namespace actorpipe {
namespace {

using steady = std::chrono::steady_clock;

// The variables launch sets; any value launch itself inherited for them is replaced.
const char* const kJobVariables[] = {"RANK",        "WORLD_SIZE",  "LOCAL_RANK",         "LOCAL_WORLD_SIZE",
                                     "MASTER_ADDR", "MASTER_PORT", job_token_variable,    kRestartCountVariable};

[[noreturn]] void bad_value(const std::string& flag, const std::string& value, const std::string& rule) {
  throw std::invalid_argument(flag + "=" + value + " " + rule);
}

}  // namespace

unsigned long long launch_files_needed(int nproc_per_node) {
  return 4ULL * static_cast<unsigned long long>(nproc_per_node < 0 ? 0 : nproc_per_node) + 32;
}

namespace {

void validate(const launch_options& o) {
  if (o.nproc_per_node < 1) bad_value("--nproc-per-node", std::to_string(o.nproc_per_node), "must be >= 1");
  if (o.nnodes < 1) bad_value("--nnodes", std::to_string(o.nnodes), "must be >= 1");
  if (o.node_rank < 0 || o.node_rank >= o.nnodes)
    bad_value("--node-rank", std::to_string(o.node_rank),
              "must be in [0, " + std::to_string(o.nnodes) + ") for --nnodes=" + std::to_string(o.nnodes));
  if (static_cast<long long>(o.nnodes) * o.nproc_per_node > INT_MAX)
    throw std::invalid_argument("--nnodes=" + std::to_string(o.nnodes) + " x --nproc-per-node=" +
                                std::to_string(o.nproc_per_node) + " is more processes than a job can have");
  // Past the limit the pipes would fail at process ~limit/4, after a start.
  struct rlimit files {};
  if (getrlimit(RLIMIT_NOFILE, &files) == 0 && files.rlim_cur != RLIM_INFINITY &&
      launch_files_needed(o.nproc_per_node) > files.rlim_cur)
    bad_value("--nproc-per-node", std::to_string(o.nproc_per_node),
              "needs " + std::to_string(launch_files_needed(o.nproc_per_node)) +
                  " open files for the processes' output, more than this process may open (" +
                  std::to_string(files.rlim_cur) + ", ulimit -n)");
  if (o.master_addr.empty()) throw std::invalid_argument("--master-addr must not be empty");
  if (o.master_port < 1 || o.master_port > 65535)
    bad_value("--master-port", std::to_string(o.master_port), "must be in 1..65535");
  if (!std::isfinite(o.grace_s) || o.grace_s < 0 || o.grace_s > max_timeout_s)
    bad_value("--grace", number_text(o.grace_s), "must be a number of seconds in [0, " + number_text(max_timeout_s) + "]");
  if (!std::isfinite(o.kill_after_s) || o.kill_after_s < 0 || o.kill_after_s > max_timeout_s)
    bad_value("kill_after_s", number_text(o.kill_after_s), "must be a number of seconds in [0, " + number_text(max_timeout_s) + "]");
  if (!std::isfinite(o.stop_timeout_s) || o.stop_timeout_s < 0 || o.stop_timeout_s > max_timeout_s)
    bad_value("--stop-timeout", number_text(o.stop_timeout_s), "must be a number of seconds in [0, " + number_text(max_timeout_s) + "]");
  if (o.max_restarts < 0) bad_value("--max-restarts", std::to_string(o.max_restarts), "must be >= 0");
  if (o.command.empty())
    throw std::invalid_argument(
        "missing the command to run: put it after --, e.g. actorpipe launch --nproc-per-node 2 -- train --stages 2");
  if (o.command.front() == "launch")
    throw std::invalid_argument("the command after -- cannot be launch itself: give the command each process runs, "
                                "e.g. -- train --stages 2");
  if (o.program.empty()) throw std::invalid_argument("no program to run (launch_options::program is empty)");
  if (access(o.program.c_str(), X_OK) != 0)
    throw std::runtime_error("cannot run '" + o.program + "': " + std::strerror(errno));
}

// The token every process of the job shares. Several nodes cannot agree on a token made here.
std::string job_token(const launch_options& o, bool& generated) {
  generated = false;
  if (const char* env = std::getenv(job_token_variable); env && *env) {  // set but empty reads as unset, as in train
    check_job_token(env);
    return env;
  }
  if (o.nnodes > 1)
    throw std::invalid_argument(
        "--nnodes=" + std::to_string(o.nnodes) +
        " needs one job token shared by every node and ACTORPIPE_JOB_TOKEN is not set: make one "
        "(openssl rand -hex 32) and run export ACTORPIPE_JOB_TOKEN=<that token> on every node before actorpipe launch");
  generated = true;
  return generate_job_token();
}

std::string shell_quoted(const std::string& s) {
  const bool plain = !s.empty() && std::all_of(s.begin(), s.end(), [](unsigned char c) {
    return std::isalnum(c) || std::strchr("_./=:,@%+-", c) != nullptr;
  });
  if (plain) return s;
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

std::string plural(int n, const char* one, const char* many) { return std::to_string(n) + " " + (n == 1 ? one : many); }

// A seconds value as a steady-clock duration; huge values are capped (a year) so they cannot overflow.
steady::duration seconds(double s) {
  return std::chrono::duration_cast<steady::duration>(std::chrono::duration<double>(std::min(s, 3.2e7)));
}

struct child {
  pid_t pid = -1;
  int rank = 0, local_rank = 0;
  bool running = false;
  bool stopped_by_us = false;  // launch sent it a signal: its end is expected, not a failure to report
  std::string name() const {
    return "process " + std::to_string(rank) + " (local " + std::to_string(local_rank) + ")";
  }
};

// What launch passes on to its processes as a request to stop (after their step, checkpointed).
bool is_stop_signal(int sig) { return sig == SIGINT || sig == SIGTERM || sig == SIGHUP; }

// Blocks the signals launch waits for and makes sure children are not reaped behind its back
// (SIGCHLD ignored); restores both on the way out. Also owns the children: whatever ends the
// watch early (an exception), none is left running or unreaped.
class watch_scope {
 public:
  explicit watch_scope(std::vector<child>& kids) : kids_(kids) {
    sigemptyset(&waited_);
    sigaddset(&waited_, SIGCHLD);
    for (int sig : {SIGINT, SIGTERM}) {
      struct sigaction current {};
      sigaction(sig, nullptr, &current);
      if (current.sa_handler != SIG_IGN) sigaddset(&waited_, sig);  // launched with it ignored (nohup, &): keep so
    }
    // SIGHUP's handler is UCX's by now (its debug signal), which swallowed a hangup: what it
    // was at start says whether one is a stop (not under nohup).
    if (hangup_is_a_stop()) sigaddset(&waited_, SIGHUP);
    pthread_sigmask(SIG_BLOCK, &waited_, &old_mask_);
    struct sigaction dfl {};
    dfl.sa_handler = SIG_DFL;
    sigemptyset(&dfl.sa_mask);
    sigaction(SIGCHLD, &dfl, &old_chld_);
    signal_fd_ = signalfd(-1, &waited_, SFD_NONBLOCK | SFD_CLOEXEC);
    if (signal_fd_ < 0) {
      const int err = errno;
      restore();
      throw std::runtime_error(std::string("cannot watch the processes' signals (signalfd): ") + std::strerror(err));
    }
  }
  ~watch_scope() {
    for (auto& c : kids_)
      if (c.running) {
        kill(c.pid, SIGKILL);
        int status;
        while (waitpid(c.pid, &status, 0) < 0 && errno == EINTR) {
        }
        c.running = false;
      }
    close(signal_fd_);
    restore();
  }
  watch_scope(const watch_scope&) = delete;
  watch_scope& operator=(const watch_scope&) = delete;

  const sigset_t& waited() const { return waited_; }
  const sigset_t& old_mask() const { return old_mask_; }

  // Waits up to `timeout` for one of the signals, forwarding the processes' output meanwhile;
  // returns SIGINT/SIGTERM/SIGHUP when launch got one, else 0.
  int wait(steady::duration timeout, process_output& output) {
    const auto ms = std::chrono::ceil<std::chrono::milliseconds>(std::max(timeout, steady::duration::zero()));
    if (!output.pump(static_cast<int>(ms.count()), signal_fd_)) return 0;
    signalfd_siginfo info;
    while (read(signal_fd_, &info, sizeof info) == static_cast<ssize_t>(sizeof info))
      if (is_stop_signal(static_cast<int>(info.ssi_signo))) return static_cast<int>(info.ssi_signo);
    return 0;  // SIGCHLD: the caller reaps
  }

 private:
  void restore() {
    sigaction(SIGCHLD, &old_chld_, nullptr);
    pthread_sigmask(SIG_SETMASK, &old_mask_, nullptr);
  }
  std::vector<child>& kids_;
  sigset_t waited_, old_mask_;
  struct sigaction old_chld_ {};
  int signal_fd_ = -1;
};

// Makes `from` the descriptor `to` of the new program (async-signal-safe).
void move_fd(int from, int to) {
  if (from == to)
    fcntl(from, F_SETFD, 0);  // keep it across exec
  else
    dup2(from, to);
}

// fork + exec one process. Only async-signal-safe calls between fork and exec.
pid_t start_process(const char* program, char* const* argv, char* const* envp, const sigset_t& child_mask,
                    process_output::child_ends ends, const std::string& exec_failed_message) {
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid != 0) return pid;
  // If launch dies without stopping us (SIGKILL), stop too rather than run on unwatched.
  prctl(PR_SET_PDEATHSIG, SIGTERM);
  if (getppid() != parent) _exit(128 + SIGTERM);
  sigprocmask(SIG_SETMASK, &child_mask, nullptr);
  struct sigaction default_pipe {};  // launch ignores SIGPIPE and SIGXFSZ; the process gets the defaults
  default_pipe.sa_handler = SIG_DFL;
  sigemptyset(&default_pipe.sa_mask);
  sigaction(SIGPIPE, &default_pipe, nullptr);
  sigaction(SIGXFSZ, &default_pipe, nullptr);
  move_fd(ends.out, STDOUT_FILENO);
  move_fd(ends.err, STDERR_FILENO);
  execve(program, argv, envp);
  // Why, in words (strerrordesc_np: a fixed string, no locale or allocation after the fork).
  const int why = errno;
  const char* text = strerrordesc_np(why);
  const std::string_view message(exec_failed_message);
  const std::string_view reason(text ? text : "error");
  // "No such file" of a file that is there: the interpreter its #! line names is missing (or,
  // for a program, the dynamic loader it names). open and read are async-signal-safe.
  std::string_view interpreter;
  if (why == ENOENT) {
    const int fd = open(program, O_RDONLY | O_CLOEXEC);
    char head[2] = {0, 0};
    if (fd >= 0) {
      const bool script = read(fd, head, 2) == 2 && head[0] == '#' && head[1] == '!';
      interpreter = script ? " (the interpreter its first line, #!, names)" : " (the dynamic loader it names)";
      close(fd);
    }
  }
  for (const std::string_view part : {message.substr(0, message.size() - 1), std::string_view(": "), reason,
                                      interpreter, std::string_view("\n")})
    if (write(STDERR_FILENO, part.data(), part.size()) < 0) break;
  _exit(127);
}

// The rank of this node's first process.
int first_rank_of(const launch_options& o) { return o.node_rank * o.nproc_per_node; }

// The arguments of every process: the program, then the command given after --.
std::vector<std::string> command_line(const launch_options& opt) {
  std::vector<std::string> arg_text{opt.program};
  arg_text.insert(arg_text.end(), opt.program_arguments.begin(), opt.program_arguments.end());
  arg_text.insert(arg_text.end(), opt.command.begin(), opt.command.end());
  return arg_text;
}

// The C view of `text` that execve takes: a pointer to each string, then nullptr. The pointers
// are into `text`, which must outlive them.
std::vector<char*> c_strings(std::vector<std::string>& text) {
  std::vector<char*> pointers;
  for (auto& s : text) pointers.push_back(s.data());
  pointers.push_back(nullptr);
  return pointers;
}

// The environment each process gets: launch's own less the variables launch sets, then
// opt.env, then the job's variables (and the restart count); each process's RANK and
// LOCAL_RANK last.
std::vector<std::vector<std::string>> process_environments(const launch_options& opt, const std::string& token,
                                                           int restart) {
  const int n = opt.nproc_per_node;
  const int first_rank = first_rank_of(opt);
  std::vector<std::string> extra_env = opt.env;
  if (opt.terminal) extra_env.push_back(std::string(kProgressTerminalVariable) + "=1");
  auto key_of = [](const std::string& kv) { return kv.substr(0, kv.find('=')); };
  std::vector<std::string> shared_env;
  for (char** e = environ; e && *e; ++e) {
    const std::string kv = *e;
    const std::string key = key_of(kv);
    if (std::none_of(std::begin(kJobVariables), std::end(kJobVariables), [&](const char* v) { return key == v; }) &&
        std::none_of(extra_env.begin(), extra_env.end(), [&](const std::string& x) { return key_of(x) == key; }))
      shared_env.push_back(kv);
  }
  shared_env.insert(shared_env.end(), extra_env.begin(), extra_env.end());
  shared_env.push_back("WORLD_SIZE=" + std::to_string(opt.nnodes * n));
  shared_env.push_back("LOCAL_WORLD_SIZE=" + std::to_string(n));
  shared_env.push_back("MASTER_ADDR=" + opt.master_addr);
  shared_env.push_back("MASTER_PORT=" + std::to_string(opt.master_port));
  shared_env.push_back("ACTORPIPE_JOB_TOKEN=" + token);
  shared_env.push_back(std::string(kRestartCountVariable) + "=" + std::to_string(restart));
  std::vector<std::vector<std::string>> env_text(n, shared_env);
  for (int i = 0; i < n; ++i) {
    env_text[i].push_back("RANK=" + std::to_string(first_rank + i));
    env_text[i].push_back("LOCAL_RANK=" + std::to_string(i));
  }
  return env_text;
}

// One line of launch's own, prefixed "actorpipe launch: ".
void say(process_output& output, log_level level, const std::string& text) {
  output.own_line(level, "actorpipe launch: " + text);
}

// Says what launch starts: how many processes, their ranks, the master, where the token comes
// from (never the token) and the command line each runs.
void announce(process_output& output, const launch_options& opt, bool generated_token,
              const std::vector<std::string>& arg_text) {
  const int n = opt.nproc_per_node;
  const int first_rank = first_rank_of(opt);
  std::string what;
  for (const auto& a : arg_text) what += (what.empty() ? "" : " ") + shell_quoted(a);
  say(output, log_level::info,
      "starting " + plural(n, "process", "processes") + " on node " + std::to_string(opt.node_rank) + " of " +
          std::to_string(opt.nnodes) +
          (n > 1 ? ": ranks " + std::to_string(first_rank) + "-" + std::to_string(first_rank + n - 1)
                 : ": rank " + std::to_string(first_rank)) +
          " of world size " + std::to_string(opt.nnodes * n) + ", master " + endpoint_text(opt.master_addr, opt.master_port) + ", " +
          (generated_token ? "a new job token" : "job token from ACTORPIPE_JOB_TOKEN") + "; each runs: " + what);
}

// The watch of the started processes: how many still run, the first failure's code, and when
// the rest get SIGTERM (after a failure's grace period) and SIGKILL.
struct watch_state {
  const launch_options& opt;
  std::vector<child>& kids;
  process_output& output;
  int alive = 0;
  int result = 0;  // the first failure's code
  bool every_exit_zero = true;  // no process ended otherwise (a stop that came during the last step)
  std::string first_failure = std::string();  // which process, and how it ended
  std::optional<steady::time_point> first_failure_at = std::nullopt;
  bool first_failure_final = false;           // exited 126, 127, 130 or 143 (attempt_end::not_restartable)
  double kill_after_s = 0;                    // how long after a SIGTERM or SIGINT kill_at is
  int signals_received = 0;
  int first_signal = 0;
  steady::time_point first_signal_at{};
  std::optional<steady::time_point> term_at = std::nullopt, kill_at = std::nullopt;
};

// Sends `sig` to every running process, marking its end as expected; returns their names.
// Whether the process is stopped (SIGSTOP, SIGTSTP, a debugger): /proc/PID/stat's state T or t.
bool is_stopped(pid_t pid) {
  const std::string stat = first_line("/proc/" + std::to_string(pid) + "/stat");
  const size_t paren = stat.rfind(')');
  return paren != std::string::npos && paren + 2 < stat.size() && (stat[paren + 2] == 'T' || stat[paren + 2] == 't');
}

std::string signal_running(watch_state& w, int sig) {
  std::string names;
  for (auto& c : w.kids)
    if (c.running) {
      // A stopped process acts on no SIGTERM until it runs again (it waited for the SIGKILL,
      // said to be "still running"): continued after it, as init systems do.
      const bool stopped = sig != SIGKILL && is_stopped(c.pid);
      kill(c.pid, sig);
      if (stopped) kill(c.pid, SIGCONT);
      c.stopped_by_us = true;
      names += (names.empty() ? "" : ", ") + c.name() + (stopped ? " (it was stopped: continued, so that it can exit)" : "");
    }
  return names;
}

// The exit code of a process reaped by waitpid (which returned `r`) and how it ended, in words.
std::pair<int, std::string> how_it_ended(pid_t r, int status) {
  if (r < 0)  // reaped by someone else: its status is lost, so count it as a failure
    return {1, "ended, but its exit status was lost"};
  if (WIFSIGNALED(status))
    return {128 + WTERMSIG(status), "was killed by signal " + std::to_string(WTERMSIG(status))};
  return {WEXITSTATUS(status), "exited with code " + std::to_string(WEXITSTATUS(status))};
}

// Reaps the processes that ended, after forwarding their last lines, and reports each failure
// launch did not cause; true when the job's first failure is among them.
bool reap_ended(watch_state& w) {
  bool first_failure_now = false;
  for (auto& c : w.kids) {
    if (!c.running) continue;
    int status = 0;
    const pid_t r = waitpid(c.pid, &status, WNOHANG);
    if (r == 0 || (r < 0 && errno == EINTR)) continue;
    c.running = false;
    --w.alive;
    const auto [code, how] = how_it_ended(r, status);
    const bool exited = r > 0 && WIFEXITED(status);
    w.output.drain(c.rank);  // its last lines before the news of its end
    if (code != 0) w.every_exit_zero = false;
    if (code == 0 || c.stopped_by_us) continue;
    say(w.output, log_level::error, c.name() + ' ' + how);
    if (w.result == 0) {
      w.result = code;
      w.first_failure = c.name() + ' ' + how;
      w.first_failure_at = steady::now();
      // Exited 130/143 after its checkpoint, or ended by SIGINT/SIGTERM itself (a second one,
      // or one before its handler was in place): a stop someone asked for, not restarted.
      const auto asked = [](int sig) { return sig == SIGINT || sig == SIGTERM || sig == SIGHUP; };
      const bool signalled = r > 0 && WIFSIGNALED(status) && asked(WTERMSIG(status));
      w.first_failure_final = (exited && (code == 126 || code == 127 || (code > 128 && asked(code - 128)))) || signalled;
      first_failure_now = true;
    }
  }
  return first_failure_now;
}

// A refused process (exit 2) failed before the job formed: the others have nothing to finish
// or save, so they get at most this long (time to be refused on their own, with their own
// message; a process still forming the job ends on SIGTERM).
constexpr double refused_grace_s = 2;

// The other processes' grace period after the first failure.
double grace_after_failure(const watch_state& w) {
  return w.result == exit_refused ? std::min(w.opt.grace_s, refused_grace_s) : w.opt.grace_s;
}

// Starts the grace period on a first failure, and sends SIGTERM or SIGKILL when one is due.
void stop_when_due(watch_state& w, bool first_failure_now, steady::time_point now) {
  if (first_failure_now && w.signals_received == 0) {
    const double grace = grace_after_failure(w);
    say(w.output, log_level::warn, std::string(w.result == exit_refused ? "a process was refused (exit 2): " : "") +
                                       "giving the other " + plural(w.alive, "running process", "running processes") +
                                       ' ' + number_text(grace) + " s to exit, then stopping them");
    w.term_at = now + seconds(grace);
  }
  if (w.kill_at && now >= *w.kill_at) {
    say(w.output, log_level::warn, "still running " + number_text(w.kill_after_s) +
                                       " s after being told to stop, sending SIGKILL to " + signal_running(w, SIGKILL));
    w.kill_at.reset();
  } else if (w.term_at && now >= *w.term_at) {
    say(w.output, log_level::warn, "still running after the " + number_text(grace_after_failure(w)) +
                                       " s grace period, sending SIGTERM to " + signal_running(w, SIGTERM));
    w.term_at.reset();
    w.kill_at = now + seconds(w.opt.kill_after_s);
    w.kill_after_s = w.opt.kill_after_s;
  }
}

// Passes a SIGINT, SIGTERM or SIGHUP launch got on to the processes: the first with SIGKILL to follow,
// a second as SIGKILL at once.
void pass_on_signal(watch_state& w, int sig) {
  // The same signal within a second of the first is a copy of that request (a terminal's Ctrl-C
  // reaches launch and its processes, GNU timeout signals its child and then its group): the
  // processes have it already, and a SIGKILL now would cost them their checkpoint.
  if (w.signals_received > 0 && sig == w.first_signal && steady::now() - w.first_signal_at < seconds(1)) return;
  if (++w.signals_received == 1) {
    w.first_signal = sig;
    w.first_signal_at = steady::now();
  }
  if (w.result == 0) w.result = 128 + sig;
  if (w.signals_received == 1) {
    say(w.output, log_level::warn, "got " + signal_name(sig) + ", passing it on to " + signal_running(w, sig) +
                                       "; SIGKILL follows in " + number_text(w.opt.stop_timeout_s) + " s");
    w.term_at.reset();
    const auto k = steady::now() + seconds(w.opt.stop_timeout_s);
    if (!w.kill_at || k < *w.kill_at) w.kill_after_s = w.opt.stop_timeout_s;
    w.kill_at = w.kill_at ? std::min(*w.kill_at, k) : k;
  } else {
    say(w.output, log_level::warn,
        "got " + signal_name(sig) + (sig == w.first_signal ? " again" : " after the " + signal_name(w.first_signal)) +
            ", sending SIGKILL to " + signal_running(w, SIGKILL));
  }
}

// Reaps, stops and forwards signals until every process has ended.
void watch_until_all_ended(watch_state& w, watch_scope& scope) {
  while (w.alive > 0) {
    const bool first_failure_now = reap_ended(w);
    if (w.alive == 0) break;
    const auto now = steady::now();
    stop_when_due(w, first_failure_now, now);
    // Sleep until a child changes state or writes, launch gets a signal, or the next deadline;
    // the 100 ms cap keeps the loop correct even if a SIGCHLD is lost.
    auto timeout = std::chrono::duration_cast<steady::duration>(std::chrono::milliseconds(100));
    for (const auto& at : {w.term_at, w.kill_at})
      if (at) timeout = std::min(timeout, *at - now);
    const int sig = scope.wait(timeout, w.output);
    if (sig != 0) pass_on_signal(w, sig);
  }
}

// `result`, or 128 + signal for a SIGINT/SIGTERM/SIGHUP that came after the last process ended when
// nothing failed before: such a signal still counts, and must not be left pending for when
// the mask is restored.
int with_late_stop_signals(const watch_scope& scope, int result) {
  const timespec zero{0, 0};
  for (int sig; (sig = sigtimedwait(&scope.waited(), nullptr, &zero)) > 0;)
    if (is_stop_signal(sig) && result == 0) result = 128 + sig;
  return result;
}

// How one attempt of the job ended: its code (0, or the first failure's), whether launch was
// told to stop (never restarted), the failure in words, and how long it ran.
struct attempt_end {
  int code = 0;
  bool stopped = false;
  // The first failure was a process that stopped on request (it exited 130 or 143 after its
  // checkpoint: someone sent it SIGINT or SIGTERM) or a command that cannot run (126, 127):
  // a restart would undo the request, or fail the same way.
  bool not_restartable = false;
  std::string failure;
  double seconds = 0;
  std::string output_lost;  // process_output::lost(): the job's lines could not all be written
};

// What an attempt needs: the options, the token, which restart it is (0: the first attempt)
// and how the earlier ones ended.
struct attempt_plan {
  const launch_options& opt;
  const std::string& token;
  bool generated_token;
  int restart;
  const std::vector<attempt_end>& history;
};

std::string attempt_history(const std::vector<attempt_end>& history) {
  std::string text;
  for (std::size_t i = 0; i < history.size(); ++i)
    text += "\n  attempt " + std::to_string(i + 1) + ": " + history[i].failure + " after " +
            number_text(std::round(history[i].seconds * 10) / 10) + " s";
  return text;
}

// After a failed attempt: that the job starts again and why, or that launch gives up, with
// the history of every attempt.
void report_failure(process_output& output, const attempt_plan& p, const attempt_end& end) {
  const int n = p.restart + 1;
  if (p.opt.max_restarts == 0) return;  // no restarts asked for: the failure was reported
  if (end.not_restartable) {
    say(output, log_level::error,
        "attempt " + std::to_string(n) + " failed (" + end.failure + "); not restarting: " +
            (end.code == 126 || end.code == 127
                 ? std::string("the command cannot run, and would not the next time")
                 : "the job stopped on " + (end.code > 128 ? "the " + signal_name(end.code - 128) : std::string("a stop signal")) +
                       " one of its processes was sent (after its checkpoint where it could take one), and a restart "
                       "would undo that request"));
  } else if (end.code == exit_refused) {
    say(output, log_level::error,
        "attempt " + std::to_string(n) + " failed (" + end.failure + "); not restarting: exit code " +
            std::to_string(exit_refused) +
            " means the command was refused (its flags, config, input files or checkpoint, a job that cannot form: "
            "the master port taken, a wrong job token or world size; or a model that fails its first step the same "
            "way in every run: its process's error says which), and a restart would be refused the same way");
  } else if (p.restart < p.opt.max_restarts) {
    // Without a --save-dir there is no checkpoint to resume: it starts again (train says so too).
    const bool saves = std::any_of(p.opt.command.begin(), p.opt.command.end(), [](const std::string& a) {
      return a == "--save-dir" || a.rfind("--save-dir=", 0) == 0;
    });
    say(output, log_level::warn,
        "attempt " + std::to_string(n) + " failed (" + end.failure + "); restarting the job (restart " +
            std::to_string(n) + " of " + std::to_string(p.opt.max_restarts) + "): " +
            (saves ? "train resumes from the newest valid checkpoint in its --save-dir"
                   : "train starts again from step 0, as it has no --save-dir to resume from"));
  } else {
    std::vector<attempt_end> all = p.history;
    all.push_back(end);
    say(output, log_level::error,
        "giving up after " + plural(p.opt.max_restarts, "restart", "restarts") + " (--max-restarts " +
            std::to_string(p.opt.max_restarts) + "); the job failed " + plural(n, "time", "times") + ":" +
            attempt_history(all));
  }
}

// Starts this node's processes once and watches them until every one has ended.
attempt_end run_attempt(const attempt_plan& p, std::vector<child>& kids, watch_scope& scope, std::ostream& log) {
  const launch_options& opt = p.opt;
  const int n = opt.nproc_per_node;
  const int first_rank = first_rank_of(opt);
  const auto started = steady::now();

  // Everything the children need is built before the first fork.
  std::vector<std::string> arg_text = command_line(opt);
  std::vector<char*> argv = c_strings(arg_text);
  std::vector<std::vector<std::string>> env_text = process_environments(opt, p.token, p.restart);
  std::vector<std::vector<char*>> envp;
  for (auto& env : env_text) envp.push_back(c_strings(env));
  const std::string exec_failed = "actorpipe launch: cannot run '" + opt.program + "'\n";

  process_output output({opt.out_fd, opt.err_fd, opt.terminal}, log);
  if (p.restart == 0)
    announce(output, opt, p.generated_token, arg_text);
  else
    say(output, log_level::info,
        "restart " + std::to_string(p.restart) + " of " + std::to_string(opt.max_restarts) + ": starting " +
            plural(n, "process", "processes") + " again (" + kRestartCountVariable + "=" + std::to_string(p.restart) +
            ")");
  std::vector<process_output::child_ends> ends;
  for (int i = 0; i < n; ++i) ends.push_back(output.add(first_rank + i));
  kids.assign(n, child{});
  for (int i = 0; i < n; ++i) {
    const pid_t pid =
        start_process(opt.program.c_str(), argv.data(), envp[i].data(), scope.old_mask(), ends[i], exec_failed);
    if (pid < 0)
      throw std::runtime_error("cannot start process " + std::to_string(first_rank + i) + ": " + std::strerror(errno));
    kids[i] = child{pid, first_rank + i, i, true, false};
  }
  output.opened();

  watch_state w{opt, kids, output, n};
  watch_until_all_ended(w, scope);
  // What the processes wrote last; their own children may hold a pipe open a little longer.
  output.finish(500);
  attempt_end end;
  end.code = with_late_stop_signals(scope, w.result);
  // Told to stop: a signal during the watch, or one after every process ended cleanly.
  end.stopped = w.signals_received > 0 || (w.result == 0 && end.code != 0);
  // Every process exited 0: the job finished (a stop that came during its last step has no step
  // left to stop after, as train alone says with 0); launch said 130 all the same.
  if (w.every_exit_zero && end.code != 0) {
    say(output, log_level::info, "every process exited 0: the job finished before the stop asked for could end it");
    end.code = 0;
  }
  end.failure = w.first_failure;
  end.not_restartable = w.first_failure_final;
  // Until the first failure: the others' grace period after it is no part of the process's life.
  end.seconds = std::chrono::duration<double>(w.first_failure_at.value_or(steady::now()) - started).count();
  end.output_lost = output.lost();
  if (end.code != 0 && !end.stopped) report_failure(output, p, end);
  return end;
}

}  // namespace

std::string running_executable(const std::string& argv0) {
  std::error_code ec;
  const auto self = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (!ec && !self.empty()) return self.string();
  if (argv0.find('/') != std::string::npos) return std::filesystem::absolute(argv0, ec).string();
  return std::string();
}

int run_launch(const launch_options& opt, std::ostream& log) {
  validate(opt);
  // While launch runs, a closed stdout (actorpipe launch ... | head) must not kill it with
  // SIGPIPE: the lines for it are dropped instead, and it exits 1 saying so. Its processes get
  // the default back in start_process (after an attempt's end it was the default again, and
  // launch's own last lines killed it: 141).
  const write_signals_ignored no_sigpipe;
  bool generated = false;
  const std::string token = job_token(opt, generated);
  std::vector<child> kids;
  watch_scope scope(kids);
  std::vector<attempt_end> history;
  for (int restart = 0;; ++restart) {
    attempt_plan plan{opt, token, generated, restart, history};
    const attempt_end end = run_attempt(plan, kids, scope, log);
    if (end.code == 0 && !end.output_lost.empty()) {  // the run's report is lost: no success (train exits 1 so)
      log << "actorpipe launch: error: the processes' output could not be written (" << end.output_lost << ")\n";
      return exit_failed;
    }
    if (end.code == 0 || end.stopped || end.code == exit_refused || end.not_restartable) return end.code;
    history.push_back(end);
    if (restart == opt.max_restarts) return end.code;
  }
}

}  // namespace actorpipe
