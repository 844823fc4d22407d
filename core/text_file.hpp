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

// `ch` as \xNN at the end of `out`.
inline void append_hex_escape(std::string& out, unsigned char ch) {
  static const char digits[] = "0123456789abcdef";
  out += "\\x";
  out += digits[ch >> 4];
  out += digits[ch & 15];
}

// Whether `s` holds an ASCII control byte or DEL (a terminal's escape, a line break).
inline bool has_control_bytes(const std::string& s) {
  for (const char ch : s)
    if (const auto c = static_cast<unsigned char>(ch); c < 0x20 || c == 0x7f) return true;
  return false;
}

// `s` for a message: bytes outside printable ASCII as \xNN (a raw byte went to the terminal),
// cut after `limit` characters.
inline std::string printable_text(const std::string& s, std::size_t limit = 80) {
  std::string out;
  for (const char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    if (out.size() >= limit) return out + "...";
    if (c >= 0x20 && c < 0x7f)
      out += static_cast<char>(c);
    else
      append_hex_escape(out, c);
  }
  return out;
}

// `text` as a terminal may show it: printable UTF-8 as itself (a name in Chinese or with an
// emoji), while control bytes, DEL, C1 controls (0x9b starts an escape sequence), the marks
// that reorder text (U+202E) or show nothing (U+200B) and bytes of no valid UTF-8 sequence are
// \xNN; at most `limit` bytes, then "...". For a peer's or a file's text in messages.
inline std::string shown_text(const std::string& text, std::size_t limit) {
  std::string out;
  const auto escape = [&out](unsigned char ch) { append_hex_escape(out, ch); };
  const std::size_t shown = text.size() < limit ? text.size() : limit;
  for (std::size_t i = 0; i < shown;) {
    const unsigned char ch = static_cast<unsigned char>(text[i]);
    if (ch < 0x80) {
      if (ch < 0x20 || ch == 0x7f)
        escape(ch);
      else
        out += static_cast<char>(ch);
      ++i;
      continue;
    }
    // A whole, shortest UTF-8 sequence (no surrogate, at most U+10FFFF), and its code point.
    const std::size_t n = ch >= 0xf0 && ch < 0xf5 ? 4 : ch >= 0xe0 ? (ch < 0xf0 ? 3 : 0) : ch >= 0xc2 ? 2 : 0;
    char32_t cp = n == 2 ? ch & 0x1f : n == 3 ? ch & 0x0f : ch & 0x07;
    bool whole = n > 0 && i + n <= shown;
    for (std::size_t k = 1; whole && k < n; ++k) {
      const unsigned char next = static_cast<unsigned char>(text[i + k]);
      whole = (next & 0xc0) == 0x80;
      cp = (cp << 6) | (next & 0x3f);
    }
    whole = whole && !(n == 3 && cp < 0x800) && !(n == 4 && (cp < 0x10000 || cp > 0x10ffff)) &&
            !(cp >= 0xd800 && cp <= 0xdfff);
    const bool hidden = cp < 0xa0 || cp == 0x061c || (cp >= 0x200b && cp <= 0x200f) || (cp >= 0x202a && cp <= 0x202e) ||
                        (cp >= 0x2060 && cp <= 0x2069) || cp == 0xfeff;
    if (!whole) {
      escape(ch);
      ++i;
      continue;
    }
    for (std::size_t k = 0; k < n; ++k) {
      if (hidden)
        escape(static_cast<unsigned char>(text[i + k]));
      else
        out += text[i + k];
    }
    i += n;
  }
  if (shown < text.size()) out += "...";
  return out;
}

// A file's path as a message shows it: shown_text's escapes (a newline in a name split the
// line, and launch took its second half for a line of its own), at any length.
inline std::string shown_path(const std::string& path) { return shown_text(path, path.size()); }

// Why `name` cannot name a tensor in a checkpoint or a --save-final file, or "": a control
// byte (a tab, a line break), a mark that shows nothing or reorders text, or bytes of no valid
// UTF-8 (safetensors' header is JSON, which holds only UTF-8; actorpipe's loader refuses
// control bytes). Printable UTF-8 of any script is fine.
inline std::string unstorable_name_reason(const std::string& name) {
  const std::string shown = shown_text(name, name.size());
  if (shown == name) return "";
  return "'" + shown + "' holds a control character, an invisible mark or bytes of no valid UTF-8 (shown as \\xNN), "
         "which a checkpoint's tensor names may not";
}

}  // namespace actorpipe
