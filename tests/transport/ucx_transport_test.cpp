// Tests for transport/ucx/ucx_transport: tensors and their meta between two transports in one
// process and across fork(), self-sends, ordering under many sends in flight, malformed headers
// from a raw ucx_worker, and a SIGKILLed peer. Every wait is bounded.
// Torch comes first (its glog CHECK must not meet Catch's macros); only the non-contiguous
// test uses it, and no forked child runs a torch kernel (its thread pool does not survive fork).
#include "core/model/tensor_box_torch.hpp"

#include <catch2/catch.hpp>

#include "tests/transport/fork_helpers.hpp"

#include <poll.h>
#include <signal.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "transport/ucx/ucx_transport.hpp"
#include "transport/ucx/ucx_worker.hpp"

using namespace actorpipe;
using actorpipe::transport::ucx_receive_pool_options;
using actorpipe::transport::ucx_receive_pool_stats;
using actorpipe::transport::ucx_transport;
using actorpipe::transport::ucx::ucx_worker;
using namespace std::chrono_literals;
using namespace actorpipe::testing;

namespace {

constexpr std::uint64_t header_tag_of(int source, std::uint64_t sequence) {
  return (std::uint64_t{1} << 56) | (static_cast<std::uint64_t>(source) << 40) | sequence;
}
constexpr std::uint64_t payload_tag_of(int source, std::uint64_t sequence) {
  return (std::uint64_t{2} << 56) | (static_cast<std::uint64_t>(source) << 40) | sequence;
}

frame_limits test_limits() {
  frame_limits l;
  l.ranks = 4;
  l.virtual_stages = 8;
  l.microbatches = 64;
  l.max_dims = 4;
  l.max_bytes = std::uint64_t{64} << 20;
  return l;
}

// Deterministic bytes, different per seed, written through tensor_box only (no torch kernel).
tensor_box patterned(tensor_dtype dtype, std::vector<std::int64_t> shape, std::uint32_t seed) {
  tensor_box t = tensor_box::empty(dtype, shape);
  auto* bytes = static_cast<std::uint8_t*>(t.data());
  std::uint32_t x = seed * 2654435761u + 1;
  for (std::size_t i = 0; i < t.nbytes(); ++i) {
    x = x * 1664525u + 1013904223u;
    bytes[i] = static_cast<std::uint8_t>(x >> 24);
  }
  return t;
}

bool same_bytes(const tensor_box& a, const tensor_box& b) {
  return a.nbytes() == b.nbytes() && a.shape() == b.shape() && a.dtype() == b.dtype() &&
         (a.nbytes() == 0 || std::memcmp(a.data(), b.data(), a.nbytes()) == 0);
}

tensor_meta meta_for(int step, int microbatch, int virtual_stage, int source_rank,
                     tensor_kind kind = tensor_kind::activation) {
  tensor_meta m;
  m.kind = kind;
  m.step = step;
  m.microbatch = microbatch;
  m.virtual_stage = virtual_stage;
  m.source_rank = source_rank;
  return m;
}

// What a transport handed over, collected from its progress thread.
class inbox {
public:
  void install(ucx_transport& t) {
    t.set_handlers([this](const tensor_meta& m, tensor_box b) { add(m, std::move(b)); },
                   [this](int process, const std::string& reason) { fail(process, reason); });
  }
  void add(const tensor_meta& m, tensor_box b) {
    std::lock_guard<std::mutex> lock(mutex_);
    received_.push_back({m, std::move(b)});
    threads_.push_back(std::this_thread::get_id());
    changed_.notify_all();
  }
  void fail(int process, const std::string& reason) {
    std::lock_guard<std::mutex> lock(mutex_);
    failures_.emplace_back(process, reason);
    changed_.notify_all();
  }
  bool wait_received(std::size_t n, std::chrono::milliseconds timeout) {
    std::unique_lock<std::mutex> lock(mutex_);
    return changed_.wait_for(lock, timeout, [&] { return received_.size() >= n; });
  }
  bool wait_failures(std::size_t n, std::chrono::milliseconds timeout) {
    std::unique_lock<std::mutex> lock(mutex_);
    return changed_.wait_for(lock, timeout, [&] { return failures_.size() >= n; });
  }
  std::vector<std::pair<tensor_meta, tensor_box>> received() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return received_;
  }
  std::vector<std::thread::id> threads() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return threads_;
  }
  std::vector<std::pair<int, std::string>> failures() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return failures_;
  }
  // Drops every tensor received so far (and their count).
  void clear() {
    std::vector<std::pair<tensor_meta, tensor_box>> dropped;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      dropped.swap(received_);
      threads_.clear();
    }
  }

private:
  mutable std::mutex mutex_;
  std::condition_variable changed_;
  std::vector<std::pair<tensor_meta, tensor_box>> received_;
  std::vector<std::thread::id> threads_;
  std::vector<std::pair<int, std::string>> failures_;
};

struct case_spec {
  tensor_dtype dtype;
  std::vector<std::int64_t> shape;
};

