// Token sources backed by a file: flat little-endian uint16 tokens (nanoGPT's .bin), a
// Megatron-LM indexed dataset (.bin and .idx, tokens of its index's type) or raw bytes of a
// text file. The file is read at offsets and checked once.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/data/splitmix64.hpp"
#include "core/data/token_source.hpp"
#include "core/log.hpp"
#include "core/wire_bytes.hpp"

namespace actorpipe {

namespace {


[[noreturn]] void fail(const std::string& path, const std::string& what, const char* noun = "data file") {
  throw std::invalid_argument(std::string(noun) + " '" + path + "' " + what);
}

// A file open for reading at offsets (pread: thread-safe), its size as it was opened. Not a
// memory mapping: a file cut short while a run reads it (nanoGPT's prepare script writing
// train.bin again) made a mapped read fault (SIGBUS); a short read here is an error naming it.
class open_file {
 public:
  // `noun` names the file in errors ("data file", "Megatron index").
  explicit open_file(const std::string& path, const char* noun = "data file") : path_(path), noun_(noun) {
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0) {
      if (errno == ENOENT || errno == ENOTDIR) fail(path, "does not exist", noun);
      fail(path, std::string("cannot be read: ") + std::strerror(errno), noun);
    }
    if (!S_ISREG(st.st_mode)) fail(path, "is not a regular file", noun);
    fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd_ < 0) fail(path, std::string("cannot be read: ") + std::strerror(errno), noun);
    struct stat fst {};
    if (::fstat(fd_, &fst) != 0) {
      const int err = errno;
      ::close(fd_);
      fail(path, std::string("cannot be read: ") + std::strerror(err), noun);
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
        throw std::runtime_error(std::string(noun_) + " '" + path_ + "' cannot be read at byte " + std::to_string(offset + got) +
                                 (r < 0 ? std::string(": ") + std::strerror(errno)
                                        : std::string(": it is shorter than the ") + std::to_string(size_) +
                                              " bytes it held when the run began (written again while training?)"));
      got += static_cast<std::size_t>(r);
    }
  }

 private:
  std::string path_;
  const char* noun_;
  int fd_ = -1;
  std::size_t size_ = 0;
};

// A token of W bytes (1, 2, 4 or 8) at `p`, little-endian (core/wire_bytes.hpp), signed where
// its type is. Megatron has no unsigned 32- or 64-bit type.
template <int W>
std::int64_t decode_le(const unsigned char* p, bool is_signed) {
  if constexpr (W == 1) {
    return is_signed ? std::int64_t{wire::get_i8(p)} : std::int64_t{p[0]};
  } else if constexpr (W == 2) {
    return is_signed ? std::int64_t{wire::get_i16(p)} : std::int64_t{wire::get_u16(p)};
  } else if constexpr (W == 4) {
    return wire::get_i32(p);
  } else {
    return wire::get_i64(p);
  }
}

// Calls f(decode) with the decoder of `bytes`-byte integers.
template <class F>
decltype(auto) with_decoder(int bytes, F&& f) {
  switch (bytes) {
    case 1: return f(decode_le<1>);
    case 2: return f(decode_le<2>);
    case 4: return f(decode_le<4>);
    default: return f(decode_le<8>);
  }
}

std::int64_t decode_token(const unsigned char* p, int bytes, bool is_signed) {
  return with_decoder(bytes, [&](auto decode) { return decode(p, is_signed); });
}

// How a Megatron index begins.
constexpr char magic[] = "MMIDIDX\0\0";
constexpr std::size_t magic_bytes = sizeof magic - 1;

