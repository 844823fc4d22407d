// report_crashes: a handler that only calls async-signal-safe functions (write, backtrace
// once warmed up, backtrace_symbols_fd, raise) and nothing that allocates.
#include "apps/crash_report.hpp"

#include <execinfo.h>
#include <signal.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <initializer_list>

namespace actorpipe {
namespace {

void say(const char* text) {
  std::size_t left = std::strlen(text);
  while (left > 0) {
    const ssize_t n = ::write(STDERR_FILENO, text, left);
    if (n <= 0) return;
    text += n;
    left -= static_cast<std::size_t>(n);
  }
}

// `value` in decimal, into `out` (21 bytes).
void decimal(unsigned long long value, char* out) {
  char digits[21];
  int n = 0;
  do digits[n++] = static_cast<char>('0' + value % 10); while ((value /= 10) != 0);
  for (int i = 0; i < n; ++i) out[i] = digits[n - 1 - i];
  out[n] = '\0';
}

// "0x" and 16 hex digits, into `out` (19 bytes).
void hex_address(const void* address, char* out) {
  auto value = reinterpret_cast<std::uintptr_t>(address);
  out[0] = '0', out[1] = 'x';
  for (int i = 17; i >= 2; --i, value >>= 4) out[i] = "0123456789abcdef"[value & 0xf];
  out[18] = '\0';
}

const char* name_of(int sig) {
  switch (sig) {
    case SIGSEGV: return "SIGSEGV";
    case SIGBUS: return "SIGBUS";
    case SIGILL: return "SIGILL";
    case SIGFPE: return "SIGFPE";
    case SIGABRT: return "SIGABRT";
    default: return "a fatal signal";
  }
}

const char* meaning_of(int sig) {
  switch (sig) {
    case SIGSEGV: return "an invalid memory access";
    case SIGBUS: return "a bus error";
    case SIGILL: return "an instruction this CPU does not have";
    case SIGFPE: return "an arithmetic fault";
    case SIGABRT: return "the process aborted";
    default: return "a fatal signal";
  }
}

void on_crash(int sig, siginfo_t* info, void*) {
  // SA_RESETHAND has put the default action back: a fault in here ends the process at once.
  // kill() or sigqueue() from another process is not a fault of this one (abort() is: it
  // raises SIGABRT with this process's id).
  const bool sent = info != nullptr && info->si_code <= 0 && info->si_pid != ::getpid();
  if (sent) {
    char pid[21];
    decimal(static_cast<unsigned long long>(info->si_pid), pid);
    say("\nactorpipe: ended by ");
    say(name_of(sig));
    say(", sent by process ");
    say(pid);
    say(". The thread it reached was here:\n");
  } else {
    say("\nactorpipe: crashed (");
    say(name_of(sig));
    say(": ");
    say(meaning_of(sig));
    if (info != nullptr && info->si_code > 0 && sig != SIGABRT) {
      char address[19];
      hex_address(info->si_addr, address);
      say(" at ");
      say(address);
    }
    say("). The crashing thread's frames:\n");
  }
  void* frames[64];
  const int count = ::backtrace(frames, 64);
  ::backtrace_symbols_fd(frames, count, STDERR_FILENO);
  if (!sent) say("actorpipe: this is a bug: please report it with the command line and this output\n");
  ::raise(sig);  // blocked until the handler returns, then the default action
}

// The handler's own stack on the main thread, for a crash that overflowed the stack.
alignas(16) char alternate_stack[64 * 1024];

}  // namespace

void report_crashes() {
  void* warm[2];
  ::backtrace(warm, 2);  // loads libgcc's unwinder now: loading it in the handler could allocate
  stack_t stack{};
  stack.ss_sp = alternate_stack;
  stack.ss_size = sizeof alternate_stack;
  ::sigaltstack(&stack, nullptr);
  struct sigaction action {};
  action.sa_sigaction = on_crash;
  action.sa_flags = SA_SIGINFO | SA_RESETHAND | SA_ONSTACK;
  sigemptyset(&action.sa_mask);
  for (const int sig : {SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT}) ::sigaction(sig, &action, nullptr);
}

}  // namespace actorpipe
