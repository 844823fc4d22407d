// BERT's tokenizer (google-research/bert tokenization.py, restated): UTF-8 decoding, basic
// tokenization with small hand-written character classes instead of a Unicode database, WordPiece,
// and the classifier encoding with _truncate_seq_pair.
#include "core/data/wordpiece.hpp"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <stdexcept>
#include <utility>

namespace actorpipe {

namespace {

constexpr char32_t replacement_char = 0xFFFD;

// Decodes UTF-8 strictly (no overlong forms, no surrogates, nothing above U+10FFFF). A bad byte
// or a cut-short sequence becomes one U+FFFD and decoding goes on at the next byte that could
// start a character, so any input decodes and nothing reads past the end.
std::u32string decode_utf8(const std::string& text) {
  std::u32string out;
  out.reserve(text.size());
  const auto* b = reinterpret_cast<const unsigned char*>(text.data());
  const std::size_t n = text.size();
  std::size_t i = 0;
  while (i < n) {
    const unsigned char c = b[i];
    if (c < 0x80) {
      out.push_back(c);
      ++i;
      continue;
    }
    int extra = 0;
    char32_t cp = 0;
    unsigned char lo = 0x80, hi = 0xBF;  // allowed range of the first continuation byte
    if (c >= 0xC2 && c <= 0xDF) {
      extra = 1;
      cp = c & 0x1F;
    } else if (c >= 0xE0 && c <= 0xEF) {
      extra = 2;
      cp = c & 0x0F;
      if (c == 0xE0) lo = 0xA0;  // overlong
      if (c == 0xED) hi = 0x9F;  // surrogates
    } else if (c >= 0xF0 && c <= 0xF4) {
      extra = 3;
      cp = c & 0x07;
      if (c == 0xF0) lo = 0x90;  // overlong
      if (c == 0xF4) hi = 0x8F;  // above U+10FFFF
    } else {
      out.push_back(replacement_char);
      ++i;
      continue;
    }
    std::size_t j = i + 1;
    bool ok = true;
    for (int k = 0; k < extra; ++k, ++j) {
      const unsigned char cc = j < n ? b[j] : 0;
      const unsigned char min = k == 0 ? lo : 0x80, max = k == 0 ? hi : 0xBF;
      if (j >= n || cc < min || cc > max) {
        ok = false;
        break;
      }
      cp = (cp << 6) | (cc & 0x3F);
    }
    if (ok) {
      out.push_back(cp);
      i = j;
    } else {
      out.push_back(replacement_char);
      i = j;  // the valid prefix is consumed; the offending byte is looked at again
    }
  }
  return out;
}

void append_utf8(char32_t cp, std::string& out) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

bool in(char32_t cp, char32_t lo, char32_t hi) { return cp >= lo && cp <= hi; }

// BERT's _is_whitespace: tab, newline, carriage return and the space separators (Zs).
bool is_whitespace(char32_t cp) {
  return cp == ' ' || cp == '\t' || cp == '\n' || cp == '\r' || cp == 0xA0 || cp == 0x1680 ||
         in(cp, 0x2000, 0x200A) || cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

// BERT's _is_control (categories Cc, Cf, Co) for the characters that occur in practice: C0/C1
// controls, the common format characters (soft hyphen, zero-width and bidi marks, BOM) and
// private use. Tab, newline and carriage return are whitespace, tested first.
bool is_control(char32_t cp) {
  return cp < 0x20 || in(cp, 0x7F, 0x9F) || cp == 0xAD || in(cp, 0x600, 0x605) || cp == 0x61C || cp == 0x6DD ||
         cp == 0x70F || cp == 0x180E || in(cp, 0x200B, 0x200F) || in(cp, 0x202A, 0x202E) ||
         in(cp, 0x2060, 0x206F) || cp == 0xFEFF || in(cp, 0xFFF9, 0xFFFB) || in(cp, 0xE000, 0xF8FF) ||
         cp >= 0xF0000;
}

// BERT's _is_chinese_char: the CJK Unified Ideographs blocks (not Hiragana, Katakana or Hangul,
// which are written with spaces or split by WordPiece).
bool is_cjk(char32_t cp) {
  return in(cp, 0x4E00, 0x9FFF) || in(cp, 0x3400, 0x4DBF) || in(cp, 0x20000, 0x2A6DF) ||
         in(cp, 0x2A700, 0x2B73F) || in(cp, 0x2B740, 0x2B81F) || in(cp, 0x2B820, 0x2CEAF) ||
         in(cp, 0xF900, 0xFAFF) || in(cp, 0x2F800, 0x2FA1F);
}

// BERT's _is_punctuation: every non-alphanumeric printable ASCII character, plus (instead of the
// full Unicode P* categories) Latin-1 punctuation, General and Supplemental Punctuation, CJK
// punctuation and the full-width forms of ASCII punctuation.
bool is_punctuation(char32_t cp) {
  return in(cp, 33, 47) || in(cp, 58, 64) || in(cp, 91, 96) || in(cp, 123, 126) || cp == 0xA1 || cp == 0xA7 ||
         cp == 0xAB || cp == 0xB6 || cp == 0xB7 || cp == 0xBB || cp == 0xBF || in(cp, 0x2000, 0x206F) ||
         in(cp, 0x2E00, 0x2E7F) || in(cp, 0x3001, 0x3003) || in(cp, 0x3008, 0x3011) || in(cp, 0x3014, 0x301F) ||
         cp == 0x30FB || in(cp, 0xFF01, 0xFF0F) || in(cp, 0xFF1A, 0xFF20) || in(cp, 0xFF3B, 0xFF40) ||
         in(cp, 0xFF5B, 0xFF65);
}

// Combining marks that NFD splits off accented letters; stripping accents drops them.
bool is_combining_mark(char32_t cp) {
  return in(cp, 0x300, 0x36F) || in(cp, 0x1AB0, 0x1AFF) || in(cp, 0x1DC0, 0x1DFF) || in(cp, 0x20D0, 0x20FF) ||
         in(cp, 0xFE20, 0xFE2F);
}

// Lower-case and strip the accent of one character, for ASCII, Latin-1 and Latin Extended-A:
// what Python's lower() then NFD and dropping Mn give. A letter in these tables names its base
// letter; '*' is a letter without a decomposition (æ, ø, đ, ł, œ, ...) that is only lower-cased.
char32_t fold_accent_and_case(char32_t cp) {
  if (cp < 0x80) return (cp >= 'A' && cp <= 'Z') ? cp + 32 : cp;
  static const char latin1[] =  // U+00C0..U+00FF
      "aaaaaa*ceeeeiiii*nooooo**uuuuy**"
      "aaaaaa*ceeeeiiii*nooooo**uuuuy*y";
  static const char latin_ext_a[] =  // U+0100..U+017F
      "aaaaaaccccccccdd**eeeeeeeeeegggggggghh**iiiiiiiii***jjkk*"
      "llllll****nnnnnn***oooooo**rrrrrrsssssssstttt**uuuuuuuuuuuuwwyyyzzzzzz*";
  static_assert(sizeof(latin1) == 64 + 1, "one entry per U+00C0..U+00FF");
  static_assert(sizeof(latin_ext_a) == 128 + 1, "one entry per U+0100..U+017F");
  if (in(cp, 0xC0, 0xFF)) {
    const char base = latin1[cp - 0xC0];
    if (base != '*') return static_cast<char32_t>(base);
    // Æ Ð Ø Þ lower-case to æ ð ø þ; × ß æ ð ÷ ø þ stay.
    return (cp <= 0xDE && cp != 0xD7) ? cp + 0x20 : cp;
  }
  if (in(cp, 0x100, 0x17F)) {
    const char base = latin_ext_a[cp - 0x100];
    if (base != '*') return static_cast<char32_t>(base);
    switch (cp) {
      case 0x110: case 0x126: case 0x132: case 0x14A: case 0x152: case 0x166:  // Đ Ħ Ĳ Ŋ Œ Ŧ
        return cp + 1;
      case 0x13F: case 0x141:  // Ŀ Ł
        return cp + 1;
      default:  // already lower case: đ ħ ı ĳ ĸ ŀ ł ŉ ŋ œ ŧ ſ
        return cp;
    }
  }
  return cp;
}

std::string to_utf8(const std::u32string& s) {
  std::string out;
  out.reserve(s.size());
  for (char32_t cp : s) append_utf8(cp, out);
  return out;
}

const char* const special_tokens[] = {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"};

}  // namespace

std::vector<std::string> basic_tokenize(const std::string& text, bool lower_case) {
  // One pass does what BERT does in steps (clean, space out CJK, split on whitespace, lower-case
  // and strip accents, split off punctuation): every step decides per character.
  std::vector<std::string> words;
  std::u32string word;
  const auto end_word = [&] {
    if (!word.empty()) words.push_back(to_utf8(word));
    word.clear();
  };
  for (char32_t cp : decode_utf8(text)) {
    if (cp == 0 || cp == replacement_char) continue;
    if (is_whitespace(cp)) {
      end_word();
      continue;
    }
    if (is_control(cp)) continue;
    if (is_cjk(cp)) {
      end_word();
      words.push_back(to_utf8(std::u32string(1, cp)));
      continue;
    }
    if (lower_case) {
      if (is_combining_mark(cp)) continue;
      cp = fold_accent_and_case(cp);
    }
    if (is_punctuation(cp)) {
      end_word();
      words.push_back(to_utf8(std::u32string(1, cp)));
      continue;
    }
    word.push_back(cp);
  }
  end_word();
  return words;
}

wordpiece_tokenizer::wordpiece_tokenizer(std::vector<std::string> tokens, const std::string& origin,
                                         const wordpiece_options& options)
    : tokens_(std::move(tokens)), options_(options) {
  if (options_.max_word_chars < 1)
    throw std::invalid_argument("wordpiece max_word_chars must be >= 1: got max_word_chars=" +
                                std::to_string(options_.max_word_chars));
  if (tokens_.size() > static_cast<std::size_t>(INT32_MAX))
    throw std::invalid_argument(origin + " holds " + std::to_string(tokens_.size()) + " tokens: more than int32 ids");
  ids_.reserve(tokens_.size());
  for (std::size_t i = 0; i < tokens_.size(); ++i) ids_[tokens_[i]] = static_cast<std::int32_t>(i);
  std::string missing;
  for (int s = 0; s < 4; ++s)
    if (ids_.count(special_tokens[s]) == 0) missing += std::string(missing.empty() ? "" : ", ") + special_tokens[s];
  if (!missing.empty())
    throw std::invalid_argument(origin + " lacks " + missing +
                                ": a BERT vocabulary needs [PAD], [UNK], [CLS] and [SEP] as whole lines");
  pad_ = ids_.at("[PAD]");
  unk_ = ids_.at("[UNK]");
  cls_ = ids_.at("[CLS]");
  sep_ = ids_.at("[SEP]");
  mask_ = id_of("[MASK]");
}

wordpiece_tokenizer wordpiece_tokenizer::from_vocab_file(const std::string& path, const wordpiece_options& options) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec))
    throw std::invalid_argument("vocab file '" + path + "' is a directory, not a vocab.txt");
  if (std::filesystem::exists(path, ec) && !std::filesystem::is_regular_file(path, ec))
    throw std::invalid_argument("vocab file '" + path + "' is not a regular file (a pipe or a device?): give a file");
  std::ifstream f(path, std::ios::binary);
  if (!f) throw std::invalid_argument("vocab file '" + path + "' cannot be opened (missing or unreadable)");
  std::vector<std::string> tokens;
  std::string line;
  while (std::getline(f, line)) {
    if (!line.empty() && line.back() == '\r') line.pop_back();  // a vocab.txt saved with CRLF
    if (tokens.empty() && line.compare(0, 3, "\xEF\xBB\xBF") == 0) line.erase(0, 3);  // an editor's byte-order mark
    tokens.push_back(line);
  }
  if (f.bad()) throw std::invalid_argument("vocab file '" + path + "' could not be read to the end");
  if (tokens.empty()) throw std::invalid_argument("vocab file '" + path + "' is empty: expected one token per line");
  return wordpiece_tokenizer(std::move(tokens), "vocab file '" + path + "'", options);
}

