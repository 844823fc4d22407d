// Tests for transport/nccl/nccl_channel. Every CUDA call happens in a fork()ed child (CUDA does
// not survive fork, so the test process itself stays CUDA-free); children report a string back
// through a pipe and every wait is bounded. Without a usable GPU the GPU tests print why and pass.
#include "transport/nccl/nccl_channel.hpp"

#include <catch2/catch.hpp>
#include <cuda_runtime_api.h>

#include <poll.h>
#include <signal.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

using actorpipe::transport::nccl::make_nccl_unique_id;
using actorpipe::transport::nccl::nccl_channel;
using actorpipe::transport::nccl::nccl_channel_options;
using actorpipe::transport::nccl::nccl_unavailable_reason;
using actorpipe::transport::nccl::p2p_op;
using namespace std::chrono_literals;
using clock_type = std::chrono::steady_clock;

namespace {

// Blocking pipe I/O with a deadline; false on timeout, EOF or error.
bool read_exact(int fd, void* data, std::size_t n, std::chrono::milliseconds timeout) {
  auto* out = static_cast<std::uint8_t*>(data);
  const auto deadline = clock_type::now() + timeout;
  while (n > 0) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - clock_type::now()).count();
    if (left <= 0) return false;
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(left)) <= 0) continue;
    const ssize_t got = ::read(fd, out, n);
    if (got <= 0) return false;
    out += got;
    n -= static_cast<std::size_t>(got);
  }
  return true;
}

bool write_all(int fd, const void* data, std::size_t n) {
  const auto* in = static_cast<const std::uint8_t*>(data);
  while (n > 0) {
    const ssize_t put = ::write(fd, in, n);
    if (put <= 0) return false;
    in += put;
    n -= static_cast<std::size_t>(put);
  }
  return true;
}

// A fork()ed child running `body`; what body returns (or the exception it throws) comes back
// through a pipe.
struct child {
  pid_t pid = -1;
  int fd = -1;
};

child spawn(const std::function<std::string()>& body) {
  int fds[2];
  if (::pipe(fds) != 0) throw std::runtime_error("pipe failed");
  std::fflush(nullptr);  // or the child flushes the parent's buffered output a second time
  const pid_t pid = ::fork();
  if (pid < 0) throw std::runtime_error("fork failed");
  if (pid == 0) {
    ::close(fds[0]);
    std::string text;
    try {
      text = body();
    } catch (const std::exception& e) {
      text = std::string("exception: ") + e.what();
    } catch (...) {
      text = "exception: unknown";
    }
    write_all(fds[1], text.data(), text.size());
    ::close(fds[1]);
    std::_Exit(0);  // no atexit handlers, no Catch teardown in the child
  }
  ::close(fds[1]);
  return {pid, fds[0]};
}

struct outcome {
  bool finished = false;  // wrote its answer and closed the pipe before the deadline
  std::string text;
};

// Reads the child's answer until EOF or the deadline; a child still running then is killed.
outcome collect(child c, clock_type::time_point deadline) {
  outcome out;
  char buffer[4096];
  while (true) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - clock_type::now()).count();
    if (left <= 0) break;
    pollfd p{c.fd, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(left)) <= 0) continue;
    const ssize_t got = ::read(c.fd, buffer, sizeof(buffer));
    if (got < 0) break;
    if (got == 0) {
      out.finished = true;
      break;
    }
    out.text.append(buffer, static_cast<std::size_t>(got));
  }
  ::close(c.fd);
  if (!out.finished) ::kill(c.pid, SIGKILL);
  ::waitpid(c.pid, nullptr, 0);
  return out;
}

std::string run_in_child(const std::function<std::string()>& body, std::chrono::seconds timeout = 60s) {
  const outcome out = collect(spawn(body), clock_type::now() + timeout);
  return out.finished ? out.text : "child did not finish within " + std::to_string(timeout.count()) + " s";
}

// Why the GPU tests cannot run here ("" when they can), asked in a child.
std::string gpu_skip_reason(int local_ranks) {
  return run_in_child([local_ranks] { return nccl_unavailable_reason(local_ranks); });
}

std::vector<std::uint8_t> pattern(std::size_t n, std::uint8_t seed) {
  std::vector<std::uint8_t> bytes(n);
  for (std::size_t i = 0; i < n; ++i) bytes[i] = static_cast<std::uint8_t>(seed + i * 131 + (i >> 11));
  return bytes;
}

