// BERT's tokenizer (google-research/bert tokenization.py as Hugging Face's Python BertTokenizer
// runs it): UTF-8 decoding, basic tokenization with character classes, case mapping and NFC / NFD
// from tables generated out of Python's unicodedata (unicode_tables.inc, written by
// scripts/gen_unicode_tables.py), WordPiece, and the classifier encoding with _truncate_seq_pair.
#include "core/data/wordpiece.hpp"

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <stdexcept>
#include <utility>

namespace actorpipe {

namespace {

constexpr char32_t replacement_char = 0xFFFD;

// Decodes UTF-8 strictly (no overlong forms, no surrogates, nothing above U+10FFFF). A bad byte
// or a cut-short sequence becomes one U+FFFD (and *valid false) and decoding goes on at the next
// byte that could start a character, so any input decodes and nothing reads past the end.
std::u32string decode_utf8(const std::string& text, bool* valid = nullptr) {
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
      if (valid) *valid = false;
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
      if (valid) *valid = false;
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

// The character tables, generated from Python's unicodedata by scripts/gen_unicode_tables.py.
struct cp_range {
  char32_t first, last;
};
struct ccc_range {
  char32_t first, last;
  unsigned char ccc;
};
struct lower_run {  // first, first + stride, ... <= last lower-case to c + delta
  char32_t first, last;
  std::int32_t delta;
  unsigned char stride;
};
struct lower_multi_entry {
  char32_t cp;
  char32_t to[2];
};
struct decomposition {  // one level of canonical decomposition
  char32_t cp, first, second;  // second 0: a singleton
  bool composes;               // NFC composes first + second back into cp
};

#include "core/data/unicode_tables.inc"

template <std::size_t N>
bool in_table(const cp_range (&table)[N], char32_t cp) {
  // The first range that does not end before cp.
  const cp_range* r = std::lower_bound(std::begin(table), std::end(table), cp,
                                       [](const cp_range& x, char32_t c) { return x.last < c; });
  return r != std::end(table) && r->first <= cp;
}

// ASCII is decided here, the rest by the tables.
// BERT's _is_whitespace (space, \t, \n, \r, category Zs), plus U+2028 and U+2029: Hugging Face
// splits words with Python's str.split(), which also splits there (the other characters
// str.split() takes for space, U+001C..U+001F, U+0085, \v and \f, are controls, dropped first).
bool is_whitespace(char32_t cp) {
  if (cp < 0x80) return cp == ' ' || cp == '\t' || cp == '\n' || cp == '\r';
  return in_table(whitespace_ranges, cp);
}
// What BERT's _clean_text drops: U+0000, U+FFFD, and _is_control: every category C* (Cc, Cf, Cs,
// Co and unassigned Cn) but \t, \n and \r.
bool is_control(char32_t cp) {
  if (cp < 0x80) return (cp < 0x20 && cp != '\t' && cp != '\n' && cp != '\r') || cp == 0x7F;
  return in_table(control_ranges, cp);
}
// BERT's _is_chinese_char: its CJK Unified Ideographs blocks (not Hiragana, Katakana or Hangul).
bool is_cjk(char32_t cp) { return cp >= 0x3400 && in_table(cjk_ranges, cp); }
// BERT's _is_punctuation: ASCII 33-47, 58-64, 91-96, 123-126 (symbols such as $ ^ ` too), else
// category P*.
bool is_punctuation(char32_t cp) {
  if (cp < 0x80)
    return (cp >= 33 && cp <= 47) || (cp >= 58 && cp <= 64) || (cp >= 91 && cp <= 96) || (cp >= 123 && cp <= 126);
  return in_table(punctuation_ranges, cp);
}
// Category Mn, what stripping accents drops after NFD (enclosing marks, Me, stay).
bool is_nonspacing_mark(char32_t cp) { return cp >= 0x300 && in_table(nonspacing_mark_ranges, cp); }

unsigned combining_class(char32_t cp) {
  if (cp < 0x300) return 0;
  const ccc_range* r =
      std::lower_bound(std::begin(combining_class_ranges), std::end(combining_class_ranges), cp,
                       [](const ccc_range& x, char32_t c) { return x.last < c; });
  return r != std::end(combining_class_ranges) && r->first <= cp ? r->ccc : 0;
}

const decomposition* find_decomposition(char32_t cp) {
  const decomposition* d = std::lower_bound(std::begin(decompositions), std::end(decompositions), cp,
                                            [](const decomposition& x, char32_t c) { return x.cp < c; });
  return d != std::end(decompositions) && d->cp == cp ? d : nullptr;
}

// Hangul syllables decompose and compose by arithmetic (Unicode 3.12).
constexpr char32_t hangul_s = 0xAC00, hangul_l = 0x1100, hangul_v = 0x1161, hangul_t = 0x11A7;
constexpr char32_t hangul_l_count = 19, hangul_v_count = 21, hangul_t_count = 28;
constexpr char32_t hangul_n_count = hangul_v_count * hangul_t_count, hangul_s_count = hangul_l_count * hangul_n_count;

void append_canonical_decomposition(char32_t cp, std::u32string& out) {
  if (cp >= hangul_s && cp < hangul_s + hangul_s_count) {
    const char32_t s = cp - hangul_s;
    out.push_back(hangul_l + s / hangul_n_count);
    out.push_back(hangul_v + (s % hangul_n_count) / hangul_t_count);
    if (s % hangul_t_count != 0) out.push_back(hangul_t + s % hangul_t_count);
    return;
  }
  const decomposition* d = cp < 0xC0 ? nullptr : find_decomposition(cp);
  if (d == nullptr) {
    out.push_back(cp);
    return;
  }
  append_canonical_decomposition(d->first, out);
  if (d->second != 0) append_canonical_decomposition(d->second, out);
}

// NFD: full canonical decomposition, then marks put in canonical order (a stable sort by
// combining class of every run of non-starters).
std::u32string nfd(const std::u32string& s) {
  // Below U+00C0 nothing decomposes.
  if (std::all_of(s.begin(), s.end(), [](char32_t cp) { return cp < 0xC0; })) return s;
  std::u32string out;
  out.reserve(s.size());
  for (char32_t cp : s) append_canonical_decomposition(cp, out);
  for (std::size_t i = 1; i < out.size(); ++i) {
    const unsigned cc = combining_class(out[i]);
    if (cc == 0) continue;
    std::size_t j = i;
    for (; j > 0; --j) {
      const unsigned prev = combining_class(out[j - 1]);
      if (prev == 0 || prev <= cc) break;
    }
    if (j != i) std::rotate(out.begin() + static_cast<std::ptrdiff_t>(j), out.begin() + static_cast<std::ptrdiff_t>(i),
                            out.begin() + static_cast<std::ptrdiff_t>(i) + 1);
  }
  return out;
}

// The primary composite of a + b, or 0.
char32_t compose_pair(char32_t a, char32_t b) {
  if (a >= hangul_l && a < hangul_l + hangul_l_count && b >= hangul_v && b < hangul_v + hangul_v_count)
    return hangul_s + ((a - hangul_l) * hangul_v_count + (b - hangul_v)) * hangul_t_count;
  if (a >= hangul_s && a < hangul_s + hangul_s_count && (a - hangul_s) % hangul_t_count == 0 && b > hangul_t &&
      b < hangul_t + hangul_t_count)
    return a + (b - hangul_t);
  struct pair {
    char32_t a, b, composite;
  };
  static const std::vector<pair> pairs = [] {
    std::vector<pair> p;
    for (const decomposition& d : decompositions)
      if (d.composes) p.push_back({d.first, d.second, d.cp});
    std::sort(p.begin(), p.end(), [](const pair& x, const pair& y) { return x.a != y.a ? x.a < y.a : x.b < y.b; });
    return p;
  }();
  const auto it = std::lower_bound(pairs.begin(), pairs.end(), std::make_pair(a, b), [](const pair& x, const auto& key) {
    return x.a != key.first ? x.a < key.first : x.b < key.second;
  });
  return it != pairs.end() && it->a == a && it->b == b ? it->composite : 0;
}

// NFC, as Python's unicodedata.normalize("NFC"): NFD, then every character not blocked from the
// last starter is composed with it where a primary composite exists.
std::u32string nfc(const std::u32string& s) {
  // Below U+0300 nothing decomposes to anything else in NFC and nothing combines.
  if (std::all_of(s.begin(), s.end(), [](char32_t cp) { return cp < 0x300; })) return s;
  std::u32string d = nfd(s);
  if (d.empty()) return d;
  std::size_t starter = 0, kept = 1;
  unsigned last_class = combining_class(d[0]) == 0 ? 0 : 256;  // 256: no starter to compose with
  for (std::size_t i = 1; i < d.size(); ++i) {
    const char32_t cp = d[i];
    const unsigned cc = combining_class(cp);
    const char32_t composite = last_class == 256 ? 0 : compose_pair(d[starter], cp);
    // Not blocked: nothing between the starter and cp, or everything between of a lower class.
    if (composite != 0 && (last_class < cc || last_class == 0)) {
      d[starter] = composite;
      continue;
    }
    if (cc == 0) {
      starter = kept;
      last_class = 0;
    } else if (last_class != 256) {
      last_class = cc;
    }
    d[kept++] = cp;
  }
  d.resize(kept);
  return d;
}

// Python's str.lower() of one character but U+03A3 (sigma, which depends on its neighbours).
void append_lower(char32_t cp, std::u32string& out) {
  if (cp < 0x80) {
    out.push_back(cp >= 'A' && cp <= 'Z' ? cp + 32 : cp);
    return;
  }
  for (const lower_multi_entry& m : lower_multi)
    if (m.cp == cp) {
      for (char32_t c : m.to) out.push_back(c);
      return;
    }
  // The last run that starts at or before cp.
  const lower_run* r = std::upper_bound(std::begin(lower_runs), std::end(lower_runs), cp,
                                        [](char32_t c, const lower_run& x) { return c < x.first; });
  if (r != std::begin(lower_runs)) {
    --r;
    if (cp <= r->last && (cp - r->first) % r->stride == 0) {
      out.push_back(static_cast<char32_t>(static_cast<std::int32_t>(cp) + r->delta));
      return;
    }
  }
  out.push_back(cp);
}

// Python's str.lower() of a word: per character, and capital sigma is final sigma (U+03C2) when a
// cased letter comes before it and none after it (case-ignorable characters skipped both ways).
std::u32string python_lower(const std::u32string& s) {
  std::u32string out;
  out.reserve(s.size());
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] != 0x3A3) {
      append_lower(s[i], out);
      continue;
    }
    std::size_t j = i;
    while (j > 0 && in_table(case_ignorable_ranges, s[j - 1])) --j;
    bool final_sigma = j > 0 && in_table(cased_ranges, s[j - 1]);
    if (final_sigma) {
      std::size_t k = i + 1;
      while (k < s.size() && in_table(case_ignorable_ranges, s[k])) ++k;
      final_sigma = k == s.size() || !in_table(cased_ranges, s[k]);
    }
    out.push_back(final_sigma ? 0x3C2 : 0x3C3);
  }
  return out;
}