// 2 B to 16 MiB: eager and rendezvous paths, 1-4 dims, every dtype the tests name.
std::vector<case_spec> tensor_cases() {
  return {
      {tensor_dtype::bf16, {1}},                   // 2 B
      {tensor_dtype::f32, {1}},                    // 4 B
      {tensor_dtype::i64, {3, 5}},                 // 120 B
      {tensor_dtype::f32, {7, 3, 2, 5}},           // 840 B
      {tensor_dtype::f64, {9, 11}},                // 792 B, a double model's
      {tensor_dtype::bf16, {33, 65}},              // ~4 KiB, odd sizes
      {tensor_dtype::f32, {256, 257}},             // ~257 KiB
      {tensor_dtype::i64, {128, 1024}},            // 1 MiB
      {tensor_dtype::bf16, {4096, 2048}},          // 16 MiB
      {tensor_dtype::f32, {4, 1024, 1024}},        // 16 MiB
      {tensor_dtype::i64, {2, 1024, 1024}},        // 16 MiB
      {tensor_dtype::f32, {}},                     // 4 B, a scalar (a layer's 0-d output at a cut)
      {tensor_dtype::f32, {2, 0}},                 // 0 B: no payload follows the frame
      {tensor_dtype::f64, {0}},                    // 0 B, a parameter of no elements
  };
}


// Waits (bounded) until the transport's receive pool counters satisfy `ok`; returns the last.
ucx_receive_pool_stats wait_pool(const ucx_transport& t, const std::function<bool(const ucx_receive_pool_stats&)>& ok,
                                 std::chrono::milliseconds timeout = 5s) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  ucx_receive_pool_stats s = t.receive_pool_stats();
  while (!ok(s) && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(1ms);
    s = t.receive_pool_stats();
  }
  return s;
}

// Two connected transports, process 0 and 1 of 2, with their inboxes.
struct connected_pair {
  inbox at_a, at_b;  // outlive the transports whose handlers point at them
  ucx_transport a, b;
  explicit connected_pair(ucx_receive_pool_options pool = {})
      : a(0, 2, test_limits(), pool), b(1, 2, test_limits(), pool) {
    at_a.install(a);
    at_b.install(b);
    const std::vector<std::vector<std::uint8_t>> addresses = {a.address(), b.address()};
    a.connect(addresses);
    b.connect(addresses);
  }
};

constexpr std::size_t mib = std::size_t{1} << 20;


// Receives into `in` and sends every tensor straight back to process 0 from the receive
// handler, keeping the error if such a send throws. Declare it before the transport it is
// installed on: the transport's progress thread uses it until the transport is gone.
struct echo_to_process_0 {
  inbox in;
  std::mutex mutex;
  std::string send_error;

  void install(ucx_transport& t) {
    t.set_handlers(
        [this, &t](const tensor_meta& m, tensor_box b) {
          in.add(m, b);
          try {
            t.send(0, m, std::move(b));
          } catch (const std::exception& e) {
            std::lock_guard<std::mutex> lock(mutex);
            send_error = e.what();
          }
        },
        [this](int process, const std::string& reason) { in.fail(process, reason); });
  }

  std::string error() {
    std::lock_guard<std::mutex> lock(mutex);
    return send_error;
  }
};

// A forked process 1 of 2 that echoes every tensor it receives back to process 0, with the
// same meta, until it has echoed `count`; then waits for a byte and exits. Never returns.
[[noreturn]] void run_echo_child(int from_parent, int to_parent, std::size_t count) {
  int code = 0;
  try {
    echo_to_process_0 echo;
    inbox& in = echo.in;
    ucx_transport t(1, 2, test_limits());
    echo.install(t);
    if (!write_blob(to_parent, t.address())) ::_exit(10);
    auto parent = read_blob(from_parent, 10000);
    if (!parent) ::_exit(11);
    // The parent's first tensors may arrive before or while connect() runs: the handler's
    // echoes are then sends made before process 0 is mapped (held, then sent in order).
    t.connect({*parent, {}});
    if (!in.wait_received(count, 30s)) {
      code = 12;
      std::fprintf(stderr, "echo child: %zu of %zu tensors arrived within 30 s\n", in.received().size(), count);
    }
    for (auto& [process, reason] : in.failures()) {  // printed: the parent's checks cannot see them
      code = 13;
      std::fprintf(stderr, "echo child: failure reported for process %d: %s\n", process, reason.c_str());
    }
    if (!echo.error().empty()) code = 14;
    char bye = 0;
    if (!read_exact(from_parent, &bye, 1, 30000) && code == 0) code = 15;
  } catch (...) {
    code = 16;
  }
  ::_exit(code);
}

}  // namespace

