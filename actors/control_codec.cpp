// The control plane's wire codec (format in control_codec.hpp).
#include "actors/control_codec.hpp"

#include <cctype>

#include "core/text_file.hpp"
#include "core/wire_bytes.hpp"

namespace actorpipe {
namespace {

// CAF's binary_deserializer trusts a sequence's length field: a byte vector is resized to it
// before its bytes are checked to be there, so a few corrupt bytes can ask for gigabytes.
// This one forwards everything to it but refuses a sequence longer than the bytes left
// (every element of every message type here takes at least one byte).
class bounded_deserializer final : public caf::deserializer {
 public:
  bounded_deserializer(caf::actor_system& sys, const char* data, std::size_t size)
      : caf::deserializer(sys), inner_(sys, data, size) {}

  std::size_t remaining() const { return inner_.remaining(); }

  caf::error begin_object(uint16_t& typenr, std::string& name) override { return inner_.begin_object(typenr, name); }
  caf::error end_object() override { return inner_.end_object(); }
  caf::error begin_sequence(size_t& size) override {
    if (auto err = inner_.begin_sequence(size)) return err;
    if (size > inner_.remaining()) return caf::sec::end_of_stream;
    return caf::none;
  }
  caf::error end_sequence() override { return inner_.end_sequence(); }
  caf::error apply_raw(size_t num_bytes, void* data) override { return inner_.apply_raw(num_bytes, data); }

 protected:
  caf::error apply_impl(int8_t& x) override { return inner_(x); }
  caf::error apply_impl(uint8_t& x) override { return inner_(x); }
  caf::error apply_impl(int16_t& x) override { return inner_(x); }
  caf::error apply_impl(uint16_t& x) override { return inner_(x); }
  caf::error apply_impl(int32_t& x) override { return inner_(x); }
  caf::error apply_impl(uint32_t& x) override { return inner_(x); }
  caf::error apply_impl(int64_t& x) override { return inner_(x); }
  caf::error apply_impl(uint64_t& x) override { return inner_(x); }
  caf::error apply_impl(float& x) override { return inner_(x); }
  caf::error apply_impl(double& x) override { return inner_(x); }
  caf::error apply_impl(long double& x) override { return inner_(x); }
  caf::error apply_impl(std::string& x) override { return inner_(x); }
  caf::error apply_impl(std::u16string& x) override { return inner_(x); }
  caf::error apply_impl(std::u32string& x) override { return inner_(x); }

 private:
  caf::binary_deserializer inner_;
};

}  // namespace

std::vector<char> encode_envelope(caf::actor_system& sys, control_envelope& e) {
  std::vector<char> body;
  caf::binary_serializer sink{sys, body};
  if (sink(e.target, e.process, e.index, e.content)) return {};
  return body;
}

std::string decode_envelope(caf::actor_system& sys, const char* data, std::size_t size, int processes,
                            control_envelope& out) {
  bounded_deserializer source{sys, data, size};
  out = control_envelope{};
  if (auto err = source(out.target, out.process, out.index, out.content))
    return "a malformed control message (" + sys.render(err) + ")";
  if (source.remaining() != 0)
    return "a control message with " + std::to_string(source.remaining()) + " bytes past its end";
  if (out.target > static_cast<std::uint8_t>(target_kind::runtime))
    return "a control message for unknown target kind " + std::to_string(out.target);
  if (out.process < 0 || out.process >= processes)
    return "a control message for process " + std::to_string(out.process) + " of " + std::to_string(processes);
  if (out.index < 0) return "a control message for index " + std::to_string(out.index);
  return "";
}

namespace control_wire {

std::vector<char> make_frame(char type, const std::vector<char>& payload) {
  std::vector<char> frame;
  frame.reserve(length_bytes + 1 + payload.size());
  wire::put_u32(frame, static_cast<std::uint32_t>(payload.size() + 1));
  frame.push_back(type);
  frame.insert(frame.end(), payload.begin(), payload.end());
  return frame;
}

std::uint32_t frame_length(const char* prefix) { return wire::get_u32(prefix); }

std::string check_frame_length(std::uint32_t length, std::uint32_t cap) {
  if (length >= 1 && length <= cap) return "";
  return "a frame of " + std::to_string(length) + " bytes (allowed: 1.." + std::to_string(cap) + ")";
}

bool refusal_is_final(const std::string& why) {
  return why.rfind(refusal_wrong_token, 0) == 0 || why.rfind(refusal_bad_index, 0) == 0 ||
         why.rfind(refusal_world_size, 0) == 0 || why.rfind(refusal_model, 0) == 0;
}

std::string frame_type_text(char type) {
  return std::isprint(static_cast<unsigned char>(type)) ? std::string(1, type) : "?";
}

std::string peer_text(const std::string& text) { return shown_text(text, 2000); }

std::vector<char> encode_hello(const hello_frame& h) {
  std::vector<char> body(h.answer.begin(), h.answer.end());
  wire::put_i32(body, h.process);
  body.insert(body.end(), h.joiner.begin(), h.joiner.end());
  return body;
}

std::string decode_hello(const char* data, std::size_t size, hello_frame& out) {
  if (size < answer_bytes + 4) return "a hello of " + std::to_string(size) + " bytes (protocol error)";
  out.answer.assign(data, data + answer_bytes);
  out.process = wire::get_i32(data + answer_bytes);
  out.joiner.assign(data + answer_bytes + 4, data + size);  // as the answer was made on it: quote with peer_text
  return "";
}

}  // namespace control_wire
}  // namespace actorpipe
