// safetensors reader and writer: strict header validation on load, atomic replace on save.
#include "core/model/safetensors.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <map>
#include <set>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "core/folder_probe.hpp"
#include "core/json_shape.hpp"
#include "core/model/tensor_box_torch.hpp"
#include "core/text_file.hpp"

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "safetensors data is little-endian; this writer copies host memory as is");

namespace actorpipe {
namespace {

// The Rust reference implementation refuses headers above 100 MB; so do we, so a corrupt
// size field cannot make us allocate gigabytes.
constexpr std::uint64_t max_header_bytes = 100ull * 1000 * 1000;

struct dtype_entry {
  const char* name;
  at::ScalarType type;
};

const dtype_entry dtype_table[] = {
    {"F64", at::kDouble}, {"F32", at::kFloat}, {"F16", at::kHalf}, {"BF16", at::kBFloat16}, {"I64", at::kLong},
    {"I32", at::kInt},    {"I16", at::kShort}, {"I8", at::kChar},  {"U8", at::kByte},       {"BOOL", at::kBool},
};

const char* dtype_name(at::ScalarType t) {
  for (const auto& e : dtype_table) {
    if (e.type == t) return e.name;
  }
  return nullptr;
}

bool dtype_from_name(const std::string& name, at::ScalarType* out) {
  for (const auto& e : dtype_table) {
    if (name == e.name) {
      *out = e.type;
      return true;
    }
  }
  return false;
}

std::string in_file(const std::string& path) { return "safetensors file '" + path + "'"; }

// save_safetensors' file before its rename: .actorpipe-write-<host>-<pid>-<random>.
constexpr const char* write_prefix = ".actorpipe-write-";

// This host, as 8 hex digits (a folder shared by several machines: another host's writes are
// never taken for this one's).
std::string host_tag() {
  char host[256] = {0};
  ::gethostname(host, sizeof host - 1);
  std::uint32_t h = 2166136261u;  // FNV-1a
  for (const char* c = host; *c; ++c) h = (h ^ static_cast<unsigned char>(*c)) * 16777619u;
  char text[16];
  std::snprintf(text, sizeof text, "%08x", h);
  return text;
}

// Removes the files of this host's processes that ended while they saved into `folder`.
void remove_writes_of_gone_processes(const std::filesystem::path& folder) {
  std::error_code ec;
  const std::string ours = std::string(write_prefix) + host_tag() + "-";
  for (const auto& e : std::filesystem::directory_iterator(folder, ec)) {
    const std::string name = e.path().filename().string();
    if (name.rfind(ours, 0) != 0) continue;
    const long pid = std::strtol(name.c_str() + ours.size(), nullptr, 10);
    if (pid > 0 && ::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH) std::filesystem::remove(e.path(), ec);
  }
}

void write_all(int fd, const char* data, std::size_t n, const std::string& tmp) {
  while (n > 0) {
    const ssize_t w = ::write(fd, data, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      const std::string why = std::strerror(errno);
      ::close(fd);
      ::unlink(tmp.c_str());
      throw std::runtime_error("cannot write '" + tmp + "': " + why);
    }
    data += w;
    n -= static_cast<std::size_t>(w);
  }
}

}  // namespace

void save_safetensors(const std::string& path, const std::vector<std::pair<std::string, tensor_box>>& tensors,
                      const std::function<void(const char*, std::size_t)>& written) {
  if (path.empty()) throw std::invalid_argument("save_safetensors: path is empty");
  std::map<std::string, at::Tensor> by_name;  // sorted: header keys and data in name order
  for (const auto& [name, boxed] : tensors) {
    if (name.empty()) throw std::invalid_argument("save_safetensors('" + path + "'): a tensor has an empty name");
    if (name == "__metadata__") {
      throw std::invalid_argument("save_safetensors('" + path + "'): the name '__metadata__' is reserved");
    }
    const at::Tensor& t = unbox(boxed);
    if (!t.defined()) throw std::invalid_argument("save_safetensors('" + path + "'): tensor '" + name + "' is undefined");
    if (!dtype_name(t.scalar_type())) {
      throw std::invalid_argument("save_safetensors('" + path + "'): tensor '" + name + "' has unsupported dtype " +
                                  std::string(c10::toString(t.scalar_type())));
    }
    if (!by_name.emplace(name, t.detach().to(at::kCPU).contiguous()).second) {
      throw std::invalid_argument("save_safetensors('" + path + "'): duplicate tensor name '" + name + "'");
    }
  }

  nlohmann::json header = nlohmann::json::object();
  std::uint64_t offset = 0;
  for (const auto& [name, t] : by_name) {
    const std::uint64_t n = t.nbytes();
    header[name] = {{"dtype", dtype_name(t.scalar_type())},
                    {"shape", std::vector<std::int64_t>(t.sizes().begin(), t.sizes().end())},
                    {"data_offsets", {offset, offset + n}}};
    offset += n;
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // pad so the data starts 8-byte aligned
  const std::uint64_t header_size = text.size();
  char size_bytes[8];
  for (int i = 0; i < 8; ++i) size_bytes[i] = static_cast<char>((header_size >> (8 * i)) & 0xff);

  // Written aside and renamed into place: a device, pipe or socket there would be replaced.
  if (struct stat st {}; ::stat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode))
    throw std::runtime_error("'" + path + "' exists and is not a regular file: safetensors are written beside it and "
                             "renamed into place, which would replace it");
  // Through a symbolic link the file it names is replaced, as a write through it would be (the
  // rename replaced the link itself with a file, and the file it named kept its old contents).
  std::error_code ec;
  const std::string dest = std::filesystem::is_symlink(std::filesystem::symlink_status(path, ec)) ? write_target(path).string() : path;
  if (dest.empty())
    throw std::runtime_error("'" + path + "' is a symbolic link that leads nowhere (a loop of links): give a file name");
  // A name of its own beside it, made here and nowhere else (O_EXCL, not through a link):
  // `dest.tmp` was shared by two runs saving to one path (the file came out half one run's,
  // half the other's), went through a link there to another file, replaced a user's own
  // file of that name, and passed NAME_MAX where dest's name was near it.
  // Its name says whose it is (this host, this process): one of a process that is gone (killed
  // while it saved) is removed by the next save into that folder.
  const std::string suffix = host_tag() + "-" + std::to_string(::getpid()) + "-" + random_hex(4);
  const std::filesystem::path folder =
      std::filesystem::path(dest).parent_path().empty() ? std::filesystem::path(".") : std::filesystem::path(dest).parent_path();
  remove_writes_of_gone_processes(folder);
  const std::string tmp = folder.string() + "/" + write_prefix + suffix;
  // An existing file keeps its permissions (a private 0600 one came back 0644).
  struct stat before {};
  const mode_t mode = ::stat(dest.c_str(), &before) == 0 && S_ISREG(before.st_mode) ? (before.st_mode & 07777) : 0644;
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode);
  if (fd < 0) throw std::runtime_error("cannot create '" + tmp + "' (written there, then renamed to '" + dest + "'): " +
                                       std::strerror(errno));
  if (mode != 0644) (void)::fchmod(fd, mode);  // past the umask
  // Pieces of at most 8 MiB, each shown to `written` before it goes to the file (so a hash of
  // one piece overlaps the kernel's writeback of the ones before).
  // A `written` that throws (its caller gave the file up) closes and removes it, as a failed write does.
  auto put = [&](const char* data, std::size_t n) {
    constexpr std::size_t piece = std::size_t{8} << 20;
    for (std::size_t at = 0; at < n; at += piece) {
      const std::size_t k = std::min(piece, n - at);
      if (written) {
        try {
          written(data + at, k);
        } catch (...) {
          ::close(fd);
          ::unlink(tmp.c_str());
          throw;
        }
      }
      write_all(fd, data + at, k, tmp);
    }
  };
  put(size_bytes, sizeof size_bytes);
  put(text.data(), text.size());
  for (const auto& entry : by_name) put(static_cast<const char*>(entry.second.data_ptr()), entry.second.nbytes());
  // Data on disk before the rename makes it visible under `path`.
  if (::fsync(fd) != 0 || ::close(fd) != 0) {
    const std::string why = std::strerror(errno);
    ::unlink(tmp.c_str());
    throw std::runtime_error("cannot flush '" + tmp + "': " + why);
  }
  if (std::rename(tmp.c_str(), dest.c_str()) != 0) {
    const std::string why = std::strerror(errno);
    ::unlink(tmp.c_str());
    throw std::runtime_error("cannot rename '" + tmp + "' to '" + dest + "': " + why);
  }
}