CATCH_TEST_CASE("ucx_transport moves f32 i64 and bf16 tensors of 0 B to 16 MiB and scalars bit-identical with their meta",
                "[transport][ucx_transport]") {
  inbox at_a, at_b;  // outlives the transports whose handlers point at it
  ucx_transport a(0, 2, test_limits());
  ucx_transport b(1, 2, test_limits());
  CATCH_CHECK(a.name() == "ucx");
  at_a.install(a);
  at_b.install(b);
  const std::vector<std::vector<std::uint8_t>> addresses = {a.address(), b.address()};
  a.connect(addresses);
  b.connect(addresses);

  const auto cases = tensor_cases();
  std::vector<tensor_box> from_a, from_b;
  for (std::size_t i = 0; i < cases.size(); ++i) {
    from_a.push_back(patterned(cases[i].dtype, cases[i].shape, static_cast<std::uint32_t>(i)));
    from_b.push_back(patterned(cases[i].dtype, cases[i].shape, static_cast<std::uint32_t>(100 + i)));
    const int mb = static_cast<int>(i);
    a.send(1, meta_for(7, mb, 3, 0, tensor_kind::activation), from_a.back());
    b.send(0, meta_for(9, mb, 2, 1, tensor_kind::gradient), from_b.back());
  }
  CATCH_REQUIRE(at_b.wait_received(cases.size(), 20s));
  CATCH_REQUIRE(at_a.wait_received(cases.size(), 20s));
  CATCH_CHECK(at_a.failures().empty());
  CATCH_CHECK(at_b.failures().empty());

  const auto got_b = at_b.received();
  const auto got_a = at_a.received();
  CATCH_REQUIRE(got_b.size() == cases.size());
  CATCH_REQUIRE(got_a.size() == cases.size());
  for (std::size_t i = 0; i < cases.size(); ++i) {
    CATCH_INFO("case " << i << ": " << cases[i].shape.size() << "-dim, " << from_a[i].nbytes() << " bytes");
    // One sender, so arrival order is send order.
    const tensor_meta& mb = got_b[i].first;
    CATCH_CHECK(mb.kind == tensor_kind::activation);
    CATCH_CHECK(mb.step == 7);
    CATCH_CHECK(mb.microbatch == static_cast<int>(i));
    CATCH_CHECK(mb.virtual_stage == 3);
    CATCH_CHECK(mb.source_rank == 0);
    CATCH_CHECK(mb.dtype == cases[i].dtype);
    CATCH_CHECK(mb.shape == cases[i].shape);
    CATCH_CHECK(mb.nbytes == from_a[i].nbytes());
    CATCH_CHECK(mb.tag == payload_tag_of(0, i));
    CATCH_CHECK(same_bytes(got_b[i].second, from_a[i]));
    if (from_a[i].nbytes() > 0) CATCH_CHECK(got_b[i].second.data() != from_a[i].data());

    const tensor_meta& ma = got_a[i].first;
    CATCH_CHECK(ma.kind == tensor_kind::gradient);
    CATCH_CHECK(ma.step == 9);
    CATCH_CHECK(ma.microbatch == static_cast<int>(i));
    CATCH_CHECK(ma.virtual_stage == 2);
    CATCH_CHECK(ma.source_rank == 1);
    CATCH_CHECK(ma.shape == cases[i].shape);
    CATCH_CHECK(same_bytes(got_a[i].second, from_b[i]));
  }
}

CATCH_TEST_CASE("ucx_transport sends a non-contiguous tensor as its contiguous values",
                "[transport][ucx_transport]") {
  inbox at_a, at_b;
  ucx_transport a(0, 2, test_limits());
  ucx_transport b(1, 2, test_limits());
  at_a.install(a);
  at_b.install(b);
  const std::vector<std::vector<std::uint8_t>> addresses = {a.address(), b.address()};
  a.connect(addresses);
  b.connect(addresses);

  const at::Tensor base = torch::arange(12 * 34, torch::kFloat32).reshape({12, 34});
  const at::Tensor transposed = base.t();
  CATCH_REQUIRE_FALSE(transposed.is_contiguous());
  a.send(1, meta_for(0, 0, 0, 0), box(transposed));
  CATCH_REQUIRE(at_b.wait_received(1, 10s));
  const auto got = at_b.received();
  CATCH_CHECK(got[0].first.shape == std::vector<std::int64_t>{34, 12});
  CATCH_CHECK(torch::equal(unbox(got[0].second), transposed));
}

CATCH_TEST_CASE("ucx_transport hands a self-send over at once with zero copies", "[transport][ucx_transport]") {
  inbox in;
  ucx_transport a(1, 3, test_limits());
  in.install(a);
  // No connect needed for a self-send.
  const tensor_box t = patterned(tensor_dtype::f32, {4, 4}, 5);
  a.send(1, meta_for(3, 2, 1, 1, tensor_kind::targets), t);
  const auto got = in.received();  // no wait: it ran inside send
  CATCH_REQUIRE(got.size() == 1);
  CATCH_CHECK(got[0].second.data() == t.data());
  CATCH_CHECK(got[0].first.kind == tensor_kind::targets);
  CATCH_CHECK(got[0].first.step == 3);
  CATCH_CHECK(got[0].first.microbatch == 2);
  CATCH_CHECK(got[0].first.shape == std::vector<std::int64_t>{4, 4});
  CATCH_CHECK(got[0].first.nbytes == 64);
  CATCH_CHECK(in.threads()[0] == std::this_thread::get_id());
}

CATCH_TEST_CASE("ucx_transport rejects what it cannot send before anything moves", "[transport][ucx_transport]") {
  inbox in;
  ucx_transport a(0, 2, test_limits());
  in.install(a);
  const tensor_box t = patterned(tensor_dtype::f32, {2, 2}, 1);
  CATCH_CHECK_THROWS_AS(a.send(2, meta_for(0, 0, 0, 0), t), std::invalid_argument);
  CATCH_CHECK_THROWS_AS(a.send(-1, meta_for(0, 0, 0, 0), t), std::invalid_argument);
  CATCH_CHECK_THROWS_AS(a.send(1, meta_for(0, 0, 0, 0), tensor_box()), std::invalid_argument);
  // The receiver would reject these frames and close the connection: the sender refuses them.
  CATCH_CHECK_THROWS_WITH(a.send(1, meta_for(0, 64, 0, 0), t), Catch::Contains("microbatch=64 outside [0, 64)"));
  CATCH_CHECK_THROWS_WITH(a.send(0, meta_for(0, 0, 8, 0), t), Catch::Contains("virtual_stage=8"));
  CATCH_CHECK_THROWS_WITH(a.send(1, meta_for(0, 0, 0, 0), box(torch::zeros({1, 1, 1, 1, 1}))),
                          Catch::Contains("ndims=5"));
  CATCH_CHECK_THROWS_AS(a.send(1, meta_for(0, 0, 0, 0), box(torch::zeros({2}, torch::kInt16))),  // no wire dtype
                        std::invalid_argument);
  CATCH_CHECK_THROWS_AS(a.send(1, meta_for(0, 0, 0, 0), t), std::logic_error);  // before connect
  CATCH_CHECK_THROWS_AS(a.connect({a.address()}), std::invalid_argument);
  CATCH_CHECK_THROWS_AS(ucx_transport(2, 2, test_limits()), std::invalid_argument);
  CATCH_CHECK_THROWS_AS(ucx_transport(0, 70000, test_limits()), std::invalid_argument);
  CATCH_CHECK(in.received().empty());
  CATCH_CHECK(in.failures().empty());
}

