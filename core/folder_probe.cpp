#include "core/folder_probe.hpp"

#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

namespace actorpipe {

std::filesystem::path nearest_existing(const std::filesystem::path& path) {
  std::error_code ec;
  std::filesystem::path at = path;
  while (!std::filesystem::exists(at, ec) && at.has_parent_path() && at.parent_path() != at) at = at.parent_path();
  return at;
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
