// The control plane's envelope decoder against garbage: well-formed envelopes round-trip;
// truncated, extended, bit-flipped and random ones are rejected with a reason (the connection
// is then closed) and never crash, hang or throw.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>

#include "actors/control_plane.hpp"
#include "actors/messages.hpp"

using namespace actorpipe;

namespace {

std::vector<control_envelope> samples() {
  msg::flush f{3, 1, {}, 4, 2};
  for (int m = 0; m < 6; ++m) f.events.push_back(timeline_event{1, action{op_kind::forward, 1, m}, 0, 0.1 * m, 0.1 * m + 0.05});
  return {
      {static_cast<std::uint8_t>(target_kind::supervisor), 0, 0, caf::make_message(f)},
      {static_cast<std::uint8_t>(target_kind::supervisor), 0, 0, caf::make_message(msg::grad_sq_parts{2, 1, {{1, {0.5, 0.125}}, {3, {2.25}}, {4, {}}}})},
      {static_cast<std::uint8_t>(target_kind::optimizer), 1, 1, caf::make_message(msg::optimizer_step{2, 0.75, 3e-4})},
      {static_cast<std::uint8_t>(target_kind::supervisor), 0, 0, caf::make_message(msg::failure{"rank 1, step 2: F1.3 failed"})},
      {static_cast<std::uint8_t>(target_kind::supervisor), 0, 0, caf::make_message(msg::parameter_names{3, {"blocks.2.attn.qkv.weight", "ln_f.bias"}})},
      {static_cast<std::uint8_t>(target_kind::control), 1, 0, caf::make_message(msg::welcome{{{1, 2, 3}, {4, 5}}, 12.5, 0, "", ""})},
  };
}

}  // namespace