// Megatron-LM's index (.idx) of an indexed dataset, version 1, little-endian:
//   "MMIDIDX\0\0", u64 version, u8 token type code, u64 sequence count S, u64 document count D,
//   i32 sequence lengths[S], i64 sequence byte offsets in the .bin[S], i64 document starts[D],
//   and in Megatron-Core's multimodal case i8 sequence modes[S].
// Reads the type (and with `whole_index` checks that the sequences tile the .bin of
// `bin_bytes` bytes) into `f`.
void read_megatron_index(const std::string& bin, std::uint64_t bin_bytes, bool whole_index, token_file_format& f) {
  const std::string& idx = f.index_path;
  open_file in(idx, "Megatron index");
  const auto bad = [&](const std::string& why) {
    throw std::invalid_argument("Megatron index '" + idx + "' (beside data file '" + bin + "') " + why);
  };
  constexpr std::size_t header_bytes = magic_bytes + 8 + 1 + 8 + 8;
  const std::uint64_t size = in.size();
  unsigned char h[header_bytes] = {};
  in.read(0, std::min<std::uint64_t>(size, header_bytes), h);
  if (size < magic_bytes || std::memcmp(h, magic, magic_bytes) != 0)
    throw std::invalid_argument("'" + idx + "' is beside data file '" + bin +
                                "' and is not a Megatron index (it does not begin with MMIDIDX), so the .bin's token "
                                "type is not known: move it away to read the .bin as flat uint16 tokens");
  if (size < header_bytes)
    bad("has " + std::to_string(size) + " bytes: its header alone is " + std::to_string(header_bytes));
  const std::uint64_t version = wire::get_u64(h + magic_bytes);
  if (version != 1) bad("is of version " + std::to_string(version) + ": this reads version 1");
  const int code = h[magic_bytes + 8];
  struct type_code {
    int code;
    const char* name;
    int bytes;
    bool is_signed;
  };
  static constexpr type_code types[] = {{1, "uint8", 1, false}, {2, "int8", 1, true},  {3, "int16", 2, true},
                                        {4, "int32", 4, true},  {5, "int64", 8, true}, {8, "uint16", 2, false}};
  const type_code* t = nullptr;
  for (const type_code& c : types)
    if (c.code == code) t = &c;
  if (code == 6 || code == 7) bad(std::string("holds ") + (code == 6 ? "float64" : "float32") + " values: no token ids");
  if (t == nullptr) bad("names token type code " + std::to_string(code) + ", which Megatron does not define");
  f.type = t->name, f.token_bytes = t->bytes, f.is_signed = t->is_signed;
  const std::uint64_t S = wire::get_u64(h + magic_bytes + 9), D = wire::get_u64(h + magic_bytes + 17);
  const std::uint64_t rest = size - header_bytes;
  const auto counts = [&] {
    return "its header counts " + std::to_string(S) + " sequences and " + std::to_string(D) + " document entries";
  };
  if (S > rest / 12 || D > (rest - 12 * S) / 8)
    bad("has " + std::to_string(size) + " bytes, too few for what " + counts() + " (damaged, or cut short?)");
  const std::uint64_t extra = rest - 12 * S - 8 * D;
  if (extra != 0 && extra != S)  // the multimodal modes are one byte a sequence
    bad("has " + std::to_string(extra) + " bytes past what " + counts() + " (damaged?)");
  f.sequences = S;
  f.documents = D > 0 ? D - 1 : 0;  // the document starts begin with 0
  if (!whole_index) return;
  // The sequences end to end, from byte 0: as Megatron's writer lays them out.
  const std::uint64_t width = static_cast<std::uint64_t>(f.token_bytes);
  std::uint64_t at = 0;  // where the next sequence must start, in the .bin's bytes
  constexpr std::uint64_t batch = std::uint64_t{1} << 16;
  std::vector<unsigned char> lengths(4 * batch), offsets(8 * batch);
  for (std::uint64_t first = 0; first < S; first += batch) {
    const std::uint64_t n = std::min(batch, S - first);
    in.read(header_bytes + 4 * first, 4 * n, lengths.data());
    in.read(header_bytes + 4 * S + 8 * first, 8 * n, offsets.data());
    for (std::uint64_t j = 0; j < n; ++j) {
      const std::uint64_t i = first + j;
      const std::int64_t length = wire::get_i32(&lengths[4 * j]);
      const std::int64_t offset = wire::get_i64(&offsets[8 * j]);
      if (length < 0) bad("gives sequence " + std::to_string(i) + " a length of " + std::to_string(length) + " (damaged?)");
      if (offset < 0 || static_cast<std::uint64_t>(offset) != at)
        bad("puts sequence " + std::to_string(i) + " at byte " + std::to_string(offset) + " of the .bin, not at byte " +
            std::to_string(at) + (i == 0 ? std::string() : " where sequence " + std::to_string(i - 1) + " ends") +
            ": its sequences are read as one stream, end to end, as Megatron writes them");
      const std::uint64_t bytes = static_cast<std::uint64_t>(length) * width;
      if (bytes > bin_bytes - std::min(at, bin_bytes))
        bad("has sequences past the end of the .bin's " + std::to_string(bin_bytes) + " bytes (sequence " +
            std::to_string(i) + " of " + std::to_string(length) + " " + f.type + " tokens at byte " + std::to_string(at) +
            "): an index of another .bin?");
      at += bytes;
    }
  }
  if (at != bin_bytes)
    bad("has sequences of " + std::to_string(at / width) + " " + f.type + " tokens (" + std::to_string(at) +
        " bytes), and the .bin has " + std::to_string(bin_bytes) + " bytes: an index of another .bin?");
}

