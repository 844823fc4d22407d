// Tests for transport/ucx/ucx_worker: in-process and cross-process tagged transfers, truncation,
// and peer-failure reporting. Every wait is bounded so a UCX hang fails instead of blocking.
#include "transport/ucx/ucx_worker.hpp"

#include <catch2/catch.hpp>

#include "tests/transport/fork_helpers.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <signal.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

using actorpipe::transport::ucx::ucx_worker;
using namespace std::chrono_literals;
using namespace actorpipe::testing;

namespace {

// Collects completions from the progress threads and waits for them with a deadline.
class completions {
public:
  void add(std::string error, std::size_t received = 0) {
    std::lock_guard<std::mutex> lock(mutex_);
    errors_.push_back(std::move(error));
    received_.push_back(received);
    changed_.notify_all();
  }
  bool wait_for_count(std::size_t n, std::chrono::milliseconds timeout) {
    std::unique_lock<std::mutex> lock(mutex_);
    return changed_.wait_for(lock, timeout, [&] { return errors_.size() >= n; });
  }
  std::vector<std::string> errors() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return errors_;
  }
  std::vector<std::size_t> received() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return received_;
  }

private:
  mutable std::mutex mutex_;
  std::condition_variable changed_;
  std::vector<std::string> errors_;
  std::vector<std::size_t> received_;
};

std::vector<std::uint8_t> pattern(std::size_t n, std::uint8_t seed) {
  std::vector<std::uint8_t> bytes(n);
  for (std::size_t i = 0; i < n; ++i) bytes[i] = static_cast<std::uint8_t>(seed + i * 131 + (i >> 11));
  return bytes;
}

bool same_bytes(const std::vector<std::uint8_t>& a, const std::vector<std::uint8_t>& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size()) == 0);
}


// Sends this worker's address down `out`, reads the other side's from `in` and connects to it:
// the other side's peer id, or -1.
int exchange_and_connect(ucx_worker& w, int out, int in) {
  if (!write_blob(out, w.address())) return -1;
  auto other = read_blob(in, 10000);
  if (!other) return -1;
  return w.connect(*other);
}

// A forked child's side of a wired pair (UCX_TLS as the parent's): exchange addresses over the
// pipes, connect, one round trip so both directions are up, say ready; then stop itself
// (SIGSTOP) when `stop` says so, and wait to be killed (bounded, should the parent be gone).
// Never returns; reports through its exit code.
[[noreturn]] void run_wired_child(int to_child[2], int to_parent[2], bool stop) {
  ::close(to_child[1]);
  ::close(to_parent[0]);
  try {
    ucx_worker w;
    const int parent = exchange_and_connect(w, to_parent[1], to_child[0]);
    if (parent < 0) ::_exit(11);
    std::uint8_t ping = 5, pong = 0;
    completions done;
    w.send(parent, 3, &ping, 1, [&](std::string e) { done.add(e); });
    w.receive(4, &pong, 1, [&](std::string e, std::size_t n) { done.add(e, n); });
    if (!done.wait_for_count(2, 10s)) ::_exit(12);
    const char ready = 1;
    write_exact(to_parent[1], &ready, 1);
    if (stop) ::raise(SIGSTOP);
    char never = 0;
    read_exact(to_child[0], &never, 1, 20000);
  } catch (...) {
    ::_exit(16);
  }
  ::_exit(0);
}

// The parent's side of run_wired_child: the child's peer id in `w`, or -1.
int wire_to_child(ucx_worker& w, int to_child[2], int to_parent[2]) {
  const int child = exchange_and_connect(w, to_child[1], to_parent[0]);
  if (child < 0) return -1;
  std::uint8_t ping = 0, pong = 6;
  completions done;
  w.receive(3, &ping, 1, [&](std::string e, std::size_t n) { done.add(std::move(e), n); });
  w.send(child, 4, &pong, 1, [&](std::string e) { done.add(std::move(e)); });
  if (!done.wait_for_count(2, 10s)) return -1;
  for (const auto& e : done.errors())
    if (!e.empty()) return -1;
  char ready = 0;
  return read_exact(to_parent[0], &ready, 1, 10000) ? child : -1;
}