CATCH_TEST_CASE("ucx_transport delivers many sends in flight in send order per sender",
                "[transport][ucx_transport]") {
  inbox at_a, at_b, at_c;
  ucx_transport a(0, 3, test_limits());
  ucx_transport b(1, 3, test_limits());
  ucx_transport c(2, 3, test_limits());
  at_a.install(a);
  at_b.install(b);
  at_c.install(c);
  const std::vector<std::vector<std::uint8_t>> addresses = {a.address(), b.address(), c.address()};
  a.connect(addresses);
  b.connect(addresses);
  c.connect(addresses);

  // Small tensors right behind large ones: the small payloads land first, but must wait.
  constexpr int count = 300;
  std::vector<tensor_box> sent_a, sent_c;
  for (int i = 0; i < count; ++i) {
    const std::vector<std::int64_t> shape = i % 3 == 0 ? std::vector<std::int64_t>{256, 1024}  // 1 MiB
                                                       : std::vector<std::int64_t>{i % 7 + 1};
    sent_a.push_back(patterned(tensor_dtype::f32, shape, static_cast<std::uint32_t>(i)));
    sent_c.push_back(patterned(tensor_dtype::f32, shape, static_cast<std::uint32_t>(5000 + i)));
  }
  std::thread from_c([&] {
    for (int i = 0; i < count; ++i) c.send(1, meta_for(i, i % 64, 0, 2), sent_c[i]);
  });
  for (int i = 0; i < count; ++i) {
    a.send(1, meta_for(i, i % 64, 0, 0), sent_a[i]);
    b.send(0, meta_for(i, i % 64, 0, 1), sent_a[i]);  // the other direction at the same time
  }
  from_c.join();
  CATCH_REQUIRE(at_b.wait_received(2 * count, 60s));
  CATCH_REQUIRE(at_a.wait_received(count, 60s));
  CATCH_CHECK(at_a.failures().empty());
  CATCH_CHECK(at_b.failures().empty());

  std::map<int, int> next_step;  // per source rank
  bool in_order = true, identical = true;
  for (const auto& [meta, tensor] : at_b.received()) {
    int& expected = next_step[meta.source_rank];
    if (meta.step != expected) in_order = false;
    ++expected;
    const auto& sent = meta.source_rank == 0 ? sent_a : sent_c;
    if (meta.step >= 0 && meta.step < count && !same_bytes(tensor, sent[static_cast<std::size_t>(meta.step)]))
      identical = false;
  }
  CATCH_CHECK(in_order);
  CATCH_CHECK(identical);
  CATCH_CHECK(next_step[0] == count);
  CATCH_CHECK(next_step[2] == count);
  int expected = 0;
  for (const auto& [meta, tensor] : at_a.received()) {
    CATCH_CHECK(meta.step == expected);
    ++expected;
  }
}

CATCH_TEST_CASE("ucx_transport holds a receive handler's reply made before connect and sends it once connected",
                "[transport][ucx_transport]") {
  inbox at_a;
  echo_to_process_0 echo;
  inbox& at_b = echo.in;
  ucx_transport a(0, 2, test_limits());
  ucx_transport b(1, 2, test_limits());
  at_a.install(a);
  echo.install(b);
  const std::vector<std::vector<std::uint8_t>> addresses = {a.address(), b.address()};
  a.connect(addresses);
  const tensor_box sent = patterned(tensor_dtype::f32, {3, 5}, 7);
  a.send(1, meta_for(4, 2, 1, 0), sent);
  CATCH_REQUIRE(at_b.wait_received(1, 30s));  // b has not connected: its handler's reply is held
  CATCH_CHECK(echo.error().empty());
  CATCH_CHECK(at_a.received().empty());
  b.connect(addresses);
  CATCH_REQUIRE(at_a.wait_received(1, 30s));
  const auto got = at_a.received();
  CATCH_CHECK(got[0].first.step == 4);
  CATCH_CHECK(got[0].first.microbatch == 2);
  CATCH_CHECK(same_bytes(got[0].second, sent));
  CATCH_CHECK(at_a.failures().empty());
  CATCH_CHECK(at_b.failures().empty());
}

