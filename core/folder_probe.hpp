// Whether a folder takes files, found by making one: the permission bits say nothing for root,
// nor for /proc or a read-only mount. `train` checks its output folders with it before a run,
// `actorpipe doctor` its --dir.
#pragma once

#include <cstddef>
#include <filesystem>
#include <string>

namespace actorpipe {

// `path` where it exists (a symbolic link counts, its target or not), else the nearest folder
// above it that does: where a folder still to be made would be made.
std::filesystem::path nearest_existing(const std::filesystem::path& path);

// "is a symbolic link to 'x', which does not exist" for such a link, else "".
std::string dangling_link_text(const std::filesystem::path& path);

// Where writing `path` lands, absolute: its symbolic links followed, a dangling one's too (a
// link to a file not written yet is where the write goes; weakly_canonical stops at it).
std::filesystem::path write_target(const std::string& path);

// "its part 'xxxx...' is N bytes, more than the 255 a name may have" for the first part of
// `path` that no filesystem here takes as a name, else "".
std::string long_name_part(const std::filesystem::path& path);

// For a checkpoint folder at `path` (absolute): "is N bytes as an absolute path: with its
// checkpoints' names below it ... passes the system's limit of PATH_MAX on a path" where the
// files written below it would pass PATH_MAX, else "". train's --save-dir and doctor --dir.
std::string checkpoint_path_too_long(const std::filesystem::path& path);

// `bytes` random bytes as hex: what makes a temporary file's or a run's name its own.
std::string random_hex(std::size_t bytes);

struct folder_probe {
  bool created = false;  // a file could be made in the folder
  std::string error;     // why the file could not be made, or (with `write`) written; "" when all went
};

// Makes a file in `dir`, with `write` writes a byte and fsyncs it, and removes it.
folder_probe probe_folder(const std::filesystem::path& dir, bool write);

}  // namespace actorpipe
