// The control plane's wire codec on its own (no broker, no sockets): frames carry their
// length, lengths outside the cap are refused with the number, and a hello round-trips or is
// refused when too short to hold an answer and a process index. And how a joiner whose job
// differs from process 0's is told which options differ.
#include <catch2/catch.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "actors/control_codec.hpp"
#include "actors/control_plane.hpp"

using namespace actorpipe;
using namespace actorpipe::control_wire;

CATCH_TEST_CASE("control frames: a little-endian length of type + payload, then the type", "[actors][control][codec]") {
  const std::vector<char> frame = make_frame(envelope, {'a', 'b', 'c'});
  CATCH_REQUIRE(frame.size() == length_bytes + 4);
  CATCH_CHECK(frame_length(frame.data()) == 4);
  CATCH_CHECK(frame[0] == 4);
  CATCH_CHECK(frame[1] == 0);
  CATCH_CHECK(frame[4] == 'M');
  CATCH_CHECK(std::string(frame.begin() + 5, frame.end()) == "abc");
  CATCH_CHECK(frame_length(make_frame(refusal, {}).data()) == 1);
}

CATCH_TEST_CASE("control frame lengths outside 1..cap are refused with the length", "[actors][control][codec]") {
  CATCH_CHECK(check_frame_length(1, pre_auth_cap) == "");
  CATCH_CHECK(check_frame_length(pre_auth_cap, pre_auth_cap) == "");
  CATCH_CHECK(check_frame_length(0, pre_auth_cap) == "a frame of 0 bytes (allowed: 1..4096)");
  CATCH_CHECK(check_frame_length(pre_auth_cap + 1, pre_auth_cap) == "a frame of 4097 bytes (allowed: 1..4096)");
  CATCH_CHECK(check_frame_length(0xffffffffu, frame_cap) != "");
  CATCH_CHECK(frame_type_text('H') == "H");
  CATCH_CHECK(frame_type_text('\x01') == "?");
}

CATCH_TEST_CASE("refusals a restart would meet again are told from those it may not", "[actors][control][codec]") {
  using namespace actorpipe::control_wire;
  CATCH_CHECK(refusal_is_final(std::string(refusal_wrong_token) + " (from 'h:1:process 1'; check ACTORPIPE_JOB_TOKEN)"));
  CATCH_CHECK(refusal_is_final(std::string(refusal_bad_index) + "3 outside [1, 2) (is every process started with the "
                                                                "same WORLD_SIZE?)"));
  CATCH_CHECK_FALSE(refusal_is_final("process 1 has already joined (two processes with RANK=1?)"));
  CATCH_CHECK_FALSE(refusal_is_final("the job has already formed"));
  CATCH_CHECK_FALSE(refusal_is_final("process 1 runs a different job: --steps 4 against 5"));
  // Another world size a restart brings again (it was restarted, each attempt waiting --join-timeout).
  CATCH_CHECK(refusal_is_final(std::string(refusal_world_size) + "process 2 runs a different job: world_size=6 against "
                               "process 0's world_size=4"));
  CATCH_CHECK_FALSE(refusal_is_final("no valid hello within 10 s"));
}

CATCH_TEST_CASE("a hello round-trips, and a short one is refused", "[actors][control][codec]") {
  hello_frame h;
  h.answer.assign(answer_bytes, 0xab);
  h.process = 3;
  h.joiner = "host-b:1234:process 3";
  const std::vector<char> body = encode_hello(h);
  CATCH_CHECK(body.size() == answer_bytes + 4 + h.joiner.size());
  hello_frame back;
  CATCH_REQUIRE(decode_hello(body.data(), body.size(), back) == "");
  CATCH_CHECK(back.answer == h.answer);
  CATCH_CHECK(back.process == 3);
  CATCH_CHECK(back.joiner == h.joiner);

  h.process = -5;  // negative indices survive the wire (the hub refuses them, naming the value)
  const std::vector<char> negative = encode_hello(h);
  CATCH_REQUIRE(decode_hello(negative.data(), negative.size(), back) == "");
  CATCH_CHECK(back.process == -5);

  // A stranger's name is logged: its line breaks and escapes are not (it forged log lines).
  // It is kept as sent (the answer is made on it) and quoted with peer_text.
  h.joiner = "x\n[p0 r0] actorpipe: the job has formed\x1b[31m";
  const std::vector<char> forged = encode_hello(h);
  CATCH_REQUIRE(decode_hello(forged.data(), forged.size(), back) == "");
  CATCH_CHECK(back.joiner == h.joiner);
  CATCH_CHECK(peer_text(back.joiner) == "x\\x0a[p0 r0] actorpipe: the job has formed\\x1b[31m");

  CATCH_CHECK(decode_hello(body.data(), answer_bytes + 3, back) == "a hello of 35 bytes (protocol error)");
  CATCH_CHECK(decode_hello(body.data(), 0, back) == "a hello of 0 bytes (protocol error)");
}

