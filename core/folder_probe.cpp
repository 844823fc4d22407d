#include "core/folder_probe.hpp"

#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <random>

namespace actorpipe {

std::filesystem::path write_target(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::path x = fs::absolute(path, ec);
  for (int hops = 0; hops < 40; ++hops) {  // as the kernel's limit on a chain of links
    const fs::path parent = fs::weakly_canonical(x.parent_path(), ec);
    x = parent / x.filename();
    if (!fs::is_symlink(fs::symlink_status(x, ec))) break;
    const fs::path to = fs::read_symlink(x, ec);
    if (ec) break;
    x = to.is_absolute() ? to : parent / to;
  }
  return fs::weakly_canonical(x, ec);
}

std::filesystem::path nearest_existing(const std::filesystem::path& path) {
  std::error_code ec;
  std::filesystem::path at = path;
  // A link whose target is missing is there too: nothing can be made under its name.
  while (!std::filesystem::exists(std::filesystem::symlink_status(at, ec)) && at.has_parent_path() &&
         at.parent_path() != at)
    at = at.parent_path();
  return at;
}

std::string dangling_link_text(const std::filesystem::path& path) {
  std::error_code ec;
  if (!std::filesystem::is_symlink(std::filesystem::symlink_status(path, ec)) || std::filesystem::exists(path, ec))
    return "";
  const std::filesystem::path target = std::filesystem::read_symlink(path, ec);
  return "is a symbolic link to '" + (ec ? std::string("?") : target.string()) + "', which does not exist";
}

std::string long_name_part(const std::filesystem::path& path) {
  for (const auto& part : path)
    if (part.string().size() > 255)
      return "its part '" + part.string().substr(0, 24) + "...' is " + std::to_string(part.string().size()) +
             " bytes, more than the 255 a name may have";
  return "";
}

std::string checkpoint_path_too_long(const std::filesystem::path& path) {
  constexpr std::size_t checkpoint_names = 128;  // a write in flight's folder and its files, below it
  const std::size_t size = path.string().size();
  if (size + checkpoint_names <= PATH_MAX) return "";
  return "is " + std::to_string(size) + " bytes as an absolute path: with its checkpoints' names below it (up to " +
         std::to_string(checkpoint_names) + " more) it passes the system's limit of " + std::to_string(PATH_MAX) +
         " on a path";
}

std::string random_hex(std::size_t bytes) {
  std::random_device device;
  std::string out;
  out.reserve(2 * bytes);
  for (std::size_t i = 0; i < bytes; ++i) {
    const unsigned b = device() & 0xff;
    out += "0123456789abcdef"[b >> 4];
    out += "0123456789abcdef"[b & 15];
  }
  return out;
}

folder_probe probe_folder(const std::filesystem::path& dir, bool write) {
  folder_probe probe;
  std::string name = (dir / ".actorpipe-probe-XXXXXX").string();
  const int fd = ::mkstemp(name.data());
  if (fd < 0) {
    probe.error = std::strerror(errno);
    return probe;
  }
  probe.created = true;
  if (write && !(::write(fd, "x", 1) == 1 && ::fsync(fd) == 0)) probe.error = std::strerror(errno);
  ::close(fd);
  ::unlink(name.c_str());
  return probe;
}

}  // namespace actorpipe
