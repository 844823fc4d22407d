// Token sources backed by a file: flat little-endian uint16 tokens (the nanoGPT / Megatron .bin
// convention) or raw bytes of a text file. The file is read at offsets and checked once.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/data/splitmix64.hpp"
#include "core/data/token_source.hpp"

namespace actorpipe {

namespace {


[[noreturn]] void fail(const std::string& path, const std::string& what) {
  throw std::invalid_argument("data file '" + path + "' " + what);
}

// A file open for reading at offsets (pread: thread-safe), its size as it was opened. Not a
// memory mapping: a file cut short while a run reads it (nanoGPT's prepare script writing
// train.bin again) made a mapped read fault (SIGBUS); a short read here is an error naming it.
class open_file {
 public:
  explicit open_file(const std::string& path) : path_(path) {
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0) {
      if (errno == ENOENT || errno == ENOTDIR) fail(path, "does not exist");
      fail(path, std::string("cannot be read: ") + std::strerror(errno));
    }
    if (!S_ISREG(st.st_mode)) fail(path, "is not a regular file");
    fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd_ < 0) fail(path, std::string("cannot be read: ") + std::strerror(errno));
    struct stat fst {};
    if (::fstat(fd_, &fst) != 0) {
      const int err = errno;
      ::close(fd_);
      fail(path, std::string("cannot be read: ") + std::strerror(err));
    }
    size_ = static_cast<std::size_t>(fst.st_size);
  }
  ~open_file() {
    if (fd_ >= 0) ::close(fd_);
  }
  open_file(const open_file&) = delete;
  open_file& operator=(const open_file&) = delete;

  std::size_t size() const { return size_; }

  // `n` bytes at `offset` into `out`; throws naming the file when they are no longer there.
  void read(std::size_t offset, std::size_t n, unsigned char* out) const {
    std::size_t got = 0;
    while (got < n) {
      const ssize_t r = ::pread(fd_, out + got, n - got, static_cast<off_t>(offset + got));
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0)
        throw std::runtime_error("data file '" + path_ + "' cannot be read at byte " + std::to_string(offset + got) +
                                 (r < 0 ? std::string(": ") + std::strerror(errno)
                                        : std::string(": it is shorter than the ") + std::to_string(size_) +
                                              " bytes it held when the run began (written again while training?)"));
      got += static_cast<std::size_t>(r);
    }
  }

 private:
  std::string path_;
  int fd_ = -1;
  std::size_t size_ = 0;
};

// token_bytes = 2: little-endian uint16 tokens; token_bytes = 1: one token per byte.
//
// Offset rule: sample `index` of step `step` is the seq_len + 1 tokens starting at
//   offset = splitmix64(splitmix64(step) ^ index ^ seed_term) % (n - seq_len)
//   seed_term = splitmix64(seed) ^ splitmix64(1234)
// where n is the file's token count (less a held-out tail) and splitmix64 is the standard
// finaliser (Steele et al.), so offset is in [0, n - seq_len - 1] and the last token read is at
// most n - 1. Samples overlap and repeat at random, as in nanoGPT's get_batch, but as a pure
// function of (seed, step, index). The default seed, 1234, has seed_term 0: the windows of
// releases before the seed counted (a run they began resumes on the same data).
class file_source final : public token_source {
 public:
  file_source(const std::string& path, int vocab, std::int64_t min_tokens, int token_bytes, std::uint64_t seed,
              std::int64_t held_out)
      : path_(path), vocab_(vocab), token_bytes_(token_bytes), seed_term_(splitmix64(seed) ^ splitmix64(1234)), file_(path) {
    if (file_.size() % token_bytes_ != 0)
      fail(path_, "has " + std::to_string(file_.size()) + " bytes: not a whole number of uint16 tokens");
    tokens_ = static_cast<std::int64_t>(file_.size() / token_bytes_);
    if (tokens_ < min_tokens)
      fail(path_, "holds " + std::to_string(tokens_) + " tokens; at least " + std::to_string(min_tokens) +
                      " are needed (one sample is seq_len + 1 tokens)");
    train_tokens_ = tokens_;
    if (held_out > 0) {
      if (held_out > tokens_ - min_tokens || held_out < min_tokens)
        fail(path_, "holds " + std::to_string(tokens_) + " tokens: holding out its last " + std::to_string(held_out) +
                        " leaves " + std::to_string(std::max<std::int64_t>(tokens_ - held_out, 0)) +
                        " to train on; each part needs at least " + std::to_string(min_tokens) +
                        " (one sample is seq_len + 1 tokens)");
      train_tokens_ = tokens_ - held_out;
      eval_begin_ = train_tokens_;
    }
    // Check every token once here, so sequence() never has to and a bad file fails at start-up
    // instead of mid-run.
    if (token_bytes_ == 2 && vocab_ < 65536) {
      std::vector<unsigned char> chunk(std::size_t{1} << 20);
      for (std::size_t at = 0; at < file_.size(); at += chunk.size()) {
        const std::size_t n = std::min(chunk.size(), file_.size() - at);
        file_.read(at, n, chunk.data());
        for (std::size_t j = 0; j + 1 < n; j += 2) {
          const int tok = chunk[j] | (chunk[j + 1] << 8);
          if (tok >= vocab_)
            throw token_out_of_vocab("data file '" + path_ + "' token " + std::to_string(tok) + " at position " +
                                     std::to_string((at + j) / 2) + " is >= vocab " + std::to_string(vocab_));
        }
      }
    }
  }

