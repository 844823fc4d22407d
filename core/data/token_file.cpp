// Token sources backed by a file: flat little-endian uint16 tokens (the nanoGPT / Megatron .bin
// convention) or raw bytes of a text file. The file is memory-mapped read-only and checked once.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <string>

#include "core/data/splitmix64.hpp"
#include "core/data/token_source.hpp"

namespace actorpipe {

namespace {


[[noreturn]] void fail(const std::string& path, const std::string& what) {
  throw std::invalid_argument("data file '" + path + "' " + what);
}

// A read-only mapping of a whole file, unmapped on destruction. An empty file has no mapping.
class mapped_file {
 public:
  explicit mapped_file(const std::string& path) {
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0) {
      if (errno == ENOENT || errno == ENOTDIR) fail(path, "does not exist");
      fail(path, std::string("cannot be read: ") + std::strerror(errno));
    }
    if (!S_ISREG(st.st_mode)) fail(path, "is not a regular file");
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) fail(path, std::string("cannot be read: ") + std::strerror(errno));
    struct stat fst {};
    if (::fstat(fd, &fst) != 0) {
      const int err = errno;
      ::close(fd);
      fail(path, std::string("cannot be read: ") + std::strerror(err));
    }
    size_ = static_cast<std::size_t>(fst.st_size);
    if (size_ > 0) {
      void* p = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
      const int err = errno;
      ::close(fd);  // the mapping keeps the file alive
      if (p == MAP_FAILED) fail(path, std::string("cannot be memory-mapped: ") + std::strerror(err));
      data_ = static_cast<const unsigned char*>(p);
    } else {
      ::close(fd);
    }
  }
  ~mapped_file() {
    if (data_ != nullptr) ::munmap(const_cast<unsigned char*>(data_), size_);
  }
  mapped_file(const mapped_file&) = delete;
  mapped_file& operator=(const mapped_file&) = delete;

  const unsigned char* data() const { return data_; }
  std::size_t size() const { return size_; }

 private:
  const unsigned char* data_ = nullptr;
  std::size_t size_ = 0;
};

// token_bytes = 2: little-endian uint16 tokens; token_bytes = 1: one token per byte.
//
// Offset rule: sample `index` of step `step` is the seq_len + 1 tokens starting at
//   offset = splitmix64(splitmix64(step) ^ index) % (n - seq_len)
// where n is the file's token count and splitmix64 is the standard finaliser (Steele et al.),
// so offset is in [0, n - seq_len - 1] and the last token read is at most n - 1. Samples overlap
// and repeat at random, as in nanoGPT's get_batch, but as a pure function of (step, index).
class file_source final : public token_source {
 public:
  file_source(const std::string& path, int vocab, std::int64_t min_tokens, int token_bytes)
      : path_(path), vocab_(vocab), token_bytes_(token_bytes), file_(path) {
    if (file_.size() % token_bytes_ != 0)
      fail(path_, "has " + std::to_string(file_.size()) + " bytes: not a whole number of uint16 tokens");
    tokens_ = static_cast<std::int64_t>(file_.size() / token_bytes_);
    if (tokens_ < min_tokens)
      fail(path_, "holds " + std::to_string(tokens_) + " tokens; at least min_tokens=" + std::to_string(min_tokens) +
                      " are needed (one sample is seq_len + 1 tokens)");
    // Check every token once here, so sequence() never has to and a bad file fails at start-up
    // instead of mid-run.
    if (token_bytes_ == 2 && vocab_ < 65536) {
      const unsigned char* b = file_.data();
      for (std::int64_t i = 0; i < tokens_; ++i) {
        const int tok = b[2 * i] | (b[2 * i + 1] << 8);
        if (tok >= vocab_)
          fail(path_, "token " + std::to_string(tok) + " at position " + std::to_string(i) + " is >= vocab " +
                          std::to_string(vocab_));
      }
    }
    if (file_.data() != nullptr) ::madvise(const_cast<unsigned char*>(file_.data()), file_.size(), MADV_RANDOM);
  }

  int vocab() const override { return vocab_; }

  void sequence(std::uint64_t step, std::uint64_t index, int seq_len, std::int32_t* out) const override {
    if (seq_len < 1) throw std::invalid_argument("seq_len must be >= 1: got seq_len=" + std::to_string(seq_len));
    if (out == nullptr) throw std::invalid_argument("data file '" + path_ + "': out must not be null");
    if (static_cast<std::int64_t>(seq_len) + 1 > tokens_)
      fail(path_, "holds " + std::to_string(tokens_) + " tokens; seq_len " + std::to_string(seq_len) +
                      " needs at least " + std::to_string(static_cast<std::int64_t>(seq_len) + 1));
    const std::uint64_t span = static_cast<std::uint64_t>(tokens_ - seq_len);
    const std::uint64_t offset = splitmix64(splitmix64(step) ^ index) % span;
    const unsigned char* b = file_.data();
    if (token_bytes_ == 2) {
      // Byte by byte: independent of host endianness and of the mapping's alignment.
      for (int i = 0; i <= seq_len; ++i) {
        const std::uint64_t p = 2 * (offset + i);
        out[i] = b[p] | (b[p + 1] << 8);
      }
    } else {
      for (int i = 0; i <= seq_len; ++i) out[i] = b[offset + i];
    }
  }

  std::string describe() const override {
    return std::string(token_bytes_ == 2 ? "uint16 token file" : "text file read as bytes") + " '" + path_ + "' (" +
           std::to_string(tokens_) + " tokens, vocab " + std::to_string(vocab_) + ")";
  }

 private:
  std::string path_;
  int vocab_;
  int token_bytes_;
  mapped_file file_;
  std::int64_t tokens_ = 0;
};

void check_min_tokens(std::int64_t min_tokens) {
  if (min_tokens < 0)
    throw std::invalid_argument("min_tokens must be >= 0: got min_tokens=" + std::to_string(min_tokens));
}

}  // namespace

std::unique_ptr<token_source> open_token_file(const std::string& path, int vocab, std::int64_t min_tokens) {
  if (vocab < 1) throw std::invalid_argument("vocab must be >= 1: got vocab=" + std::to_string(vocab));
  check_min_tokens(min_tokens);
  return std::make_unique<file_source>(path, vocab, min_tokens, 2);
}

std::unique_ptr<token_source> open_text_file(const std::string& path, std::int64_t min_tokens) {
  check_min_tokens(min_tokens);
  return std::make_unique<file_source>(path, 256, min_tokens, 1);
}

}  // namespace actorpipe