// A forked peer running run_wired_child, and the parent's ends of its pipes. Going, it kills
// the child (unless it was reaped already) and closes the pipes.
class wired_child {
 public:
  explicit wired_child(bool stop) {
    if (::pipe(to_child_) != 0 || ::pipe(to_parent_) != 0) return;
    pid_ = ::fork();
    if (pid_ == 0) run_wired_child(to_child_, to_parent_, stop);
    ::close(to_child_[0]);
    ::close(to_parent_[1]);
  }
  ~wired_child() {
    kill_and_reap();
    ::close(to_child_[1]);
    ::close(to_parent_[0]);
  }
  wired_child(const wired_child&) = delete;
  wired_child& operator=(const wired_child&) = delete;

  pid_t pid() const { return pid_; }
  // Address exchange and a round trip: the child's peer id in `w`, or -1.
  int wire(ucx_worker& w) { return wire_to_child(w, to_child_, to_parent_); }
  void kill_and_reap() {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }

 private:
  int to_child_[2] = {-1, -1}, to_parent_[2] = {-1, -1};
  pid_t pid_ = -1;
};

}  // namespace

CATCH_TEST_CASE("ucx_worker moves 0 B to 16 MiB both ways between two workers", "[transport][ucx]") {
  ucx_worker a;
  ucx_worker b;
  CATCH_REQUIRE_FALSE(a.address().empty());
  const int a_to_b = a.connect(b.address());
  const int b_to_a = b.connect(a.address());

  const std::vector<std::size_t> sizes = {0, 1, 4096, std::size_t{1} << 20, std::size_t{16} << 20};
  std::vector<std::vector<std::uint8_t>> a_out, b_out, a_in, b_in;
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    a_out.push_back(pattern(sizes[i], static_cast<std::uint8_t>(i)));
    b_out.push_back(pattern(sizes[i], static_cast<std::uint8_t>(100 + i)));
    a_in.emplace_back(sizes[i], 0xEE);
    b_in.emplace_back(sizes[i], 0xEE);
  }

  completions sends, receives;
  const auto start = std::chrono::steady_clock::now();
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    // Distinct tags per direction and size; receives posted before and after sends alike.
    const std::uint64_t tag_ab = 0x1000 + i, tag_ba = 0x2000 + i;
    b.receive(tag_ab, b_in[i].data(), b_in[i].size(),
              [&](std::string e, std::size_t n) { receives.add(std::move(e), n); });
    a.send(a_to_b, tag_ab, a_out[i].data(), a_out[i].size(),
           [&](std::string e) { sends.add(std::move(e)); });
    b.send(b_to_a, tag_ba, b_out[i].data(), b_out[i].size(),
           [&](std::string e) { sends.add(std::move(e)); });
    a.receive(tag_ba, a_in[i].data(), a_in[i].size(),
              [&](std::string e, std::size_t n) { receives.add(std::move(e), n); });
  }
  const std::size_t expected = 2 * sizes.size();
  CATCH_REQUIRE(sends.wait_for_count(expected, 10s));
  CATCH_REQUIRE(receives.wait_for_count(expected, 10s));
  const auto elapsed = std::chrono::duration_cast<std::chrono::milliseconds>(
      std::chrono::steady_clock::now() - start);
  CATCH_INFO("all transfers took " << elapsed.count() << " ms");

  for (const auto& e : sends.errors()) CATCH_CHECK(e.empty());
  for (const auto& e : receives.errors()) CATCH_CHECK(e.empty());
  std::size_t total = 0;
  for (std::size_t n : receives.received()) total += n;
  CATCH_CHECK(total == 2 * (0 + 1 + 4096 + (std::size_t{1} << 20) + (std::size_t{16} << 20)));
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    CATCH_CHECK(same_bytes(a_out[i], b_in[i]));
    CATCH_CHECK(same_bytes(b_out[i], a_in[i]));
  }
  CATCH_CHECK(a.pending_operations() == 0);
  CATCH_CHECK(b.pending_operations() == 0);
}