// Files from this size on say that their tokens are being checked, and how far along.
constexpr std::size_t scan_said_from = std::size_t{1} << 30;

// Tokens of format_.token_bytes bytes each (a text file: one per byte), little-endian.
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
  // `text`: one token per byte (format's token_bytes 1); else tokens as `format` reads them.
  file_source(const std::string& path, int vocab, std::int64_t min_tokens, const token_file_format& format, bool text,
              std::uint64_t seed, std::int64_t held_out)
      : path_(path), vocab_(vocab), format_(format), text_(text), token_bytes_(format.token_bytes),
        seed_term_(splitmix64(seed) ^ splitmix64(1234)), file_(path) {
    if (file_.size() % token_bytes_ != 0)
      fail(path_, "has " + std::to_string(file_.size()) + " bytes: not a whole number of " + format_.type + " tokens");
    tokens_ = static_cast<std::int64_t>(file_.size() / token_bytes_);
    if (!format_.index_path.empty() && static_cast<std::uint64_t>(tokens_) != format_.tokens)
      fail(path_, "has " + std::to_string(file_.size()) + " bytes, where its index '" + format_.index_path + "' read " +
                      std::to_string(format_.tokens * format_.token_bytes) + " a moment before (written meanwhile?)");
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
    // instead of mid-run. Not where no value of the type reaches the vocabulary.
    const bool may_leave_vocab = format_.is_signed || token_bytes_ >= 4 || (std::int64_t{1} << (8 * token_bytes_)) > vocab_;
    if (may_leave_vocab) {
      std::vector<unsigned char> chunk(std::size_t{1} << 20);  // a whole number of tokens of any width
      const std::size_t width = static_cast<std::size_t>(token_bytes_);
      // A big file (a Megatron corpus is often tens of GB) takes seconds to minutes: said, with
      // its progress every 10 s, so that a run's start is not silent.
      const bool big = file_.size() >= scan_said_from;
      using clock = std::chrono::steady_clock;
      const auto began = clock::now();
      auto said = began;
      if (big)
        log_info("data file '" + path_ + "': checking its " + std::to_string(tokens_) + " " + format_.type +
                 " tokens against vocab " + std::to_string(vocab_) + ", once, before training");
      for (std::size_t at = 0; at < file_.size(); at += chunk.size()) {
        if (big && clock::now() - said >= std::chrono::seconds(10)) {
          said = clock::now();
          log_info("data file '" + path_ + "': " + std::to_string(at * 100 / file_.size()) + "% checked");
        }
        const std::size_t n = std::min(chunk.size(), file_.size() - at);
        file_.read(at, n, chunk.data());
        const std::size_t bad = with_decoder(token_bytes_, [&](auto decode) {
          for (std::size_t j = 0; j + width <= n; j += width) {
            const std::int64_t tok = decode(&chunk[j], format_.is_signed);
            if (tok < 0 || tok >= vocab_) return j;
          }
          return n;
        });
        if (bad == n) continue;
        const std::int64_t tok = decode_token(&chunk[bad], token_bytes_, format_.is_signed);
        const std::string where = "data file '" + path_ + "' token " + std::to_string(tok) + " at position " +
                                  std::to_string((at + bad) / width);
        if (tok < 0) throw std::invalid_argument(where + " is below 0: no token id (" + format_.type + " tokens)");
        throw token_out_of_vocab(where + " is >= vocab " + std::to_string(vocab_));
      }
      if (big)
        log_info("data file '" + path_ + "': every token checked in " +
                 std::to_string(std::chrono::duration_cast<std::chrono::seconds>(clock::now() - began).count()) + " s");
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
    const std::string kind = text_                       ? "text file read as bytes '" + path_ + "' ("
                             : format_.index_path.empty() ? format_.type + " token file '" + path_ + "' ("
                                                          : "Megatron dataset '" + path_ + "' (" + format_.type +
                                                                " tokens, " + std::to_string(format_.sequences) +
                                                                " sequences in " + std::to_string(format_.documents) +
                                                                " documents by its index '" + format_.index_path + "'; ";
    return kind + std::to_string(tokens_) + " tokens, vocab " + std::to_string(vocab_) +
           (eval_begin_ > 0 ? "; training reads its first " + std::to_string(train_tokens_) + ", its last " +
                                  std::to_string(tokens_ - eval_begin_) + " are held out"
                            : std::string()) +
           ")";
  }

 private:
  // The seq_len + 1 tokens from token `offset` on (offset + seq_len < tokens_).
  void read_window(std::uint64_t offset, int seq_len, std::int32_t* out) const {
    const std::size_t width = static_cast<std::size_t>(token_bytes_);
    std::vector<unsigned char> b(static_cast<std::size_t>(seq_len + 1) * width);
    file_.read(static_cast<std::size_t>(offset) * width, b.size(), b.data());
    if (token_bytes_ == 1) {
      for (int i = 0; i <= seq_len; ++i) out[i] = b[static_cast<std::size_t>(i)];
    } else {  // every token is in [0, vocab): the constructor checked
      for (int i = 0; i <= seq_len; ++i)
        out[i] = static_cast<std::int32_t>(decode_token(&b[static_cast<std::size_t>(i) * width], token_bytes_, format_.is_signed));
    }
  }

  std::string path_;
  int vocab_;
  token_file_format format_;
  bool text_;
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

std::string megatron_index_of(const std::string& path) {
  constexpr std::size_t ext = 4;  // ".bin"
  if (path.size() <= ext || path.compare(path.size() - ext, ext, ".bin") != 0) return "";
  const std::string idx = path.substr(0, path.size() - ext) + ".idx";
  struct stat st {};
  return ::stat(idx.c_str(), &st) == 0 ? idx : std::string();
}

bool is_megatron_index(const std::string& path) {
  try {
    const open_file f(path);
    unsigned char head[magic_bytes] = {};
    if (f.size() < magic_bytes) return false;
    f.read(0, magic_bytes, head);
    return std::memcmp(head, magic, magic_bytes) == 0;
  } catch (const std::exception&) {  // what cannot be read is no index
    return false;
  }
}

token_file_format read_token_file_format(const std::string& path, bool whole_index) {
  token_file_format f;
  const std::uint64_t bytes = open_file(path).size();
  f.index_path = megatron_index_of(path);
  if (!f.index_path.empty()) read_megatron_index(path, bytes, whole_index, f);
  if (bytes % static_cast<std::uint64_t>(f.token_bytes) != 0)
    fail(path, "has " + std::to_string(bytes) + " bytes: not a whole number of " + f.type + " tokens");
  f.tokens = bytes / static_cast<std::uint64_t>(f.token_bytes);
  return f;
}

std::unique_ptr<token_source> open_token_file(const std::string& path, int vocab, std::int64_t min_tokens,
                                              std::uint64_t seed, std::int64_t held_out_tokens) {
  if (vocab < 1) throw std::invalid_argument("vocab must be >= 1: got vocab=" + std::to_string(vocab));
  check_min_tokens(min_tokens, held_out_tokens);
  return std::make_unique<file_source>(path, vocab, min_tokens, read_token_file_format(path), false, seed,
                                       held_out_tokens);
}

std::unique_ptr<token_source> open_text_file(const std::string& path, std::int64_t min_tokens, std::uint64_t seed,
                                             std::int64_t held_out_tokens) {
  check_min_tokens(min_tokens, held_out_tokens);
  token_file_format bytes;
  bytes.type = "byte", bytes.token_bytes = 1;
  return std::make_unique<file_source>(path, 256, min_tokens, bytes, true, seed, held_out_tokens);
}

}  // namespace actorpipe