CATCH_TEST_CASE("ucx_transport exchanges tensors with a forked process", "[transport][ucx_transport]") {
  const auto cases = tensor_cases();
  int to_child[2], to_parent[2];
  CATCH_REQUIRE(::pipe(to_child) == 0);
  CATCH_REQUIRE(::pipe(to_parent) == 0);
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::close(to_child[1]);
    ::close(to_parent[0]);
    run_echo_child(to_child[0], to_parent[1], cases.size());
  }
  CATCH_REQUIRE(pid > 0);
  ::close(to_child[0]);
  ::close(to_parent[1]);
  {
    inbox in;
    ucx_transport t(0, 2, test_limits());
    in.install(t);
    CATCH_REQUIRE(write_blob(to_child[1], t.address()));
    auto child = read_blob(to_parent[0], 10000);
    CATCH_REQUIRE(child.has_value());
    t.connect({{}, *child});
    std::vector<tensor_box> sent;
    for (std::size_t i = 0; i < cases.size(); ++i) {
      sent.push_back(patterned(cases[i].dtype, cases[i].shape, static_cast<std::uint32_t>(i + 1)));
      t.send(1, meta_for(11, static_cast<int>(i), 5, 3, tensor_kind::tied_gradient), sent.back());
    }
    const bool all_back = in.wait_received(cases.size(), 30s);
    // Before the bye: once the child exits, its endpoint fails, and that is reported too.
    const auto failures = in.failures();
    const char bye = 1;
    write_exact(to_child[1], &bye, 1);
    std::string reported;
    for (auto& [process, reason] : failures) reported += "process " + std::to_string(process) + ": " + reason + "; ";
    CATCH_INFO("failures reported: " << reported);
    CATCH_CHECK(all_back);
    CATCH_CHECK(failures.empty());
    const auto got = in.received();
    for (std::size_t i = 0; i < got.size(); ++i) {
      CATCH_INFO("echo " << i);
      CATCH_CHECK(got[i].first.kind == tensor_kind::tied_gradient);
      CATCH_CHECK(got[i].first.step == 11);
      CATCH_CHECK(got[i].first.microbatch == static_cast<int>(i));
      CATCH_CHECK(got[i].first.virtual_stage == 5);
      CATCH_CHECK(got[i].first.source_rank == 3);
      CATCH_CHECK(got[i].first.tag == payload_tag_of(1, i));
      CATCH_CHECK(same_bytes(got[i].second, sent[i]));
    }
    CATCH_CHECK(wait_child(pid, 30s) == 0);
  }
  ::close(to_child[1]);
  ::close(to_parent[0]);
}

CATCH_TEST_CASE("ucx_transport reports a peer that sends a malformed header and keeps running",
                "[transport][ucx_transport]") {
  // Process 0 is the transport under test; a raw ucx_worker poses as process 1; process 2 is
  // a well-behaved transport.
  // What the rogue's sends read is declared before it, so it outlives the rogue's progress
  // thread: a send to a peer that closed the connection can still be in flight until then.
  std::vector<std::uint8_t> header;
  std::string expected_error;
  std::vector<std::uint8_t> good_frame;
  const float payload[2] = {1.0f, 2.0f};
  inbox at_0, at_2;
  ucx_transport t0(0, 3, test_limits());
  ucx_transport t2(2, 3, test_limits());
  ucx_worker rogue;
  at_0.install(t0);
  at_2.install(t2);
  const std::vector<std::vector<std::uint8_t>> addresses = {t0.address(), rogue.address(), t2.address()};
  t0.connect(addresses);
  t2.connect(addresses);
  const int to_t0 = rogue.connect(t0.address());

  CATCH_SECTION("bad magic") {
    header = {'N', 'O', 'P', 'E', 1, 1, 1, 1};
    header.resize(48);
    expected_error = "bad magic";
  }
  CATCH_SECTION("a frame field outside the job's limits") {
    tensor_meta m = meta_for(1, 0, 0, 1);
    m.shape = {2, 2};
    m.nbytes = 16;
    m.virtual_stage = 99;
    m.tag = payload_tag_of(1, 0);
    header = encode_frame(m);
    expected_error = "virtual_stage=99 outside [0, 8)";
  }
  CATCH_SECTION("a frame whose tag is not its header's payload tag") {
    tensor_meta m = meta_for(1, 0, 0, 1);
    m.shape = {2, 2};
    m.nbytes = 16;
    m.tag = payload_tag_of(1, 5);
    header = encode_frame(m);
    expected_error = "is not 0x200010000000000";
  }
  CATCH_SECTION("a header longer than any frame") {
    header.assign(20000, 0xAB);
    expected_error = "header of more than";
  }

  const auto sent_at = std::chrono::steady_clock::now();
  rogue.send(to_t0, header_tag_of(1, 0), header.data(), header.size(), [](std::string) {});
  CATCH_REQUIRE(at_0.wait_failures(1, 10s));
  const auto failures = at_0.failures();
  CATCH_INFO("reported after "
             << std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - sent_at).count()
             << " ms: " << failures[0].second);
  CATCH_CHECK(failures[0].first == 1);
  CATCH_CHECK_THAT(failures[0].second, Catch::Contains("process 1 sent a malformed frame: "));
  CATCH_CHECK_THAT(failures[0].second, Catch::Contains(expected_error));
  CATCH_CHECK_THAT(failures[0].second, Catch::Contains("its connection is closed"));

  // Anything more from process 1 is ignored, even a well-formed tensor.
  tensor_meta good = meta_for(2, 0, 0, 1);
  good.shape = {2};
  good.nbytes = 8;
  good.tag = payload_tag_of(1, 1);
  good_frame = encode_frame(good);
  rogue.send(to_t0, header_tag_of(1, 1), good_frame.data(), good_frame.size(), [](std::string) {});
  rogue.send(to_t0, payload_tag_of(1, 1), payload, sizeof payload, [](std::string) {});

  // Process 0 still works: with process 2 both ways, and with itself.
  t2.send(0, meta_for(4, 1, 1, 2), patterned(tensor_dtype::f32, {3}, 1));
  t0.send(2, meta_for(4, 2, 2, 0), patterned(tensor_dtype::i64, {1024, 64}, 2));
  t0.send(0, meta_for(4, 3, 3, 0), patterned(tensor_dtype::bf16, {8}, 3));
  CATCH_REQUIRE(at_0.wait_received(2, 10s));
  CATCH_REQUIRE(at_2.wait_received(1, 10s));
  std::this_thread::sleep_for(300ms);  // room for the ignored tensor to show up, were it delivered
  for (const auto& [meta, tensor] : at_0.received()) CATCH_CHECK(meta.source_rank != 1);
  CATCH_CHECK(at_0.received().size() == 2);
  CATCH_CHECK(at_0.failures().size() == 1);
  CATCH_CHECK(at_2.failures().empty());
}