  int vocab() const override { return vocab_; }

  void sequence(std::uint64_t step, std::uint64_t index, int seq_len, std::int32_t* out) const override {
    if (seq_len < 1) throw std::invalid_argument("seq_len must be >= 1: got seq_len=" + std::to_string(seq_len));
    if (out == nullptr) throw std::invalid_argument("data file '" + path_ + "': out must not be null");
    if (static_cast<std::int64_t>(seq_len) + 1 > train_tokens_)
      fail(path_, "holds " + std::to_string(train_tokens_) + (eval_begin_ > 0 ? " tokens before its held-out tail" : " tokens") +
                      "; seq_len " + std::to_string(seq_len) + " needs at least " +
                      std::to_string(static_cast<std::int64_t>(seq_len) + 1));
    const std::uint64_t span = static_cast<std::uint64_t>(train_tokens_ - seq_len);
    read_window(splitmix64(splitmix64(step) ^ index ^ seed_term_) % span, seq_len, out);
  }

  void eval_sequence(std::uint64_t index, int seq_len, std::int32_t* out) const override {
    if (seq_len < 1) throw std::invalid_argument("seq_len must be >= 1: got seq_len=" + std::to_string(seq_len));
    if (out == nullptr) throw std::invalid_argument("data file '" + path_ + "': out must not be null");
    const std::uint64_t n = eval_sequences(seq_len);
    if (index >= n)
      throw std::out_of_range("data file '" + path_ + "' has " + std::to_string(n) + " evaluation windows of " +
                              std::to_string(seq_len) + " tokens: no window " + std::to_string(index));
    read_window(static_cast<std::uint64_t>(eval_begin_) + index * static_cast<std::uint64_t>(seq_len), seq_len, out);
  }
  std::uint64_t eval_sequences(int seq_len) const override {
    const std::int64_t eval_tokens = tokens_ - eval_begin_;
    if (seq_len < 1 || eval_tokens < 1) return 0;
    return static_cast<std::uint64_t>(eval_tokens - 1) / static_cast<std::uint64_t>(seq_len);
  }

  std::string describe() const override {
    return std::string(token_bytes_ == 2 ? "uint16 token file" : "text file read as bytes") + " '" + path_ + "' (" +
           std::to_string(tokens_) + " tokens, vocab " + std::to_string(vocab_) +
           (eval_begin_ > 0 ? "; training reads its first " + std::to_string(train_tokens_) + ", its last " +
                                  std::to_string(tokens_ - eval_begin_) + " are held out"
                            : std::string()) +
           ")";
  }

 private:
  // The seq_len + 1 tokens from token `offset` on (offset + seq_len < tokens_).
  void read_window(std::uint64_t offset, int seq_len, std::int32_t* out) const {
    std::vector<unsigned char> b(static_cast<std::size_t>(seq_len + 1) * static_cast<std::size_t>(token_bytes_));
    file_.read(static_cast<std::size_t>(offset) * static_cast<std::size_t>(token_bytes_), b.size(), b.data());
    if (token_bytes_ == 2) {
      // Byte by byte: independent of host endianness.
      for (int i = 0; i <= seq_len; ++i) out[i] = b[2 * static_cast<std::size_t>(i)] | (b[2 * static_cast<std::size_t>(i) + 1] << 8);
    } else {
      for (int i = 0; i <= seq_len; ++i) out[i] = b[static_cast<std::size_t>(i)];
    }
  }

  std::string path_;
  int vocab_;
  int token_bytes_;
  std::uint64_t seed_term_;
  open_file file_;
  std::int64_t tokens_ = 0;
  std::int64_t train_tokens_ = 0;  // sequence() reads tokens [0, train_tokens_)
  std::int64_t eval_begin_ = 0;    // eval_sequence() reads tokens [eval_begin_, tokens_)
};

void check_min_tokens(std::int64_t min_tokens, std::int64_t held_out_tokens) {
  if (min_tokens < 0)
    throw std::invalid_argument("min_tokens must be >= 0: got min_tokens=" + std::to_string(min_tokens));
  if (held_out_tokens < 0)
    throw std::invalid_argument("held_out_tokens must be >= 0: got held_out_tokens=" + std::to_string(held_out_tokens));
}

}  // namespace

void token_source::eval_sequence(std::uint64_t, int, std::int32_t*) const {
  throw std::logic_error("this token source has no held-out set for evaluation");
}
std::uint64_t token_source::eval_sequences(int) const { return 0; }

std::unique_ptr<token_source> open_token_file(const std::string& path, int vocab, std::int64_t min_tokens,
                                              std::uint64_t seed, std::int64_t held_out_tokens) {
  if (vocab < 1) throw std::invalid_argument("vocab must be >= 1: got vocab=" + std::to_string(vocab));
  check_min_tokens(min_tokens, held_out_tokens);
  return std::make_unique<file_source>(path, vocab, min_tokens, 2, seed, held_out_tokens);
}

std::unique_ptr<token_source> open_text_file(const std::string& path, std::int64_t min_tokens, std::uint64_t seed,
                                             std::int64_t held_out_tokens) {
  check_min_tokens(min_tokens, held_out_tokens);
  return std::make_unique<file_source>(path, 256, min_tokens, 1, seed, held_out_tokens);
}

}  // namespace actorpipe