wordpiece_tokenizer wordpiece_tokenizer::from_tokens(const std::vector<std::string>& tokens, const std::string& origin,
                                                     const wordpiece_options& options) {
  return wordpiece_tokenizer(tokens, origin, options);
}

wordpiece_tokenizer wordpiece_tokenizer::from_texts(const std::vector<std::string>& texts,
                                                    const wordpiece_options& options, std::size_t max_words) {
  std::map<std::string, std::int64_t> counts;
  for (const std::string& text : texts)
    for (std::string& w : basic_tokenize(text, options.lower_case)) ++counts[std::move(w)];
  std::vector<std::pair<std::string, std::int64_t>> words(counts.begin(), counts.end());
  // counts is already in byte order, so a stable sort by count leaves ties alphabetical.
  std::stable_sort(words.begin(), words.end(), [](const auto& x, const auto& y) { return x.second > y.second; });
  std::vector<std::string> tokens(std::begin(special_tokens), std::end(special_tokens));
  for (auto& [w, count] : words) {
    if (max_words > 0 && tokens.size() - 5 >= max_words) break;
    // Basic tokenization splits off '[' and ']', so no word can equal a special token.
    tokens.push_back(std::move(w));
  }
  return wordpiece_tokenizer(std::move(tokens), "word vocabulary from texts", options);
}

