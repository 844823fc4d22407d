// BERT's tokenizer: basic tokenization (clean, space out CJK ideographs, NFC, split on whitespace
// and punctuation, lower-case and strip accents) then greedy longest-match WordPiece sub-words,
// and the fixed-length [CLS] a [SEP] b [SEP] encoding a BERT classifier reads. No torch.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

namespace actorpipe {

struct wordpiece_options {
  // Lower-case and strip accents, as bert-base-uncased does: Python's str.lower() (final sigma
  // included), NFD, and every nonspacing mark (Mn) dropped, for all of Unicode (tables from
  // Python's unicodedata, Unicode 14.0.0: core/data/unicode_tables.inc).
  bool lower_case = true;
  // A word of more code points than this becomes [UNK] (BERT's max_input_chars_per_word).
  int max_word_chars = 100;
};

// One sentence or sentence pair cut or padded to seq_len: what BERT's run_classifier feeds.
struct encoded_text {
  std::vector<std::int32_t> input_ids;       // [CLS] a [SEP] (b [SEP]) [PAD]...
  std::vector<std::int32_t> token_type_ids;  // 0: [CLS], a, its [SEP] and padding; 1: b and its [SEP]
  std::vector<std::int32_t> attention_mask;  // 1: real token, 0: padding
};

// Basic tokenization alone (no vocabulary), as Hugging Face's Python BasicTokenizer for every
// code point: UTF-8 in (invalid bytes are dropped); controls (category C*) dropped; CJK ideographs
// spaced out; NFC; split on whitespace (Zs, \t, \n, \r, U+2028, U+2029); lower_case: lower(), NFD,
// Mn dropped; punctuation (ASCII symbols and P*) split off. Words and single punctuation / CJK
// characters out, as UTF-8.
std::vector<std::string> basic_tokenize(const std::string& text, bool lower_case);

// Whether `text` is UTF-8 by the rules basic_tokenize decodes it with (no overlong forms, no
// surrogates, nothing above U+10FFFF): the bytes of a sequence that is not are dropped there.
bool is_valid_utf8(const std::string& text);

class wordpiece_tokenizer {
 public:
  // A Hugging Face style vocab.txt: one token per line, id = 0-based line number (a repeated
  // token keeps its last id, as BERT's load_vocab). Throws std::invalid_argument naming the file
  // when it cannot be read or lacks [PAD], [UNK], [CLS] or [SEP] (naming the missing ones).
  static wordpiece_tokenizer from_vocab_file(const std::string& path, const wordpiece_options& options = {});
  // The same from tokens in memory; `origin` names them in errors.
  static wordpiece_tokenizer from_tokens(const std::vector<std::string>& tokens, const std::string& origin,
                                         const wordpiece_options& options = {});
  // A word vocabulary: [PAD]=0, [UNK]=1, [CLS]=2, [SEP]=3, [MASK]=4, then every word of the
  // texts' basic tokenization by descending count, ties alphabetically (byte order), so the same
  // texts always give the same ids. max_words > 0 keeps only that many words (specials aside).
  static wordpiece_tokenizer from_texts(const std::vector<std::string>& texts, const wordpiece_options& options = {},
                                        std::size_t max_words = 0);

  std::vector<std::string> tokenize(const std::string& text) const;
  std::vector<std::int32_t> ids(const std::string& text) const;

  // -1 when the token is not in the vocabulary.
  std::int32_t id_of(const std::string& token) const;
  // Throws std::out_of_range naming the id and the vocabulary size.
  const std::string& token_of(std::int32_t id) const;

  std::int32_t pad_id() const { return pad_; }
  std::int32_t unk_id() const { return unk_; }
  std::int32_t cls_id() const { return cls_; }
  std::int32_t sep_id() const { return sep_; }
  std::int32_t mask_id() const { return mask_; }  // -1 when the vocabulary has no [MASK]
  int vocab_size() const { return static_cast<int>(tokens_.size()); }
  const std::vector<std::string>& vocab() const { return tokens_; }
  const wordpiece_options& options() const { return options_; }

  // Writes the vocabulary as a vocab.txt that from_vocab_file reads back to the same ids.
  void write_vocab_file(const std::string& path) const;

  // [CLS] a [SEP] padded with [PAD] to seq_len; a is cut to seq_len - 2 tokens. Throws
  // std::invalid_argument for seq_len < 2.
  encoded_text encode(const std::string& a, int seq_len) const;
  // [CLS] a [SEP] b [SEP] padded to seq_len. While the two are longer than seq_len - 3 the last
  // token of the longer one is dropped (b when they are equal), as BERT's _truncate_seq_pair.
  // Throws std::invalid_argument for seq_len < 3.
  encoded_text encode_pair(const std::string& a, const std::string& b, int seq_len) const;

 private:
  wordpiece_tokenizer(std::vector<std::string> tokens, const std::string& origin, const wordpiece_options& options);
  void append_pieces(const std::string& word, std::vector<std::string>& out) const;
  encoded_text assemble(std::vector<std::int32_t> a, const std::vector<std::int32_t>* b, int seq_len) const;

  std::vector<std::string> tokens_;
  std::unordered_map<std::string, std::int32_t> ids_;
  wordpiece_options options_;
  std::int32_t pad_ = -1, unk_ = -1, cls_ = -1, sep_ = -1, mask_ = -1;
};

}  // namespace actorpipe