std::vector<std::pair<std::string, tensor_box>> load_safetensors(const std::string& path) {
  return load_safetensors(path, {});
}

std::vector<std::pair<std::string, tensor_box>> load_safetensors(const std::string& path,
                                                                 const std::function<bool(const std::string&)>& wanted) {
  if (struct stat st {}; ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode))
    throw std::invalid_argument(in_file(path) + " is a directory: give the file");
  std::error_code ec;
  if (std::filesystem::exists(path, ec) && !std::filesystem::is_regular_file(path, ec))
    throw std::invalid_argument("cannot read " + in_file(path) + ": it is not a regular file (a directory, device or pipe)");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::invalid_argument("cannot open " + in_file(path) + ": " + std::strerror(errno));
  in.seekg(0, std::ios::end);
  const auto end_pos = in.tellg();
  in.seekg(0, std::ios::beg);
  if (!in || end_pos < 0) throw std::invalid_argument("cannot read " + in_file(path));
  const std::uint64_t file_size = static_cast<std::uint64_t>(end_pos);
  auto read_at = [&](std::uint64_t at, char* into, std::uint64_t n) {
    in.seekg(static_cast<std::streamoff>(at));
    in.read(into, static_cast<std::streamsize>(n));
    if (!in) throw std::invalid_argument("cannot read " + in_file(path));
  };

  if (file_size < 8) {
    throw std::invalid_argument(in_file(path) + " is truncated: " + std::to_string(file_size) +
                                " bytes, shorter than the 8-byte header size");
  }
  char size_bytes[8];
  read_at(0, size_bytes, 8);
  std::uint64_t header_size = 0;
  for (int i = 7; i >= 0; --i) header_size = (header_size << 8) | static_cast<unsigned char>(size_bytes[i]);
  if (header_size > max_header_bytes) {
    // What else a model download holds: PyTorch's pytorch_model.bin (a zip archive, or an old
    // pickle) and a sharded checkpoint's index (JSON); they read as a huge header size.
    if (std::string(size_bytes, 4) == std::string("PK\x03\x04", 4) || static_cast<unsigned char>(size_bytes[0]) == 0x80)
      throw std::invalid_argument(in_file(path) + " is not a safetensors file but PyTorch's own format (pytorch_model.bin: " +
                                  "a zip archive or a pickle): give the model.safetensors of the download, or convert it "
                                  "(safetensors.torch.save_file)");
    if (size_bytes[0] == '{')
      throw std::invalid_argument(in_file(path) + " is not a safetensors file but JSON (a sharded checkpoint's "
                                  "model.safetensors.index.json?): give one file that holds every tensor");
    throw std::invalid_argument(in_file(path) + " is corrupt: header size " + std::to_string(header_size) +
                                " exceeds the " + std::to_string(max_header_bytes) + "-byte limit");
  }
  if (header_size > file_size - 8) {
    throw std::invalid_argument(in_file(path) + " is truncated: header size " + std::to_string(header_size) +
                                " but only " + std::to_string(file_size - 8) + " bytes follow");
  }
  std::string header_text(header_size, '\0');
  read_at(8, header_text.data(), header_size);
  // A name given twice: the parser keeps the last, and the error was the hole the first left
  // ("starts at data byte 400128, expected 399872"). Nesting past a bound overflowed the stack
  // where a bad entry was printed.
  if (const json_shape shape = check_json_shape(header_text); shape.twice_depth == 1)
    throw std::invalid_argument(in_file(path) + " is corrupt: its header names '" + shown_text(shape.twice, 200) + "' twice");
  else if (!shape.problem.empty())
    throw std::invalid_argument(in_file(path) + " is corrupt: its header " + shape.problem);
  nlohmann::json header;
  try {
    header = nlohmann::json::parse(header_text);
  } catch (const nlohmann::json::exception& e) {
    // Its bytes quoted as \xNN: a byte that is not UTF-8 went to the terminal raw.
    throw std::invalid_argument(in_file(path) + " is corrupt: header is not valid JSON (" + printable_text(e.what(), 400) +
                                ")");
  }
  if (!header.is_object()) throw std::invalid_argument(in_file(path) + " is corrupt: header is not a JSON object");

  const std::uint64_t data_at = 8 + header_size;
  const std::uint64_t data_size = file_size - data_at;
  struct entry {
    std::string name;
    at::ScalarType type;
    std::vector<std::int64_t> shape;
    std::uint64_t begin;
    std::uint64_t end;
  };
  std::vector<entry> entries;
  for (const auto& [name, info] : header.items()) {
    if (name == "__metadata__") continue;
    // Names go into messages: one with a terminal's control bytes (ESC) is no tensor's.
    if (has_control_bytes(name))
      throw std::invalid_argument(in_file(path) + " is corrupt: a tensor's name holds control characters ('" +
                                  printable_text(name) + "')");
    const std::string bad = in_file(path) + " is corrupt: tensor '" + shown_text(name, 200) + "' ";
    if (!info.is_object()) throw std::invalid_argument(bad + "is not a JSON object");
    entry e{name, at::kFloat, {}, 0, 0};
    const auto dtype = info.find("dtype");
    if (dtype == info.end() || !dtype->is_string() || !dtype_from_name(dtype->get<std::string>(), &e.type)) {
      throw std::invalid_argument(bad + "has a missing or unsupported dtype" +
                                  (dtype != info.end() ? " " + shown_text(dtype->dump(), 80) : std::string()));
    }
    const auto shape = info.find("shape");
    if (shape == info.end() || !shape->is_array()) throw std::invalid_argument(bad + "has no shape array");
    std::uint64_t expected = c10::elementSize(e.type);
    for (const auto& d : *shape) {
      if (!d.is_number_unsigned()) throw std::invalid_argument(bad + "has a bad dimension " + d.dump());
      const auto dim = d.get<std::uint64_t>();
      if (dim > static_cast<std::uint64_t>(INT64_MAX) || __builtin_mul_overflow(expected, dim, &expected)) {
        throw std::invalid_argument(bad + "has an impossibly large shape " + shape->dump());
      }
      e.shape.push_back(static_cast<std::int64_t>(dim));
    }
    const auto offsets = info.find("data_offsets");
    if (offsets == info.end() || !offsets->is_array() || offsets->size() != 2 || !(*offsets)[0].is_number_unsigned() ||
        !(*offsets)[1].is_number_unsigned()) {
      throw std::invalid_argument(bad + "needs data_offsets [begin, end] of non-negative integers");
    }
    e.begin = (*offsets)[0].get<std::uint64_t>();
    e.end = (*offsets)[1].get<std::uint64_t>();
    if (e.begin > e.end) {
      throw std::invalid_argument(bad + "has data_offsets " + offsets->dump() + " with begin after end");
    }
    if (e.end > data_size) {
      throw std::invalid_argument(in_file(path) + " is truncated: tensor '" + name + "' ends at data byte " +
                                  std::to_string(e.end) + " but the data section has " + std::to_string(data_size) +
                                  " bytes");
    }
    if (e.end - e.begin != expected) {
      throw std::invalid_argument(bad + "spans " + std::to_string(e.end - e.begin) + " bytes but dtype and shape " +
                                  shape->dump() + " need " + std::to_string(expected));
    }
    entries.push_back(std::move(e));
  }

  // The tensors must tile the data section exactly: no overlap, no hole, nothing after.
  std::vector<const entry*> by_offset;
  for (const auto& e : entries) by_offset.push_back(&e);
  std::sort(by_offset.begin(), by_offset.end(), [](const entry* a, const entry* b) {
    return a->begin != b->begin ? a->begin < b->begin : a->end < b->end;
  });
  std::uint64_t covered = 0;
  for (const entry* e : by_offset) {
    if (e->begin != covered) {
      throw std::invalid_argument(in_file(path) + " is corrupt: tensor '" + e->name + "' starts at data byte " +
                                  std::to_string(e->begin) + ", expected " + std::to_string(covered) +
                                  (e->begin < covered ? " (overlap)" : " (hole)"));
    }
    covered = e->end;
  }
  if (covered != data_size) {
    throw std::invalid_argument(in_file(path) + " is corrupt: " + std::to_string(data_size - covered) +
                                " bytes after the last tensor");
  }

  std::vector<std::pair<std::string, tensor_box>> out;
  out.reserve(entries.size());
  for (const auto& e : entries) {
    if (wanted && !wanted(e.name)) continue;
    at::Tensor t = at::empty(e.shape, at::TensorOptions().dtype(e.type));
    if (e.end > e.begin) read_at(data_at + e.begin, static_cast<char*>(t.data_ptr()), e.end - e.begin);
    out.emplace_back(e.name, box(std::move(t)));
  }
  return out;
}

std::string safetensors_dtype_of(const tensor_box& t) {
  const at::ScalarType type = unbox(t).scalar_type();
  const char* name = dtype_name(type);
  return name ? name : std::string(c10::toString(type));
}

}  // namespace actorpipe
