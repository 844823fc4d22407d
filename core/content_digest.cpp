// content_digest: sizes and sampled SHA-256 pieces of a file or of the files of a folder.
#include "core/content_digest.hpp"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <vector>

#include "core/checkpoint/checkpoint_store.hpp"

namespace actorpipe {
namespace {

namespace fs = std::filesystem;

constexpr std::uintmax_t kPiece = 64 * 1024;
constexpr int kPieces = 16;
constexpr std::uintmax_t kWhole = std::uintmax_t{256} << 20;  // files up to this size are hashed whole
constexpr std::size_t kMaxFiles = 4096;

// The size, then the pieces; false when the file cannot be read.
bool add_file(sha256_stream& h, const fs::path& path, std::uintmax_t size) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return false;
  const std::string head = std::to_string(size) + ":";
  h.update(head.data(), head.size());
  std::vector<char> buf(kPiece);
  auto read_at = [&](std::uintmax_t offset, std::uintmax_t n) {
    f.seekg(static_cast<std::streamoff>(offset));
    f.read(buf.data(), static_cast<std::streamsize>(n));
    if (f.gcount() > 0) h.update(buf.data(), static_cast<std::size_t>(f.gcount()));
    return static_cast<std::uintmax_t>(f.gcount()) == n;
  };
  if (size <= kWhole) {
    for (std::uintmax_t at = 0; at < size; at += kPiece)
      if (!read_at(at, std::min(kPiece, size - at))) return false;
    return true;
  }
  const std::uintmax_t stride = (size - kPiece) / (kPieces - 1);  // first piece at 0, last at the end
  for (int i = 0; i < kPieces; ++i)
    if (!read_at(static_cast<std::uintmax_t>(i) * stride, kPiece)) return false;
  return true;
}

}  // namespace

std::string text_digest(const std::string& text) {
  sha256_stream h;
  h.update(text.data(), text.size());
  return h.hex().substr(0, 16);
}

std::string content_digest(const std::string& path) {
  std::error_code ec;
  const fs::file_status st = fs::status(path, ec);
  if (ec || !fs::exists(st)) return "missing";
  sha256_stream h;
  if (fs::is_regular_file(st)) {
    const std::uintmax_t size = fs::file_size(path, ec);
    if (ec || !add_file(h, path, size)) return "unreadable";
    return std::to_string(size) + " bytes, digest " + h.hex().substr(0, 16);
  }
  if (!fs::is_directory(st)) return "not a regular file or folder";
  std::vector<std::pair<std::string, std::uintmax_t>> files;
  for (fs::recursive_directory_iterator it(path, fs::directory_options::skip_permission_denied, ec), end; !ec && it != end;
       it.increment(ec)) {
    std::error_code e;
    if (!it->is_regular_file(e)) continue;
    files.emplace_back(fs::relative(it->path(), path, e).string(), it->file_size(e));
  }
  if (ec) return "unreadable";
  std::sort(files.begin(), files.end());
  if (files.size() > kMaxFiles) files.resize(kMaxFiles);
  std::uintmax_t total = 0;
  for (const auto& [name, size] : files) {
    h.update(name.data(), name.size() + 1);  // with its terminating NUL: names cannot run into sizes
    if (!add_file(h, fs::path(path) / name, size)) return "unreadable";
    total += size;
  }
  return "a folder of " + std::to_string(files.size()) + " files, " + std::to_string(total) + " bytes, digest " +
         h.hex().substr(0, 16);
}

}  // namespace actorpipe