CATCH_TEST_CASE("ucx_worker reports a message larger than the receive buffer and keeps working",
                "[transport][ucx]") {
  ucx_worker a;
  ucx_worker b;
  const int a_to_b = a.connect(b.address());

  // Small (eager) and large (rendezvous) oversize messages take different UCX paths.
  for (std::size_t size : {std::size_t{64}, std::size_t{4} << 20}) {
    CATCH_INFO("message of " << size << " bytes into a 16-byte buffer");
    const auto out = pattern(size, 7);
    std::vector<std::uint8_t> small(16);
    completions got, sent;
    b.receive(0x77, small.data(), small.size(),
              [&](std::string e, std::size_t n) { got.add(std::move(e), n); });
    a.send(a_to_b, 0x77, out.data(), out.size(), [&](std::string e) { sent.add(std::move(e)); });
    CATCH_REQUIRE(got.wait_for_count(1, 10s));
    CATCH_CHECK_THAT(got.errors()[0], Catch::Contains("truncated"));
    // The sender's request must finish too (success or error), never leak.
    CATCH_REQUIRE(sent.wait_for_count(1, 10s));

    // Afterwards the same pair still moves a correctly sized message.
    const auto next = pattern(4096, 9);
    std::vector<std::uint8_t> in(4096);
    completions ok;
    b.receive(0x78, in.data(), in.size(),
              [&](std::string e, std::size_t n) { ok.add(std::move(e), n); });
    a.send(a_to_b, 0x78, next.data(), next.size(), [&](std::string e) { ok.add(std::move(e)); });
    CATCH_REQUIRE(ok.wait_for_count(2, 10s));
    for (const auto& e : ok.errors()) CATCH_CHECK(e.empty());
    CATCH_CHECK(same_bytes(next, in));
  }
  CATCH_CHECK(a.pending_operations() == 0);
  CATCH_CHECK(b.pending_operations() == 0);
}

CATCH_TEST_CASE("ucx_worker cancels pending receives when destroyed", "[transport][ucx]") {
  completions got;
  std::vector<std::uint8_t> buffer(64);
  {
    ucx_worker a;
    a.receive(0x99, buffer.data(), buffer.size(),
              [&](std::string e, std::size_t n) { got.add(std::move(e), n); });
    CATCH_CHECK_THROWS_WITH(a.connect({}), Catch::Contains("empty peer address"));
  }
  CATCH_REQUIRE(got.wait_for_count(1, 1s));
  CATCH_CHECK_FALSE(got.errors()[0].empty());
}

// A damaged or foreign address reached ucp_ep_create, which asserted and aborted the process
// ("addr version 10": a member's join with its address's first bytes changed).
CATCH_TEST_CASE("ucx_worker refuses an address its UCX cannot read, naming why, instead of aborting",
                "[transport][ucx]") {
  ucx_worker a, b;
  std::vector<std::uint8_t> address = b.address();
  CATCH_CHECK(a.address_problem(address).empty());
  CATCH_CHECK(a.address_problem({0x20, 1}) == "a worker address of 2 bytes (UCX's have at least 9)");
  address[0] = static_cast<std::uint8_t>(address[0] ^ 0x0a);
  CATCH_CHECK_THAT(a.address_problem(address), Catch::StartsWith("a worker address of format version ") &&
                                                   Catch::Contains("do all nodes run the same UCX build?"));
  CATCH_CHECK_THROWS_AS(a.connect(address), std::invalid_argument);
  CATCH_CHECK_THROWS_WITH(a.connect(address), Catch::Contains("ucx_worker::connect: a worker address of format version"));
}