CATCH_TEST_CASE("ucx_transport reports a SIGKILLed peer process within seconds", "[transport][ucx_transport]") {
  // Failure detection needs tcp (UCX's shm transports refuse peer error handling).
  scoped_env tls("UCX_TLS", "tcp,self");
  int to_child[2], to_parent[2];
  CATCH_REQUIRE(::pipe(to_child) == 0);
  CATCH_REQUIRE(::pipe(to_parent) == 0);
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::close(to_child[1]);
    ::close(to_parent[0]);
    // Echoes one tensor, then waits to be killed (bounded in case the parent is gone).
    run_echo_child(to_child[0], to_parent[1], 1);
  }
  CATCH_REQUIRE(pid > 0);
  ::close(to_child[0]);
  ::close(to_parent[1]);
  {
    inbox in;
    ucx_transport t(0, 2, test_limits());
    in.install(t);
    CATCH_REQUIRE(write_blob(to_child[1], t.address()));
    auto child = read_blob(to_parent[0], 10000);
    CATCH_REQUIRE(child.has_value());
    t.connect({{}, *child});
    // A large receive stays posted on the child's side of the wire while it dies: our pending
    // header receive and this round trip's endpoints are what the destructor must survive.
    t.send(1, meta_for(0, 0, 0, 0), patterned(tensor_dtype::f32, {1024}, 1));
    CATCH_REQUIRE(in.wait_received(1, 10s));

    const auto killed_at = std::chrono::steady_clock::now();
    ::kill(pid, SIGKILL);
    int status = 0;
    ::waitpid(pid, &status, 0);

    bool reported = in.wait_failures(1, 5s);
    bool needed_probe = false;
    if (!reported) {
      // As real traffic would: a send to the dead process.
      needed_probe = true;
      t.send(1, meta_for(1, 0, 0, 0), patterned(tensor_dtype::f32, {1024}, 2));
      reported = in.wait_failures(1, 5s);
    }
    const auto ms =
        std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - killed_at).count();
    CATCH_REQUIRE(reported);
    const auto failures = in.failures();
    CATCH_WARN("SIGKILLed peer reported after " << ms << " ms" << (needed_probe ? " (after a probe send)" : "")
                                               << ": " << failures[0].second);
    CATCH_CHECK(failures[0].first == 1);
    CATCH_CHECK_THAT(failures[0].second, Catch::StartsWith("lost process 1: "));
    // Reported once; later sends to it are dropped quietly.
    t.send(1, meta_for(2, 0, 0, 0), patterned(tensor_dtype::f32, {16}, 3));
    std::this_thread::sleep_for(200ms);
    CATCH_CHECK(in.failures().size() == 1);
  }
  ::close(to_child[1]);
  ::close(to_parent[0]);
}

CATCH_TEST_CASE("tensor_box::adopt (ucx_transport receive buffers) owns the memory until the last reference goes, then releases it once",
                "[transport][ucx_transport][tensor_box]") {
  std::atomic<int> releases{0};
  std::atomic<void*> released{nullptr};
  const auto release = [&](void* p) {
    released = p;
    ++releases;
    delete[] static_cast<float*>(p);
  };

  float* data = new float[6]{1, 2, 3, 4, 5, 6};
  tensor_box a = tensor_box::adopt(tensor_dtype::f32, {2, 3}, data, release);
  CATCH_CHECK(a.data() == data);
  CATCH_CHECK(a.shape() == std::vector<std::int64_t>{2, 3});
  CATCH_CHECK(a.nbytes() == 24);
  CATCH_CHECK(a.dtype() == tensor_dtype::f32);
  CATCH_CHECK(unbox(a).sum().item<float>() == 21.0f);
  tensor_box b = a;
  at::Tensor view = unbox(a).t();  // a torch view keeps the storage too
  a = tensor_box();
  b = tensor_box();
  CATCH_CHECK(releases == 0);
  CATCH_CHECK(view[2][1].item<float>() == 6.0f);
  // The last reference goes on another thread: release runs there, once.
  std::thread([v = view]() mutable { v = at::Tensor(); }).join();
  CATCH_CHECK(releases == 0);  // `view` itself still holds it
  view = at::Tensor();
  CATCH_CHECK(releases == 1);
  CATCH_CHECK(released == static_cast<void*>(data));

  // Ownership passes at the call: a refused shape releases the memory before adopt throws.
  float* refused = new float[4];
  CATCH_CHECK_THROWS_AS(tensor_box::adopt(tensor_dtype::f32, {2, -2}, refused, release), std::invalid_argument);
  CATCH_CHECK(releases == 2);
  CATCH_CHECK(released == static_cast<void*>(refused));
}