// Device buffer for the child's checks; throws with cudaGetErrorString.
struct device_buffer {
  void* ptr = nullptr;
  explicit device_buffer(std::size_t n) {
    const cudaError_t e = cudaMalloc(&ptr, n == 0 ? 1 : n);
    if (e != cudaSuccess) throw std::runtime_error(std::string("cudaMalloc: ") + cudaGetErrorString(e));
  }
  ~device_buffer() { cudaFree(ptr); }
  device_buffer(const device_buffer&) = delete;
  device_buffer& operator=(const device_buffer&) = delete;
};

void copy(void* to, const void* from, std::size_t n, cudaMemcpyKind kind) {
  const cudaError_t e = cudaMemcpy(to, from, n, kind);
  if (e != cudaSuccess) throw std::runtime_error(std::string("cudaMemcpy: ") + cudaGetErrorString(e));
}

// "" when `device` holds exactly `expected`, else where the first difference is.
std::string compare(const void* device, const std::vector<std::uint8_t>& expected, const std::string& what) {
  std::vector<std::uint8_t> got(expected.size());
  copy(got.data(), device, got.size(), cudaMemcpyDeviceToHost);
  for (std::size_t i = 0; i < got.size(); ++i) {
    if (got[i] != expected[i]) {
      return what + ": byte " + std::to_string(i) + " is " + std::to_string(got[i]) + ", want " +
             std::to_string(expected[i]) + "\n";
    }
  }
  return "";
}

const std::vector<std::size_t> sizes = {1 << 10, 4 << 10, 16 << 10, 64 << 10, 256 << 10,
                                        1 << 20, 4 << 20, 16 << 20, 64 << 20, 1000003};

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// Two ranks in two children; the unique id goes from rank 0 to rank 1 through a pipe.
std::vector<outcome> run_two_ranks(const std::function<std::string(int rank, const std::vector<std::uint8_t>& id)>& body,
                                   std::chrono::seconds timeout) {
  int id_pipe[2];
  if (::pipe(id_pipe) != 0) throw std::runtime_error("pipe failed");
  child rank0 = spawn([&] {
    ::close(id_pipe[0]);
    const std::vector<std::uint8_t> id = make_nccl_unique_id();
    if (!write_all(id_pipe[1], id.data(), id.size())) return std::string("rank 0: could not pass the unique id");
    ::close(id_pipe[1]);
    return body(0, id);
  });
  child rank1 = spawn([&] {
    ::close(id_pipe[1]);
    std::vector<std::uint8_t> id(128);
    if (!read_exact(id_pipe[0], id.data(), id.size(), 30s)) return std::string("rank 1: no unique id from rank 0");
    return body(1, id);
  });
  ::close(id_pipe[0]);
  ::close(id_pipe[1]);
  const auto deadline = clock_type::now() + timeout;
  std::vector<outcome> out;
  out.push_back(collect(rank0, deadline));
  out.push_back(collect(rank1, deadline));
  return out;
}

}  // namespace

CATCH_TEST_CASE("nccl_unavailable_reason says why NCCL cannot run here", "[nccl]") {
  const std::string answer = run_in_child([] {
    return nccl_unavailable_reason(1) + "|" + nccl_unavailable_reason(1 << 20);
  });
  CATCH_INFO(answer);
  const std::string one = answer.substr(0, answer.find('|'));
  const std::string many = answer.substr(answer.find('|') + 1);
  // A million ranks on one host never fit: either no GPU at all, or too few.
  CATCH_CHECK((contains(many, "cudaGetDeviceCount") || contains(many, "refuses two ranks on one GPU")));
  if (!one.empty()) {
    CATCH_WARN("no usable GPU here: " << one);
    CATCH_CHECK(contains(one, "no usable CUDA device"));
    CATCH_CHECK(one == many);  // no device: the same reason whatever the rank count
  }
}

CATCH_TEST_CASE("make_nccl_unique_id gives fresh ids of NCCL_UNIQUE_ID_BYTES bytes, no GPU needed", "[nccl]") {
  const std::string answer = run_in_child([] {
    const auto a = make_nccl_unique_id();
    const auto b = make_nccl_unique_id();
    return std::to_string(a.size()) + (a == b ? " same" : " different");
  });
  CATCH_CHECK(answer == "128 different");
}