void wordpiece_tokenizer::append_pieces(const std::string& word, std::vector<std::string>& out) const {
  // Byte offset of every code point, so sub-words never cut a character.
  std::vector<std::size_t> starts;
  for (std::size_t i = 0; i < word.size(); ++i)
    if ((static_cast<unsigned char>(word[i]) & 0xC0) != 0x80) starts.push_back(i);
  if (starts.size() > static_cast<std::size_t>(options_.max_word_chars)) {
    out.push_back(tokens_[unk_]);
    return;
  }
  starts.push_back(word.size());
  const std::size_t chars = starts.size() - 1;
  const std::size_t first = out.size();
  std::string piece;
  for (std::size_t start = 0; start < chars;) {
    // Greedy longest match first: the longest piece from `start` in the vocabulary.
    std::size_t end = chars;
    for (; end > start; --end) {
      piece.assign(start > 0 ? "##" : "");
      piece.append(word, starts[start], starts[end] - starts[start]);
      if (ids_.count(piece) != 0) break;
    }
    if (end == start) {  // no piece fits: the whole word is unknown
      out.resize(first);
      out.push_back(tokens_[unk_]);
      return;
    }
    out.push_back(piece);
    start = end;
  }
}

std::vector<std::string> wordpiece_tokenizer::tokenize(const std::string& text) const {
  std::vector<std::string> out;
  for (const std::string& word : basic_tokenize(text, options_.lower_case)) append_pieces(word, out);
  return out;
}

