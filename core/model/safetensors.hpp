// Reading and writing tensors in the safetensors format (Hugging Face's: an 8-byte
// little-endian header size, a JSON header, then raw little-endian data), for checkpoints.
#pragma once

#include <cstddef>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "core/model/tensor_box.hpp"

namespace actorpipe {

// Writes `tensors` (any order; names must be unique, non-empty and not "__metadata__") to
// `path`. Header keys and data are in name order. Supported dtypes: F64, F32, F16, BF16,
// I64, I32, I16, I8, U8, BOOL. Writes path + ".tmp", fsyncs it, then renames it over `path`,
// so a crash leaves either the old file or the new one, never half of one. Bad input throws
// std::invalid_argument; a failed write throws std::runtime_error naming the path.
// `written`, when given, sees every byte of the file in order, just before it is written
// (e.g. to hash the file without reading it back); if it throws, the file is removed and the
// exception goes on.
void save_safetensors(const std::string& path, const std::vector<std::pair<std::string, tensor_box>>& tensors,
                      const std::function<void(const char*, std::size_t)>& written = {});

// Reads every tensor of a safetensors file (CPU tensors, in name order; "__metadata__" is
// skipped). Throws std::invalid_argument naming the path when the file is missing,
// truncated or corrupt (bad header size, bad JSON, unknown dtype, offsets out of bounds,
// overlapping or not covering the data section).
std::vector<std::pair<std::string, tensor_box>> load_safetensors(const std::string& path);

// The dtype of `t` as a safetensors header names it ("F32", "I64", ...; LibTorch's own name for
// one the format lacks): what messages about a file's tensors call it.
std::string safetensors_dtype_of(const tensor_box& t);
// Only the tensors `wanted` accepts (the whole header is still checked; the other tensors'
// bytes are not read).
std::vector<std::pair<std::string, tensor_box>> load_safetensors(const std::string& path,
                                                                 const std::function<bool(const std::string&)>& wanted);

}  // namespace actorpipe
