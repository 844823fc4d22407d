// Where training tokens come from. A source is a deterministic function of (step, sample):
// the same run reads the same tokens whatever the schedule, process layout or timing.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <memory>
#include <string>
#include <vector>

namespace actorpipe {

class token_source {
 public:
  virtual ~token_source() = default;
  virtual int vocab() const = 0;
  // Writes seq_len + 1 tokens (inputs and the targets shifted by one) for sample `index` of
  // optimizer step `step`; every token is in [0, vocab()).
  virtual void sequence(std::uint64_t step, std::uint64_t index, int seq_len, std::int32_t* out) const = 0;
  // Sequence `index` of the held-out set an evaluation pass reads: seq_len + 1 tokens as
  // sequence() writes them, the same in every pass. A file: its index-th consecutive window,
  // tokens [index x seq_len, index x seq_len + seq_len], so a pass over all eval_sequences(seq_len)
  // predicts every token after the first once. The synthetic source: a stream of the same chain
  // drawn under its own key, apart from every training sample's. Throws std::out_of_range for
  // an index at or past eval_sequences(seq_len), std::logic_error for a source without one.
  virtual void eval_sequence(std::uint64_t index, int seq_len, std::int32_t* out) const;
  // How many sequences of seq_len the held-out set has: a file's (tokens - 1) / seq_len; the
  // synthetic source's have no end (UINT64_MAX). 0: none (the default).
  virtual std::uint64_t eval_sequences(int seq_len) const;
  // One line for logs: "synthetic Markov source (vocab 256, floor 2.31 nats/token)".
  virtual std::string describe() const = 0;
  // Entropy rate in nats per token when known (the loss cannot go below it), else < 0.
  virtual double entropy_floor() const { return -1; }
};

// The embedded default: a seeded sparse Markov source over `vocab` tokens, so the loss has a
// known floor and visibly falls. Throws std::invalid_argument for vocab < 2.
std::unique_ptr<token_source> make_synthetic_source(int vocab, std::uint64_t seed);

// A token file holding a token id >= vocab (a file made for a larger vocabulary): its error
// has a type of its own, for a front end to name the flag that sets the vocabulary.
struct token_out_of_vocab : std::invalid_argument {
  using std::invalid_argument::invalid_argument;
};

// How a token file's bytes are read. A .bin with `<stem>.idx` beside it is a Megatron-LM
// indexed dataset (preprocess_data.py's output, MMIDIDX version 1): the index gives the token
// type (uint16 below a vocabulary of 65500, else int32; any integer type is read), and its
// sequences must tile the .bin, which is read as the one stream of tokens they make, documents
// end to end. Any other file is flat little-endian uint16 (nanoGPT's .bin).
struct token_file_format {
  std::string index_path;   // the Megatron index read, else ""
  std::string type = "uint16";  // uint8, int8, int16, uint16, int32 or int64
  int token_bytes = 2;
  bool is_signed = false;
  std::uint64_t tokens = 0;     // the data file's bytes / token_bytes
  std::uint64_t sequences = 0;  // a Megatron index's sequences and documents
  std::uint64_t documents = 0;
};

// The index a Megatron dataset's .bin has beside it (`x.bin` -> `x.idx` when that exists), else "".
std::string megatron_index_of(const std::string& path);
// Whether `path` begins as a Megatron index does (MMIDIDX): a file given where its .bin belongs.
bool is_megatron_index(const std::string& path);

// How `path` is read (see token_file_format). `whole_index` false reads the index's header only
// (the token type); true also checks that its sequences tile the .bin. Throws
// std::invalid_argument naming the file: a data file missing or unreadable, or of a size that
// is no whole number of its tokens; an index beside it that is not Megatron's, of another
// version, of a type that holds no token ids (float32, float64), damaged, or whose sequences
// do not tile the .bin.
token_file_format read_token_file_format(const std::string& path, bool whole_index = true);

// A token file as read_token_file_format reads it: flat little-endian uint16 tokens, or a
// Megatron dataset's .bin in its index's type.
// Sample i of step s starts at an offset that is a pure function of (seed, s, i): another seed
// reads other windows (core/data/token_file.cpp has the rule). Throws std::invalid_argument
// naming the path when it is missing, unreadable, of odd size, shorter than min_tokens, or
// holds a token >= vocab or below 0 (token_out_of_vocab, naming the token and its position),
// and for the index's errors above.
// held_out_tokens > 0 keeps the file's last held_out_tokens tokens from training: sequence()
// reads only the tokens before them (as it reads a file of just those), and eval_sequence()
// reads the held-out tail's consecutive windows (as it reads a file of just the tail); each
// part must hold min_tokens. 0: training reads the whole file, and so do the eval windows.
std::unique_ptr<token_source> open_token_file(const std::string& path, int vocab, std::int64_t min_tokens,
                                              std::uint64_t seed = 1234, std::int64_t held_out_tokens = 0);

// One part of a blend: a source and its weight (> 0; the weights need not add up to 1).
struct blend_part {
  double weight = 0;
  std::shared_ptr<const token_source> source;
};

// A blend of sources, as Megatron-LM's `--data-path W1 A W2 B` mixes datasets: sample `index`
// of step `step` comes from one part, drawn with probability weight / the weights' sum as a
// pure function of (seed, step, index), under a key apart from the one a file's windows are
// drawn with; that part then reads its own sample (step, index). The same run reads the same
// tokens whatever the layout, and a blend of copies of one file reads that file's samples. The
// held-out set is the parts' own, one after another in order. Throws std::invalid_argument for
// no parts, a part without a source, a weight that is not a finite number > 0, or parts of
// different vocabularies.
std::unique_ptr<token_source> make_blended_source(std::vector<blend_part> parts, std::uint64_t seed = 1234);

// What --data-file's values name, read as Megatron-LM's --data-path reads its list: one value is
// one file (a blend of one, weight 1); weight path pairs ("0.3 a.bin 0.7 b.bin") weigh each
// file's share of the samples; several paths and no weights weigh each by its tokens (weight 0
// here). Throws std::invalid_argument naming --data-file and the values: none given, a weight
// that is no finite number > 0, or numbers among paths that do not pair up.
struct data_file_part {
  double weight = 0;  // 0: by the file's tokens
  std::string path;
};
std::vector<data_file_part> parse_data_files(const std::vector<std::string>& values);

// The part make_blended_source's rule draws for sample (step, index) from `weights` (> 0, the
// parts' in order), exposed for tests and tools.
std::size_t blended_part_of(const std::vector<double>& weights, std::uint64_t seed, std::uint64_t step,
                            std::uint64_t index);

// A UTF-8 (or any) text file read as bytes: vocab 256. Same errors and held-out tail as
// open_token_file.
std::unique_ptr<token_source> open_text_file(const std::string& path, std::int64_t min_tokens, std::uint64_t seed = 1234,
                                             std::int64_t held_out_tokens = 0);

}  // namespace actorpipe