CATCH_TEST_CASE("control envelopes round-trip, and garbage is rejected with a reason, never a crash",
                "[actors][control][fuzz]") {
  caf::actor_system_config cfg;
  add_message_types(cfg);
  caf::actor_system sys{cfg};

  std::vector<std::vector<char>> encoded;
  for (auto& e : samples()) {
    encoded.push_back(encode_envelope(sys, e));
    CATCH_REQUIRE(!encoded.back().empty());
    control_envelope back;
    CATCH_CHECK(decode_envelope(sys, encoded.back().data(), encoded.back().size(), 2, back) == "");
    CATCH_CHECK(back.target == e.target);
    CATCH_CHECK(back.process == e.process);
    CATCH_CHECK(back.index == e.index);
    CATCH_CHECK(to_string(back.content) == to_string(e.content));
  }
  {  // a flush comes back field for field
    control_envelope back;
    CATCH_REQUIRE(decode_envelope(sys, encoded[0].data(), encoded[0].size(), 2, back) == "");
    CATCH_REQUIRE(back.content.match_elements<msg::flush>());
    const auto& f = back.content.get_as<msg::flush>(0);
    CATCH_CHECK(f.events.size() == 6);
    CATCH_CHECK(f.events[5].act == action{op_kind::forward, 1, 5});
    CATCH_CHECK(f.events[5].end == Approx(0.55));
  }
  {  // infinities, NaN and -0 cross bit for bit (CAF's own double encoding never returns for inf)
    const double inf = std::numeric_limits<double>::infinity();
    control_envelope e{static_cast<std::uint8_t>(target_kind::supervisor), 0, 0,
                       caf::make_message(msg::grad_sq_parts{4, 1, {{0, {inf}}, {1, {0.5, std::nan("7")}}, {2, {-0.0}}}})};
    auto bytes = encode_envelope(sys, e);
    control_envelope back;
    CATCH_REQUIRE(decode_envelope(sys, bytes.data(), bytes.size(), 2, back) == "");
    const auto& parts = back.content.get_as<msg::grad_sq_parts>(0).per_stage;
    CATCH_REQUIRE(parts.size() == 3);
    CATCH_CHECK(parts[0].sums == std::vector<double>{inf});
    CATCH_REQUIRE(parts[1].sums.size() == 2);
    CATCH_CHECK(parts[1].sums[0] == 0.5);
    CATCH_CHECK(std::isnan(parts[1].sums[1]));
    CATCH_REQUIRE(parts[2].sums.size() == 1);
    CATCH_CHECK(std::memcmp(&parts[2].sums[0], &e.content.get_as<msg::grad_sq_parts>(0).per_stage[2].sums[0], 8) == 0);
    CATCH_CHECK(std::signbit(parts[2].sums[0]));
    e.content = caf::make_message(msg::loss_report{4, 1, -inf});
    bytes = encode_envelope(sys, e);
    CATCH_REQUIRE(decode_envelope(sys, bytes.data(), bytes.size(), 2, back) == "");
    CATCH_CHECK(back.content.get_as<msg::loss_report>(0).loss == -inf);
  }
  {  // a length field that asks for 2 GiB is refused before anything is allocated
    std::vector<char> bytes = encoded[5];  // welcome{{{1, 2, 3}, {4, 5}}}: ... 03 01 02 03 02 04 05 ...
    const char pattern[] = {3, 1, 2, 3};
    auto at = std::search(bytes.begin(), bytes.end(), pattern, pattern + 4);
    CATCH_REQUIRE(at != bytes.end());
    const char huge[] = {char(0x80), char(0x80), char(0x80), char(0x80), char(0x08)};  // varbyte 2^31
    at = bytes.erase(at);
    bytes.insert(at, huge, huge + 5);
    control_envelope back;
    const std::string why = decode_envelope(sys, bytes.data(), bytes.size(), 2, back);
    CATCH_INFO(why);
    CATCH_CHECK(!why.empty());
  }
  {  // out-of-range fields and trailing bytes
    control_envelope e = samples()[2], back;
    e.process = 5;
    auto bytes = encode_envelope(sys, e);
    CATCH_CHECK(decode_envelope(sys, bytes.data(), bytes.size(), 2, back) == "a control message for process 5 of 2");
    e = samples()[2];
    e.target = 9;
    bytes = encode_envelope(sys, e);
    CATCH_CHECK(decode_envelope(sys, bytes.data(), bytes.size(), 2, back) == "a control message for unknown target kind 9");
    bytes = encoded[2];
    bytes.push_back('x');
    CATCH_CHECK(decode_envelope(sys, bytes.data(), bytes.size(), 2, back) == "a control message with 1 bytes past its end");
  }

  std::mt19937_64 rng(20261130);
  auto below = [&](std::size_t n) { return static_cast<std::size_t>(rng() % n); };
  int accepted = 0, rejected = 0;
  const int cases = 60000;
  for (int i = 0; i < cases; ++i) {
    std::vector<char> bytes;
    const int mode = static_cast<int>(below(5));
    if (mode == 0) {  // random bytes
      bytes.resize(below(300));
      for (auto& b : bytes) b = static_cast<char>(rng());
    } else {
      bytes = encoded[below(encoded.size())];
      if (mode == 1) bytes.resize(below(bytes.size() + 1));  // truncated
      if (mode == 2)                                         // flipped bytes
        for (int k = 0, n = 1 + static_cast<int>(below(4)); k < n && !bytes.empty(); ++k)
          bytes[below(bytes.size())] = static_cast<char>(rng());
      if (mode == 3)  // a length or count field blown up
        for (std::size_t k = 0; k + 4 <= bytes.size(); k += 1 + below(16)) {
          if (below(8) == 0) bytes[k] = bytes[k + 1] = bytes[k + 2] = static_cast<char>(0xff);
        }
      if (mode == 4) bytes.insert(bytes.begin() + static_cast<long>(below(bytes.size() + 1)), static_cast<char>(rng()));
    }
    control_envelope out;
    std::string why;
    CATCH_REQUIRE_NOTHROW(why = decode_envelope(sys, bytes.data(), bytes.size(), 4, out));
    if (why.empty()) {
      ++accepted;
      CATCH_REQUIRE(!encode_envelope(sys, out).empty());  // what is accepted is a real message
    } else {
      ++rejected;
      CATCH_REQUIRE(why.find("control message") != std::string::npos);  // "a (malformed) control message ..."
    }
  }
  CATCH_INFO("accepted " << accepted << ", rejected " << rejected);
  CATCH_CHECK(accepted + rejected == cases);
  CATCH_CHECK(rejected > cases / 2);
}
