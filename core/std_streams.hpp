// Whether a file an output names is one of this process's own standard streams.
#pragma once

#include <sys/stat.h>

#include <utility>

namespace actorpipe {

// "standard output" or "standard error" where the regular file `st` describes is what that
// stream of this process writes (/dev/stdout, or the file's own name, with stdout redirected
// to it), else nullptr. Written apart at its own offset, an output and the stream overwrite
// each other; through a pipe they take turns, and that is fine.
inline const char* std_stream_writing(const struct stat& st) {
  if (!S_ISREG(st.st_mode)) return nullptr;
  for (const auto& [fd, name] : {std::pair<int, const char*>{1, "standard output"}, {2, "standard error"}}) {
    struct stat open_file {};
    if (::fstat(fd, &open_file) == 0 && open_file.st_dev == st.st_dev && open_file.st_ino == st.st_ino) return name;
  }
  return nullptr;
}

}  // namespace actorpipe