CATCH_TEST_CASE("ucx_transport reuses a released receive buffer for the next payload of its size class",
                "[transport][ucx_transport][receive_pool]") {
  connected_pair p;
  const ucx_receive_pool_stats start = p.b.receive_pool_stats();
  CATCH_CHECK(start.fresh == 0);
  CATCH_CHECK(start.idle_bytes == 0);
  CATCH_CHECK(start.in_use_bytes == 0);

  const tensor_box first = patterned(tensor_dtype::f32, {256, 1024}, 1);  // 1 MiB
  p.a.send(1, meta_for(0, 0, 0, 0), first);
  CATCH_REQUIRE(p.at_b.wait_received(1, 10s));
  const void* buffer = p.at_b.received()[0].second.data();
  CATCH_CHECK(same_bytes(p.at_b.received()[0].second, first));
  ucx_receive_pool_stats s = p.b.receive_pool_stats();
  CATCH_CHECK(s.fresh == 1);
  CATCH_CHECK(s.reused == 0);
  CATCH_CHECK(s.in_use_bytes == mib);
  CATCH_CHECK(s.idle_bytes == 0);
  CATCH_CHECK(reinterpret_cast<std::uintptr_t>(buffer) % 4096 == 0);

  // Released: the buffer goes back to the pool, not to the system.
  p.at_b.clear();
  s = wait_pool(p.b, [](const ucx_receive_pool_stats& x) { return x.kept == 1; });
  CATCH_CHECK(s.kept == 1);
  CATCH_CHECK(s.freed == 0);
  CATCH_CHECK(s.idle_bytes == mib);
  CATCH_CHECK(s.in_use_bytes == 0);

  // The next payload of that size lands in it, and arrives intact.
  const tensor_box second = patterned(tensor_dtype::i64, {128, 1024}, 2);  // 1 MiB, other dtype
  p.a.send(1, meta_for(1, 0, 0, 0), second);
  CATCH_REQUIRE(p.at_b.wait_received(1, 10s));
  CATCH_CHECK(same_bytes(p.at_b.received()[0].second, second));
  CATCH_CHECK(p.at_b.received()[0].second.data() == buffer);
  s = p.b.receive_pool_stats();
  CATCH_CHECK(s.fresh == 1);
  CATCH_CHECK(s.reused == 1);
  CATCH_CHECK(s.idle_bytes == 0);
  CATCH_CHECK(s.in_use_bytes == mib);

  // A slightly smaller payload is in the same size class: same buffer again.
  p.at_b.clear();
  const tensor_box smaller = patterned(tensor_dtype::bf16, {1000, 500}, 3);  // ~0.95 MiB
  p.a.send(1, meta_for(2, 0, 0, 0), smaller);
  CATCH_REQUIRE(p.at_b.wait_received(1, 10s));
  CATCH_CHECK(same_bytes(p.at_b.received()[0].second, smaller));
  s = p.b.receive_pool_stats();
  CATCH_CHECK(s.fresh == 1);
  CATCH_CHECK(s.reused == 2);

  // Held while the next arrives: that one needs a buffer of its own.
  const tensor_box third = patterned(tensor_dtype::f32, {256, 1024}, 4);
  p.a.send(1, meta_for(3, 0, 0, 0), third);
  CATCH_REQUIRE(p.at_b.wait_received(2, 10s));
  CATCH_CHECK(same_bytes(p.at_b.received()[1].second, third));
  CATCH_CHECK(p.at_b.received()[1].second.data() != buffer);
  s = p.b.receive_pool_stats();
  CATCH_CHECK(s.fresh == 2);
  CATCH_CHECK(s.in_use_bytes == 2 * mib);

  // Small payloads get plain tensors.
  const tensor_box small = patterned(tensor_dtype::f32, {1024}, 5);  // 4 KiB
  p.a.send(1, meta_for(4, 0, 0, 0), small);
  CATCH_REQUIRE(p.at_b.wait_received(3, 10s));
  CATCH_CHECK(same_bytes(p.at_b.received()[2].second, small));
  s = p.b.receive_pool_stats();
  CATCH_CHECK(s.unpooled == 1);
  CATCH_CHECK(s.fresh == 2);
  CATCH_CHECK(p.at_a.failures().empty());
  CATCH_CHECK(p.at_b.failures().empty());
}