CATCH_TEST_CASE("nccl channel rejects bad arguments before touching CUDA", "[nccl]") {
  // Safe in the test process itself: argument checks come before any CUDA call.
  const std::vector<std::uint8_t> id(128, 0);
  CATCH_CHECK_THROWS_WITH(nccl_channel(0, 0, id), Catch::Contains("world size must be >= 1: got 0"));
  CATCH_CHECK_THROWS_WITH(nccl_channel(2, 2, id), Catch::Contains("rank must be in [0, 2): got 2"));
  CATCH_CHECK_THROWS_WITH(nccl_channel(0, 2, std::vector<std::uint8_t>(5)),
                          Catch::Contains("unique id must be 128 bytes") && Catch::Contains("got 5"));
  nccl_channel_options local;
  local.local_rank = 3;
  local.local_ranks = 2;
  CATCH_CHECK_THROWS_WITH(nccl_channel(0, 4, id, local), Catch::Contains("local rank must be in [0, local ranks)"));
  nccl_channel_options no_time;
  no_time.timeout = 0ms;
  CATCH_CHECK_THROWS_AS(nccl_channel(0, 2, id, no_time), std::invalid_argument);
}

CATCH_TEST_CASE("creating a nccl channel with no CUDA device says so", "[nccl]") {
  const std::string message = run_in_child([] {
    ::setenv("CUDA_VISIBLE_DEVICES", "-1", 1);  // hide every GPU, so this runs the same anywhere
    try {
      nccl_channel channel(0, 2, make_nccl_unique_id());
    } catch (const std::runtime_error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  });
  CATCH_INFO(message);
  CATCH_CHECK(contains(message, "nccl channel (rank 0 of 2)"));
  CATCH_CHECK(contains(message, "no usable CUDA device: cudaGetDeviceCount: "));
  CATCH_CHECK(!contains(message, "exception: "));  // a runtime_error, nothing else
}

CATCH_TEST_CASE("a one-rank nccl channel exchanges 1 KiB..64 MiB with itself", "[nccl][gpu]") {
  const std::string skip = gpu_skip_reason(1);
  if (!skip.empty()) {
    CATCH_WARN("skipped: " << skip);
    return;
  }
  const std::string errors = run_in_child([] {
    nccl_channel channel(0, 1, make_nccl_unique_id());
    std::string errors;
    for (std::size_t n : sizes) {
      device_buffer out(n), in(n);
      const auto bytes = pattern(n, 7);
      copy(out.ptr, bytes.data(), n, cudaMemcpyHostToDevice);
      channel.exchange(0, out.ptr, in.ptr, n);
      channel.synchronize(30s);
      errors += compare(in.ptr, bytes, std::to_string(n) + " bytes");
    }
    // Input errors are std::invalid_argument with what was wrong, and leave the channel usable.
    std::vector<std::uint8_t> host(64);
    device_buffer dev(64);
    try {
      channel.exchange(0, host.data(), dev.ptr, 64);
      errors += "host memory accepted\n";
    } catch (const std::invalid_argument& e) {
      if (!contains(e.what(), "host memory")) errors += std::string("host memory: ") + e.what() + "\n";
    }
    try {
      channel.exchange({p2p_op::receive(0, dev.ptr, 64)});
      errors += "unpaired receive from itself accepted\n";
    } catch (const std::invalid_argument& e) {
      if (!contains(e.what(), "must pair up")) errors += std::string("unpaired: ") + e.what() + "\n";
    }
    try {
      channel.send(1, dev.ptr, 64);
      errors += "peer 1 of 1 accepted\n";
    } catch (const std::invalid_argument& e) {
      if (!contains(e.what(), "peer must be in [0, 1)")) errors += std::string("peer: ") + e.what() + "\n";
    }
    if (channel.aborted()) errors += "input errors aborted the channel\n";
    return errors;
  }, 120s);
  CATCH_CHECK(errors == "");
}

CATCH_TEST_CASE("two processes exchange 1 KiB..64 MiB over nccl", "[nccl][gpu]") {
  const std::string skip = gpu_skip_reason(2);
  if (!skip.empty()) {
    CATCH_WARN("skipped: " << skip);
    return;
  }
  const auto out = run_two_ranks([](int rank, const std::vector<std::uint8_t>& id) {
    nccl_channel channel(rank, 2, id);
    const int peer = 1 - rank;
    std::string errors;
    for (std::size_t n : sizes) {
      device_buffer out(n), in(n);
      copy(out.ptr, pattern(n, static_cast<std::uint8_t>(rank + 1)).data(), n, cudaMemcpyHostToDevice);
      channel.exchange(peer, out.ptr, in.ptr, n);
      channel.synchronize(30s);
      errors += compare(in.ptr, pattern(n, static_cast<std::uint8_t>(peer + 1)), "exchange " + std::to_string(n));
    }
    // One way, with plain send / receive: rank 0 sends, rank 1 receives.
    const std::size_t n = 3 << 20;
    device_buffer buffer(n);
    if (rank == 0) {
      copy(buffer.ptr, pattern(n, 42).data(), n, cudaMemcpyHostToDevice);
      channel.send(1, buffer.ptr, n);
      channel.synchronize(30s);
    } else {
      channel.receive(0, buffer.ptr, n);
      channel.synchronize(30s);
      errors += compare(buffer.ptr, pattern(n, 42), "one-way " + std::to_string(n));
    }
    return errors;
  }, 180s);
  for (int rank = 0; rank < 2; ++rank) {
    CATCH_INFO("rank " << rank << ": " << out[rank].text);
    CATCH_CHECK(out[rank].finished);
    CATCH_CHECK(out[rank].text == "");
  }
}

CATCH_TEST_CASE("a nccl peer that exits makes the other's synchronize fail within the timeout", "[nccl][gpu]") {
  const std::string skip = gpu_skip_reason(2);
  if (!skip.empty()) {
    CATCH_WARN("skipped: " << skip);
    return;
  }
  const auto out = run_two_ranks([](int rank, const std::vector<std::uint8_t>& id) -> std::string {
    nccl_channel channel(rank, 2, id);
    const std::size_t n = 1 << 20;
    device_buffer a(n), b(n);
    channel.exchange(1 - rank, a.ptr, b.ptr, n);  // connections are up after this
    channel.synchronize(30s);
    if (rank == 1) std::_Exit(0);  // dies without a word: no destructor, no finalize
    std::this_thread::sleep_for(500ms);
    const auto start = clock_type::now();
    try {
      // A receive cannot complete without its sender (a small send might, into the peer's buffer).
      channel.receive(1, b.ptr, n);
      channel.synchronize(5s);
    } catch (const std::runtime_error& e) {
      const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(clock_type::now() - start).count();
      return std::string(e.what()) + "|" + std::to_string(ms) + "|" + (channel.aborted() ? "aborted" : "live");
    }
    return "no error";
  }, 120s);
  const std::string& text = out[0].text;
  CATCH_INFO("rank 0: " << text);
  CATCH_REQUIRE(out[0].finished);
  const auto bar = text.find('|');
  CATCH_REQUIRE(bar != std::string::npos);
  const std::string message = text.substr(0, bar);
  const long ms = std::stol(text.substr(bar + 1));
  CATCH_CHECK(contains(message, "nccl channel (rank 0 of 2"));
  CATCH_CHECK(contains(message, "communicator aborted"));
  CATCH_CHECK(ms < 5000 + 10000);  // the timeout, plus slack for aborting
  CATCH_CHECK(contains(text, "|aborted"));
}

CATCH_TEST_CASE("a nccl rank that never joins makes creation fail within the timeout", "[nccl][gpu]") {
  const std::string skip = gpu_skip_reason(1);
  if (!skip.empty()) {
    CATCH_WARN("skipped: " << skip);
    return;
  }
  const std::string text = run_in_child([] {
    nccl_channel_options options;
    options.local_ranks = 1;  // rank 1 would be elsewhere; it never comes
    options.timeout = 3s;
    const auto start = clock_type::now();
    try {
      nccl_channel channel(0, 2, make_nccl_unique_id(), options);
    } catch (const std::runtime_error& e) {
      const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(clock_type::now() - start).count();
      return std::string(e.what()) + "|" + std::to_string(ms);
    }
    return std::string("no error");
  }, 90s);
  CATCH_INFO(text);
  const auto bar = text.find('|');
  CATCH_REQUIRE(bar != std::string::npos);
  CATCH_CHECK(contains(text, "nccl channel (rank 0 of 2"));
  CATCH_CHECK(contains(text, "ncclCommInitRankConfig"));
  CATCH_CHECK(std::stol(text.substr(bar + 1)) < 3000 + 10000);
}
