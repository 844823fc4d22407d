// A cheap fingerprint of what a file or folder holds, for processes of one job to compare the
// inputs each reads under its own path (a data file, weights, a vocabulary): the size and a
// SHA-256 of the whole file up to 256 MiB (about half a second), past that of 16 evenly spaced
// 64 KiB pieces: two different files of one such size can tie where they differ between them.
#pragma once

#include <string>

namespace actorpipe {

// "1048576 bytes, digest 3fa2c1d09b7e4a55" for a regular file; for a folder, the regular files
// under it (sorted by relative path, the first 4096) with their names, sizes and pieces:
// "a folder of 3 files, 2048 bytes, digest ..."; "missing" or "unreadable" when it cannot be
// read (the run itself names the path). Never throws.
std::string content_digest(const std::string& path);

// The first 16 hex digits of SHA-256 of `text`.
std::string text_digest(const std::string& text);

}  // namespace actorpipe