// C1 controls (0x9b starts an escape sequence on some terminals) and marks that reorder text
// passed to the terminal from a stranger's hello; printable UTF-8 is kept.
CATCH_TEST_CASE("peer text escapes controls, C1, reordering marks and bytes of no UTF-8, and keeps the rest",
                "[actors][control][codec]") {
  CATCH_CHECK(peer_text("caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80") == "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80");
  CATCH_CHECK(peer_text("a\xc2\x9b" "31m") == "a\\xc2\\x9b31m");
  CATCH_CHECK(peer_text("\xe2\x80\xaeTXET") == "\\xe2\\x80\\xaeTXET");
  CATCH_CHECK(peer_text("a\xe2\x80\x8b" "b") == "a\\xe2\\x80\\x8bb");  // a zero-width space
  CATCH_CHECK(peer_text("\xff\xc3(") == "\\xff\\xc3(");            // no sequence; one cut short
  CATCH_CHECK(peer_text("\xe0\x80\xaf") == "\\xe0\\x80\\xaf");  // an overlong '/'
  CATCH_CHECK(peer_text("\xed\xa0\x80") == "\\xed\\xa0\\x80");  // a surrogate
  CATCH_CHECK(peer_text(std::string(2001, 'a')) == std::string(2000, 'a') + "...");
}

CATCH_TEST_CASE("an envelope round-trips alone, one for a process out of range is refused", "[actors][control][codec]") {
  caf::actor_system_config cfg;
  caf::actor_system sys{cfg};
  control_envelope e{static_cast<std::uint8_t>(target_kind::stage), 1, 2, caf::make_message(std::string("flush"), 7)};
  const std::vector<char> body = encode_envelope(sys, e);
  CATCH_REQUIRE(!body.empty());
  control_envelope back;
  CATCH_REQUIRE(decode_envelope(sys, body.data(), body.size(), 2, back) == "");
  CATCH_CHECK(back.target == e.target);
  CATCH_CHECK(back.process == 1);
  CATCH_CHECK(back.index == 2);
  CATCH_CHECK(to_string(back.content) == to_string(e.content));
  CATCH_CHECK(decode_envelope(sys, body.data(), body.size(), 1, back) == "a control message for process 1 of 1");
  CATCH_CHECK(decode_envelope(sys, body.data(), body.size() - 1, 2, back) != "");
}

CATCH_TEST_CASE("a job difference names each option that differs, or shows both texts", "[actors][control]") {
  const std::string ours = "steps=2\nlr=0.003\ndata_file=/a b/c.bin\n";
  CATCH_CHECK(describe_job_difference("steps=2\nlr=0.01\ndata_file=/a b/d.bin\n", ours) ==
              "--lr 0.01 against process 0's --lr 0.003; --data-file (/a b/d.bin) against process 0's --data-file (/a b/c.bin)");
  // Named as they are given: booleans and "none" as the flag or its absence, the world size as
  // its variable, keys no flag sets (pause_w) as keys.
  CATCH_CHECK(describe_job_difference("save_dir=none\nlate_input_grad=true\nworld_size=3\nlower_case=false\n"
                                      "resumed_after_step=4 0123abcd\nmin_lr_ratio=0.5\npause_w=true\nschedule_file=\n",
                                      "save_dir=given\nlate_input_grad=false\nworld_size=2\nlower_case=true\n"
                                      "resumed_after_step=0\nmin_lr_ratio=0.1\npause_w=false\nschedule_file=a plan of digest 12\n") ==
              "no --save-dir against process 0's --save-dir; --late-input-grad against process 0's no --late-input-grad; "
              "WORLD_SIZE=3 against process 0's WORLD_SIZE=2; --no-lower-case against process 0's no --no-lower-case; "
              "--resume of a step-4 checkpoint against process 0's no --resume; --min-lr-ratio 0.5 against process 0's "
              "--min-lr-ratio 0.1; pause_w=true against process 0's pause_w=false; no --schedule-file against process 0's --schedule-file (a plan of digest 12)");
  // Two checkpoints of one step (copies of two runs' folders): by their manifests' digests.
  CATCH_CHECK(describe_job_difference("resumed_after_step=3 0123abcd\n", "resumed_after_step=3 4567ef01\n") ==
              "--resume of another step-3 checkpoint than process 0's (its manifest's digest 0123abcd, process 0's "
              "4567ef01): each process must resume from a copy of the same checkpoint");
  CATCH_CHECK(describe_job_difference("resumed_after_step=3 0123abcd\n", "resumed_after_step=5 0123abcd\n") ==
              "--resume of a step-3 checkpoint against process 0's --resume of a step-5 checkpoint");
  // The ranks' spread follows the world size: not named beside it.
  CATCH_CHECK(describe_job_difference("world_size=3\nranks_per_process=2,1,1\n", "world_size=2\nranks_per_process=2,2\n") ==
              "WORLD_SIZE=3 against process 0's WORLD_SIZE=2");
  // Another build's fingerprint (other names, or not name=value): both texts, on one line.
  CATCH_CHECK(describe_job_difference("steps=2\nlr=0.003\n", ours) ==
              "its options are 'steps=2 lr=0.003', process 0's are 'steps=2 lr=0.003 data_file=/a b/c.bin'");
  CATCH_CHECK(describe_job_difference("schedule 1f1b", ours) ==
              "its options are 'schedule 1f1b', process 0's are 'steps=2 lr=0.003 data_file=/a b/c.bin'");
}
