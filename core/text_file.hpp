// A file's text read whole, up to a cap: a device (/dev/zero) or a file far past what the
// reader takes is refused rather than read until memory runs out. And a file's bytes as a
// message may quote them.
#pragma once

#include <cerrno>
#include <cstddef>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace actorpipe {

// The text of `path`, or std::nullopt where it holds more than `limit` bytes (reading stops
// there). Throws std::invalid_argument("cannot read " + what ...) where it cannot be read.
inline std::optional<std::string> read_text_at_most(const std::string& path, std::size_t limit, const std::string& what) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) throw std::invalid_argument(what + " is a directory");
  errno = 0;
  std::ifstream f(path, std::ios::binary);
  if (!f)
    throw std::invalid_argument("cannot read " + what + ": " +
                                (!std::filesystem::exists(path, ec) ? std::string("no such file")
                                 : errno != 0                      ? std::string(std::strerror(errno))
                                                                   : std::string("it cannot be opened")));
  std::string text;
  std::vector<char> buf(1 << 20);
  while (f && text.size() <= limit) {
    f.read(buf.data(), static_cast<std::streamsize>(buf.size()));
    text.append(buf.data(), static_cast<std::size_t>(f.gcount()));
  }
  if (f.bad()) throw std::invalid_argument("cannot read " + what + " to the end");
  if (text.size() > limit) return std::nullopt;
  return text;
}

// `s` for a message: bytes outside printable ASCII as \xNN (a raw byte went to the terminal),
// cut after `limit` characters.
inline std::string printable_text(const std::string& s, std::size_t limit = 80) {
  static const char digits[] = "0123456789abcdef";
  std::string out;
  for (unsigned char c : s) {
    if (out.size() >= limit) return out + "...";
    if (c >= 0x20 && c < 0x7f) {
      out += static_cast<char>(c);
    } else {
      out += "\\x";
      out += digits[c >> 4];
      out += digits[c & 15];
    }
  }
  return out;
}

}  // namespace actorpipe