CATCH_TEST_CASE("ucx_worker fails a send nobody receives when destroyed", "[transport][ucx]") {
  ucx_worker b;
  completions sent;
  const auto big = pattern(std::size_t{1} << 20, 3);  // rendezvous: waits for a receive
  const auto start = std::chrono::steady_clock::now();
  {
    ucx_worker a;
    const int a_to_b = a.connect(b.address());
    a.send(a_to_b, 0x55, big.data(), big.size(), [&](std::string e) { sent.add(std::move(e)); });
    std::this_thread::sleep_for(50ms);
    CATCH_CHECK(a.pending_operations() == 1);
  }
  CATCH_REQUIRE(sent.wait_for_count(1, 1s));
  CATCH_CHECK_FALSE(sent.errors()[0].empty());
  CATCH_INFO("send error: " << sent.errors()[0]);
  CATCH_CHECK(std::chrono::steady_clock::now() - start < 5s);
}

CATCH_TEST_CASE("ucx_worker exchanges 4 MiB with a forked process", "[transport][ucx]") {
  constexpr std::size_t size = std::size_t{4} << 20;
  int to_child[2], to_parent[2];
  CATCH_REQUIRE(::pipe(to_child) == 0);
  CATCH_REQUIRE(::pipe(to_parent) == 0);

  const pid_t pid = ::fork();
  if (pid == 0) {
    // Child: no Catch macros here; report through the exit code and never return.
    ::close(to_child[1]);
    ::close(to_parent[0]);
    int code = 0;
    try {
      ucx_worker w;
      const int parent = exchange_and_connect(w, to_parent[1], to_child[0]);
      if (parent < 0) ::_exit(11);
      const auto out = pattern(size, 42);
      std::vector<std::uint8_t> in(size);
      completions done;
      w.receive(1, in.data(), in.size(), [&](std::string e, std::size_t n) { done.add(e, n); });
      w.send(parent, 2, out.data(), out.size(), [&](std::string e) { done.add(e); });
      if (!done.wait_for_count(2, 10s)) code = 12;
      for (const auto& e : done.errors()) if (!e.empty()) code = 13;
      if (code == 0 && !same_bytes(in, pattern(size, 24))) code = 14;
      // Stay up until the parent has its bytes, then tear down.
      char bye = 0;
      if (!read_exact(to_child[0], &bye, 1, 10000)) code = code ? code : 15;
    } catch (...) {
      code = 16;
    }
    ::_exit(code);
  }

  CATCH_REQUIRE(pid > 0);
  ::close(to_child[0]);
  ::close(to_parent[1]);
  {
    ucx_worker w;
    const int child = exchange_and_connect(w, to_child[1], to_parent[0]);
    CATCH_REQUIRE(child >= 0);
    const auto out = pattern(size, 24);
    std::vector<std::uint8_t> in(size);
    completions done;
    w.receive(2, in.data(), in.size(),
              [&](std::string e, std::size_t n) { done.add(std::move(e), n); });
    w.send(child, 1, out.data(), out.size(), [&](std::string e) { done.add(std::move(e)); });
    const bool finished = done.wait_for_count(2, 10s);
    const char bye = 1;
    write_exact(to_child[1], &bye, 1);
    CATCH_CHECK(finished);
    for (const auto& e : done.errors()) CATCH_CHECK(e.empty());
    CATCH_CHECK(same_bytes(in, pattern(size, 42)));
    CATCH_CHECK(wait_child(pid, 15s) == 0);
  }
  ::close(to_child[1]);
  ::close(to_parent[0]);
}