CATCH_TEST_CASE("ucx_transport keeps at most max_idle_bytes of receive buffers, freeing the oldest first",
                "[transport][ucx_transport][receive_pool]") {
  ucx_receive_pool_options options;
  options.max_idle_bytes = 3 * mib;
  options.min_tensor_bytes = 0;  // pool even the smallest payloads
  connected_pair p(options);

  std::vector<tensor_box> sent;
  for (int i = 0; i < 4; ++i) {
    sent.push_back(patterned(tensor_dtype::f32, {256, 1024}, static_cast<std::uint32_t>(10 + i)));  // 1 MiB
    p.a.send(1, meta_for(i, 0, 0, 0), sent.back());
  }
  CATCH_REQUIRE(p.at_b.wait_received(4, 10s));
  for (int i = 0; i < 4; ++i) CATCH_CHECK(same_bytes(p.at_b.received()[i].second, sent[i]));
  const void* newest = p.at_b.received()[3].second.data();
  CATCH_CHECK(p.b.receive_pool_stats().in_use_bytes == 4 * mib);
  p.at_b.clear();  // released in arrival order: the first one is the oldest
  ucx_receive_pool_stats s = wait_pool(p.b, [](const ucx_receive_pool_stats& x) { return x.in_use_bytes == 0; });
  CATCH_CHECK(s.fresh == 4);
  CATCH_CHECK(s.kept == 4);
  CATCH_CHECK(s.freed == 1);
  CATCH_CHECK(s.idle_bytes == 3 * mib);

  // A 2 MiB buffer coming back pushes out the two oldest 1 MiB ones.
  const tensor_box two = patterned(tensor_dtype::f32, {512, 1024}, 20);
  p.a.send(1, meta_for(4, 0, 0, 0), two);
  CATCH_REQUIRE(p.at_b.wait_received(1, 10s));
  CATCH_CHECK(same_bytes(p.at_b.received()[0].second, two));
  p.at_b.clear();
  s = wait_pool(p.b, [](const ucx_receive_pool_stats& x) { return x.in_use_bytes == 0; });
  CATCH_CHECK(s.fresh == 5);
  CATCH_CHECK(s.kept == 5);
  CATCH_CHECK(s.freed == 3);
  CATCH_CHECK(s.idle_bytes == 3 * mib);

  // The 1 MiB buffer left is the most recently returned one.
  const tensor_box again = patterned(tensor_dtype::f32, {256, 1024}, 21);
  p.a.send(1, meta_for(5, 0, 0, 0), again);
  CATCH_REQUIRE(p.at_b.wait_received(1, 10s));
  CATCH_CHECK(same_bytes(p.at_b.received()[0].second, again));
  CATCH_CHECK(p.at_b.received()[0].second.data() == newest);
  CATCH_CHECK(p.b.receive_pool_stats().reused == 1);
  p.at_b.clear();

  // A buffer larger than the cap is never kept; a tiny one is pooled (min_tensor_bytes = 0).
  const tensor_box big = patterned(tensor_dtype::f32, {1024, 1024}, 22);  // 4 MiB
  const tensor_box tiny = patterned(tensor_dtype::bf16, {3}, 23);
  p.a.send(1, meta_for(6, 0, 0, 0), big);
  p.a.send(1, meta_for(7, 0, 0, 0), tiny);
  CATCH_REQUIRE(p.at_b.wait_received(2, 10s));
  CATCH_CHECK(same_bytes(p.at_b.received()[0].second, big));
  CATCH_CHECK(same_bytes(p.at_b.received()[1].second, tiny));
  CATCH_CHECK(reinterpret_cast<std::uintptr_t>(p.at_b.received()[0].second.data()) % (2 * mib) == 0);
  p.at_b.clear();
  s = wait_pool(p.b, [](const ucx_receive_pool_stats& x) { return x.in_use_bytes == 0; });
  CATCH_CHECK(s.unpooled == 0);
  CATCH_CHECK(s.fresh == 7);
  CATCH_CHECK(s.idle_bytes <= 3 * mib);
  CATCH_CHECK(s.freed >= 4);  // the 4 MiB one at least
  CATCH_CHECK(s.kept + s.freed >= 7);
  CATCH_CHECK(p.at_b.failures().empty());
}

CATCH_TEST_CASE("ucx_transport's received tensors stay valid after the transport is destroyed",
                "[transport][ucx_transport][receive_pool]") {
  // Run by hand under ASan/LSan once: a buffer used or freed twice, or leaked, shows there.
  std::vector<tensor_box> sent, kept;
  {
    connected_pair p;
    sent.push_back(patterned(tensor_dtype::f32, {256, 1024}, 31));      // 1 MiB, pooled
    sent.push_back(patterned(tensor_dtype::bf16, {4096, 2048}, 32));    // 16 MiB, pooled, huge pages
    sent.push_back(patterned(tensor_dtype::i64, {16, 16}, 33));         // 2 KiB, plain
    sent.push_back(patterned(tensor_dtype::f32, {256, 1024}, 34));      // released before the end: idle
    for (std::size_t i = 0; i < sent.size(); ++i) p.a.send(1, meta_for(static_cast<int>(i), 0, 0, 0), sent[i]);
    CATCH_REQUIRE(p.at_b.wait_received(sent.size(), 10s));
    for (const auto& [meta, tensor] : p.at_b.received()) kept.push_back(tensor);
    kept.pop_back();
    p.at_b.clear();
    const ucx_receive_pool_stats s = wait_pool(p.b, [](const ucx_receive_pool_stats& x) { return x.kept == 1; });
    CATCH_CHECK(s.kept == 1);
    CATCH_CHECK(s.idle_bytes == mib);
    CATCH_CHECK(s.in_use_bytes == mib + 16 * mib);
  }
  // Both transports are gone; the tensors still hold their bytes, and can be released from a
  // compute thread.
  CATCH_REQUIRE(kept.size() == 3);
  for (std::size_t i = 0; i < kept.size(); ++i) CATCH_CHECK(same_bytes(kept[i], sent[i]));
  std::thread([moved = std::move(kept)]() mutable {
    for (tensor_box& t : moved) std::memset(t.data(), 0, t.nbytes());
    moved.clear();
  }).join();
}
