// An exception's message for a person: LibTorch's errors (c10::Error) carry a C++ backtrace of
// ~40 frames in what(), which buries the one line that says what went wrong ("can't allocate
// memory: you tried to allocate 7200000000 bytes"). Torch-free: the actors and the CLI call it.
#pragma once

#include <exception>
#include <string>

namespace actorpipe {

// e.what(), without the backtrace when e is a c10::Error.
std::string error_text(const std::exception& e);

}  // namespace actorpipe