CATCH_TEST_CASE("ucx_worker reports a peer that died", "[transport][ucx]") {
  scoped_env tls("UCX_TLS", "tcp,self");
  wired_child peer(false);
  CATCH_REQUIRE(peer.pid() > 0);
  {
    ucx_worker w;
    std::mutex mutex;
    std::condition_variable changed;
    std::optional<std::pair<int, std::string>> failure;
    w.on_peer_failure([&](int peer, std::string reason) {
      std::lock_guard<std::mutex> lock(mutex);
      failure.emplace(peer, std::move(reason));
      changed.notify_all();
    });
    const int child = peer.wire(w);
    CATCH_REQUIRE(child >= 0);

    const auto killed_at = std::chrono::steady_clock::now();
    peer.kill_and_reap();

    auto wait_failure = [&](std::chrono::milliseconds timeout) {
      std::unique_lock<std::mutex> lock(mutex);
      return changed.wait_for(lock, timeout, [&] { return failure.has_value(); });
    };
    // First passively (tcp sees the reset socket); then provoke it with a send, as real
    // traffic would.
    bool reported = wait_failure(5s);
    bool needed_probe = false;
    completions probe;
    std::uint8_t byte = 1;
    if (!reported) {
      needed_probe = true;
      w.send(child, 5, &byte, 1, [&](std::string e) { probe.add(std::move(e)); });
      reported = wait_failure(5s);
    }
    const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(
        std::chrono::steady_clock::now() - killed_at).count();
    if (reported) {
      std::lock_guard<std::mutex> lock(mutex);
      CATCH_CHECK(failure->first == child);
      CATCH_CHECK_FALSE(failure->second.empty());
      CATCH_WARN("peer failure reported after " << ms << " ms (" << failure->second << ")"
                 << (needed_probe ? " after a probe send" : " without traffic"));
    } else {
      CATCH_WARN("UCX did not report the dead peer over tcp within 10 s (passive 5 s + probe "
                 "send 5 s); on_peer_failure depends on UCX's keepalive for idle endpoints");
    }
    // After a failure, sends to that peer fail fast instead of hanging.
    if (reported) {
      completions after;
      w.send(child, 6, &byte, 1, [&](std::string e) { after.add(std::move(e)); });
      CATCH_REQUIRE(after.wait_for_count(1, 5s));
      CATCH_CHECK_FALSE(after.errors()[0].empty());
    }
  }
}

// A peer that stops answering (SIGSTOP: a frozen process, a cut network): the worker still goes
// within its shutdown grace, its endpoint idle (closed with a flush that is never acknowledged)
// or with a rendezvous send to it in flight (failed). UCX once aborted the process here: an
// assertion in ucp_ep_destroy_base on the flush's request, still held when the worker
// destroyed the endpoint.
CATCH_TEST_CASE("ucx_worker is destroyed cleanly while its peer is stopped", "[transport][ucx]") {
  scoped_env tls("UCX_TLS", "tcp,self");
  for (const bool send_in_flight : {false, true}) {
    CATCH_INFO((send_in_flight ? "a rendezvous send in flight" : "an idle endpoint"));
    wired_child peer(true);
    CATCH_REQUIRE(peer.pid() > 0);
    completions sent;
    const auto big = pattern(std::size_t{1} << 20, 9);  // rendezvous: needs the peer to answer
    std::chrono::steady_clock::time_point start;
    {
      ucx_worker w;
      const int child = peer.wire(w);
      CATCH_REQUIRE(child >= 0);
      int status = 0;
      CATCH_REQUIRE(::waitpid(peer.pid(), &status, WUNTRACED) == peer.pid());
      CATCH_REQUIRE(WIFSTOPPED(status));
      if (send_in_flight) {
        w.send(child, 9, big.data(), big.size(), [&](std::string e) { sent.add(std::move(e)); });
        std::this_thread::sleep_for(100ms);
      }
      start = std::chrono::steady_clock::now();
    }
    CATCH_CHECK(std::chrono::steady_clock::now() - start < 10s);
    if (send_in_flight) {
      CATCH_REQUIRE(sent.wait_for_count(1, 1s));
      CATCH_CHECK_FALSE(sent.errors()[0].empty());
    }
  }
}