std::vector<std::int32_t> wordpiece_tokenizer::ids(const std::string& text) const {
  std::vector<std::int32_t> out;
  for (const std::string& token : tokenize(text)) out.push_back(ids_.at(token));
  return out;
}

std::int32_t wordpiece_tokenizer::id_of(const std::string& token) const {
  const auto it = ids_.find(token);
  return it == ids_.end() ? -1 : it->second;
}

const std::string& wordpiece_tokenizer::token_of(std::int32_t id) const {
  if (id < 0 || id >= vocab_size())
    throw std::out_of_range("token id " + std::to_string(id) + " is outside the vocabulary [0, " +
                            std::to_string(vocab_size()) + ")");
  return tokens_[id];
}

void wordpiece_tokenizer::write_vocab_file(const std::string& path) const {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  if (!f) throw std::invalid_argument("vocab file '" + path + "' cannot be written");
  for (const std::string& t : tokens_) f << t << '\n';
  f.flush();
  if (!f) throw std::invalid_argument("vocab file '" + path + "' could not be written completely");
}

encoded_text wordpiece_tokenizer::assemble(std::vector<std::int32_t> a, const std::vector<std::int32_t>* b,
                                           int seq_len) const {
  encoded_text e;
  e.input_ids.reserve(seq_len);
  const auto put = [&](std::int32_t id, std::int32_t type) {
    e.input_ids.push_back(id);
    e.token_type_ids.push_back(type);
    e.attention_mask.push_back(1);
  };
  put(cls_, 0);
  for (std::int32_t id : a) put(id, 0);
  put(sep_, 0);
  if (b != nullptr) {
    for (std::int32_t id : *b) put(id, 1);
    put(sep_, 1);
  }
  e.input_ids.resize(seq_len, pad_);
  e.token_type_ids.resize(seq_len, 0);
  e.attention_mask.resize(seq_len, 0);
  return e;
}

encoded_text wordpiece_tokenizer::encode(const std::string& a, int seq_len) const {
  if (seq_len < 2)
    throw std::invalid_argument("seq_len must be >= 2 to hold [CLS] a [SEP]: got seq_len=" + std::to_string(seq_len));
  std::vector<std::int32_t> ia = ids(a);
  if (ia.size() > static_cast<std::size_t>(seq_len - 2)) ia.resize(seq_len - 2);
  return assemble(std::move(ia), nullptr, seq_len);
}

encoded_text wordpiece_tokenizer::encode_pair(const std::string& a, const std::string& b, int seq_len) const {
  if (seq_len < 3)
    throw std::invalid_argument("seq_len must be >= 3 to hold [CLS] a [SEP] b [SEP]: got seq_len=" +
                                std::to_string(seq_len));
  std::vector<std::int32_t> ia = ids(a), ib = ids(b);
  // _truncate_seq_pair: trimming the longer one keeps as much of the shorter as possible.
  const std::size_t budget = static_cast<std::size_t>(seq_len - 3);
  while (ia.size() + ib.size() > budget) (ia.size() > ib.size() ? ia : ib).pop_back();
  return assemble(std::move(ia), &ib, seq_len);
}

}  // namespace actorpipe
