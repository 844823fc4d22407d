// The control plane's wire codec: frames, the hello a joining process answers the challenge
// with, and control envelopes (CAF-serialized messages, decoded by a bounded deserializer).
// Pure functions over bytes, no sockets: everything a stranger can send is parsed here, and
// tests/actors/control_codec_test.cpp checks it without a broker.
//
// Wire format on each TCP connection: frames of [u32 little-endian length][body], body[0] a
// type byte: 'C' challenge (32 random bytes), 'H' hello ([32-byte answer][i32 process][joiner
// name]), 'R' refusal (reason text), 'M' envelope ([u8 target][i32 process][i32 index] + a
// CAF-serialized caf::message), 'K' heartbeat (empty: once the job has formed, each side
// says it every second, so that silence tells a stopped or cut-off process). Before a
// connection has proven the token, frames are capped at 4 KiB and only a hello is accepted;
// nothing else it sends is acted on.
#pragma once

#include <caf/all.hpp>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace actorpipe {

// Who an envelope is for, in its process.
enum class target_kind : std::uint8_t { control = 0, supervisor = 1, stage = 2, optimizer = 3, chunk = 4, feeder = 5, runtime = 6 };

// One control message on the wire ('M' frame body): for actor (target, index) in `process`.
struct control_envelope {
  std::uint8_t target = 0;
  std::int32_t process = 0;
  std::int32_t index = 0;
  caf::message content;
};

// Serializes an envelope (its content's types must be registered with `sys`); empty when
// the content cannot be serialized.
std::vector<char> encode_envelope(caf::actor_system& sys, control_envelope& e);
// Decodes a frame body into `out`. Returns why it is malformed (a deserialization error,
// trailing bytes, a target or process out of range), or "" when it is well-formed. Never
// throws, never trusts a length it has not checked against what is there.
std::string decode_envelope(caf::actor_system& sys, const char* data, std::size_t size, int processes,
                            control_envelope& out);

namespace control_wire {

constexpr std::size_t length_bytes = 4;         // the u32 length prefix of every frame
constexpr std::uint32_t pre_auth_cap = 4096;    // largest frame before the token is proven
constexpr std::uint32_t frame_cap = 64u << 20;  // largest frame after
constexpr std::size_t answer_bytes = 32;        // an HMAC-SHA256 answer to the challenge

// Frame types (body[0]).
constexpr char challenge = 'C';
constexpr char hello = 'H';
constexpr char refusal = 'R';
constexpr char envelope = 'M';
constexpr char heartbeat = 'K';

// [u32 length of type + payload][type][payload].
std::vector<char> make_frame(char type, const std::vector<char>& payload);
// The body length a 4-byte prefix announces.
std::uint32_t frame_length(const char* prefix);
// Why a body of `length` bytes is refused when at most `cap` are allowed, or "".
std::string check_frame_length(std::uint32_t length, std::uint32_t cap);
// A frame type as it may be quoted in a log line: itself when printable, else '?'.
std::string frame_type_text(char type);
// Text a peer sent, as it may be printed: control bytes (an escape sequence would reach the
// terminal), DEL, C1 controls, the marks that reorder text (U+202E) and bytes of no valid
// UTF-8 sequence as \xNN; at most 2000 bytes, then "...".
std::string peer_text(const std::string& text);

// How the refusals a restart would meet again begin: the joiner's job token, its process
// index against the world size, its world size against process 0's, or the job's model. Other refusals (a
// process that has already joined, a job that has already formed) can pass while a job's
// processes restart one node at a time.
inline constexpr char refusal_wrong_token[] = "wrong job token";
inline constexpr char refusal_bad_index[] = "process index ";
inline constexpr char refusal_world_size[] = "another world size: ";
// The whole job cannot run as its processes build it (two virtual stages on different
// processes hold one tensor name): process 0 refuses every process once all joined.
inline constexpr char refusal_model[] = "the job's model cannot be saved: ";
// Process 0 closed a connection that had not proven the token yet, to take a newer one, as
// it does under a flood of connections: not final, a member connects again.
inline constexpr char refusal_crowded[] = "closed for a newer connection: ";
bool refusal_is_final(const std::string& why);

// What a joining process says after the challenge.
struct hello_frame {
  std::vector<std::uint8_t> answer;  // answer_challenge(token, challenge, joiner)
  std::int32_t process = 0;
  std::string joiner;  // "host:pid:process p", bound into the answer
};
std::vector<char> encode_hello(const hello_frame& h);
// Returns why a hello body is malformed, or "" (the answer is not checked here).
std::string decode_hello(const char* data, std::size_t size, hello_frame& out);

}  // namespace control_wire
}  // namespace actorpipe