CATCH_TEST_CASE("ucx_worker masked receive matches any source and reports the sender's tag",
                "[transport][ucx]") {
  ucx_worker a;
  ucx_worker b;
  const int a_to_b = a.connect(b.address());
  const std::uint64_t type_bits = std::uint64_t{0xff} << 56;
  const std::uint64_t header = std::uint64_t{1} << 56, other = std::uint64_t{2} << 56;
  const auto small = pattern(100, 1), other_bytes = pattern(8, 2);

  std::mutex mutex;
  std::condition_variable changed;
  std::vector<std::pair<std::uint64_t, std::size_t>> got;
  std::vector<std::string> errors;
  std::vector<std::uint8_t> in(256), in_other(8);
  auto post = [&] {
    b.receive(header, type_bits, in.data(), in.size(),
              [&](std::string e, std::size_t n, std::uint64_t sender_tag) {
                std::lock_guard<std::mutex> lock(mutex);
                errors.push_back(std::move(e));
                got.emplace_back(sender_tag, n);
                changed.notify_all();
              });
  };
  completions sent, exact;
  // A message of another type must not match the masked receive.
  a.send(a_to_b, other | 7, other_bytes.data(), other_bytes.size(), [&](std::string e) { sent.add(e); });
  post();
  a.send(a_to_b, header | (std::uint64_t{3} << 40) | 42, small.data(), small.size(),
         [&](std::string e) { sent.add(e); });
  {
    std::unique_lock<std::mutex> lock(mutex);
    CATCH_REQUIRE(changed.wait_for(lock, 10s, [&] { return got.size() == 1; }));
  }
  CATCH_CHECK(errors[0].empty());
  CATCH_CHECK(got[0].first == (header | (std::uint64_t{3} << 40) | 42));
  CATCH_CHECK(got[0].second == small.size());
  CATCH_CHECK(std::memcmp(in.data(), small.data(), small.size()) == 0);

  // Truncation still names the sender, so a receiver can tell whom to blame.
  const auto big = pattern(1000, 3);
  post();
  a.send(a_to_b, header | 9, big.data(), big.size(), [&](std::string e) { sent.add(e); });
  {
    std::unique_lock<std::mutex> lock(mutex);
    CATCH_REQUIRE(changed.wait_for(lock, 10s, [&] { return got.size() == 2; }));
  }
  CATCH_CHECK_THAT(errors[1], Catch::Contains("truncated"));
  CATCH_CHECK(got[1].first == (header | 9));

  b.receive(other | 7, in_other.data(), in_other.size(),
            [&](std::string e, std::size_t n) { exact.add(std::move(e), n); });
  CATCH_REQUIRE(exact.wait_for_count(1, 10s));
  CATCH_CHECK(exact.errors()[0].empty());
  CATCH_CHECK(same_bytes(in_other, other_bytes));
  CATCH_REQUIRE(sent.wait_for_count(3, 10s));
}

CATCH_TEST_CASE("ucx_worker runs work on its progress thread in call order", "[transport][ucx]") {
  ucx_worker w;
  std::mutex mutex;
  std::condition_variable changed;
  std::vector<int> order;
  std::thread::id ran_on;
  for (int i = 0; i < 100; ++i) {
    w.execute([&, i] {
      std::lock_guard<std::mutex> lock(mutex);
      order.push_back(i);
      ran_on = std::this_thread::get_id();
      // Inline from the progress thread: runs before this task returns.
      if (i == 99) w.execute([&] { order.push_back(100); });
      changed.notify_all();
    });
  }
  std::unique_lock<std::mutex> lock(mutex);
  CATCH_REQUIRE(changed.wait_for(lock, 5s, [&] { return order.size() == 101; }));
  for (int i = 0; i <= 100; ++i) CATCH_CHECK(order[static_cast<std::size_t>(i)] == i);
  CATCH_CHECK(ran_on != std::this_thread::get_id());
}