std::string to_utf8(const std::u32string& s) {
  std::string out;
  out.reserve(s.size());
  for (char32_t cp : s) append_utf8(cp, out);
  return out;
}

const char* const special_tokens[] = {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"};

}  // namespace

bool is_valid_utf8(const std::string& text) {
  bool valid = true;
  decode_utf8(text, &valid);
  return valid;
}

std::vector<std::string> basic_tokenize(const std::string& text, bool lower_case) {
  // Hugging Face's BasicTokenizer.tokenize, step by step: clean (drop controls, whitespace to a
  // space) and space out CJK ideographs; NFC; split on whitespace; lower-case, NFD and drop Mn
  // (lower_case only); split off punctuation.
  std::u32string cleaned;
  for (char32_t cp : decode_utf8(text)) {
    if (is_control(cp)) continue;  // U+0000 and U+FFFD (invalid UTF-8) included
    if (is_whitespace(cp)) {
      cleaned.push_back(' ');
    } else if (is_cjk(cp)) {
      cleaned.push_back(' ');
      cleaned.push_back(cp);
      cleaned.push_back(' ');
    } else {
      cleaned.push_back(cp);
    }
  }
  const std::u32string normalized = nfc(cleaned);

  std::vector<std::string> words;
  std::u32string piece;
  const auto end_piece = [&] {
    if (!piece.empty()) words.push_back(to_utf8(piece));
    piece.clear();
  };
  std::size_t start = 0;
  while (start < normalized.size()) {
    std::size_t end = start;
    while (end < normalized.size() && !is_whitespace(normalized[end])) ++end;
    if (end > start) {
      std::u32string word = normalized.substr(start, end - start);
      if (lower_case) {
        word = nfd(python_lower(word));
        word.erase(std::remove_if(word.begin(), word.end(), is_nonspacing_mark), word.end());
      }
      for (char32_t cp : word) {
        if (is_punctuation(cp)) {
          end_piece();
          words.push_back(to_utf8(std::u32string(1, cp)));
        } else {
          piece.push_back(cp);
        }
      }
      end_piece();
    }
    start = end + 1;
  }
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