CATCH_TEST_CASE("ucx_worker disconnect fails later sends to that peer and keeps the others",
                "[transport][ucx]") {
  ucx_worker a;
  ucx_worker b;
  ucx_worker c;
  const int a_to_b = a.connect(b.address());
  const int a_to_c = a.connect(c.address());
  CATCH_CHECK(a.detects_peer_failure(a_to_b));
  CATCH_CHECK_FALSE(a.detects_peer_failure(12345));
  bool failure_reported = false;
  a.on_peer_failure([&](int, std::string) { failure_reported = true; });
  a.disconnect(a_to_b);
  const auto bytes = pattern(64, 4);
  completions after;
  a.send(a_to_b, 1, bytes.data(), bytes.size(), [&](std::string e) { after.add(std::move(e)); });
  CATCH_REQUIRE(after.wait_for_count(1, 5s));
  CATCH_CHECK_THAT(after.errors()[0], Catch::Contains("disconnected"));

  std::vector<std::uint8_t> in(64);
  completions ok;
  c.receive(2, in.data(), in.size(), [&](std::string e, std::size_t n) { ok.add(std::move(e), n); });
  a.send(a_to_c, 2, bytes.data(), bytes.size(), [&](std::string e) { ok.add(std::move(e)); });
  CATCH_REQUIRE(ok.wait_for_count(2, 10s));
  for (const auto& e : ok.errors()) CATCH_CHECK(e.empty());
  CATCH_CHECK(same_bytes(in, bytes));
  std::this_thread::sleep_for(100ms);
  CATCH_CHECK_FALSE(failure_reported);
}

CATCH_TEST_CASE("ucx_worker connects over shared memory only, without peer-failure detection",
                "[transport][ucx]") {
  // UCX 1.13's shm transports refuse UCP_ERR_HANDLING_MODE_PEER; connect falls back.
  scoped_env tls("UCX_TLS", "posix,sysv,cma,self");
  ucx_worker a;
  ucx_worker b;
  const int a_to_b = a.connect(b.address());
  CATCH_CHECK_FALSE(a.detects_peer_failure(a_to_b));
  const auto out = pattern(std::size_t{4} << 20, 8);
  std::vector<std::uint8_t> in(out.size());
  completions done;
  b.receive(5, in.data(), in.size(), [&](std::string e, std::size_t n) { done.add(std::move(e), n); });
  a.send(a_to_b, 5, out.data(), out.size(), [&](std::string e) { done.add(std::move(e)); });
  CATCH_REQUIRE(done.wait_for_count(2, 10s));
  for (const auto& e : done.errors()) CATCH_CHECK(e.empty());
  CATCH_CHECK(same_bytes(in, out));
}

// With every port of UCX_TCP_PORT_RANGE taken (jobs sharing a firewall's range), creating the
// worker tried them for ever: the job hung without a word, past --join-timeout.
CATCH_TEST_CASE("ucx_worker refuses a TCP port range whose every port is in use, naming it", "[transport][ucx]") {
  const auto listen_on = [](int port) {
    const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_ANY);
    a.sin_port = htons(static_cast<std::uint16_t>(port));
    if (::bind(fd, reinterpret_cast<const sockaddr*>(&a), sizeof a) != 0 || ::listen(fd, 1) != 0) {
      ::close(fd);
      return -1;
    }
    return fd;
  };
  int first = -1, fds[2] = {-1, -1};
  for (int p = 31950; p < 32700 && first < 0; p += 2) {
    fds[0] = listen_on(p);
    fds[1] = fds[0] >= 0 ? listen_on(p + 1) : -1;
    if (fds[1] >= 0) first = p;
    else if (fds[0] >= 0) ::close(fds[0]);
  }
  CATCH_REQUIRE(first > 0);
  const std::string range = std::to_string(first) + "-" + std::to_string(first + 1);
  // As a user sets it: in the environment (kept as it was around the test).
  const char* tls_before = std::getenv("UCX_TLS");
  const std::string tls_kept = tls_before ? tls_before : "";
  ::setenv("UCX_TLS", "tcp,self", 1);
  ::setenv("UCX_TCP_PORT_RANGE", range.c_str(), 1);
  CATCH_CHECK_THROWS_WITH(ucx_worker(),
                          Catch::Contains("UCX_TCP_PORT_RANGE=" + range + ": every port in it is in use on this machine"));
  ::close(fds[1]);  // one port free again: the worker is made
  CATCH_CHECK_NOTHROW(ucx_worker());
  ::close(fds[0]);
  ::unsetenv("UCX_TCP_PORT_RANGE");
  if (tls_before) ::setenv("UCX_TLS", tls_kept.c_str(), 1);
  else ::unsetenv("UCX_TLS");
}
