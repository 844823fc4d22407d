// BERT's tokenizer, by hand-checked cases: sub-word splits and [UNK] with a small vocab.txt
// written here, cleaning, lower-casing and accent stripping, punctuation and CJK splitting, UTF-8
// that is not valid, the fixed-length encoding with BERT's pair truncation, word vocabularies;
// and the character classes, NFC and lower-casing against Hugging Face's Python BertTokenizer.
#include <catch2/catch.hpp>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <initializer_list>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/data/wordpiece.hpp"

using namespace actorpipe;
using Catch::Contains;
using strings = std::vector<std::string>;
using ids = std::vector<std::int32_t>;

namespace {

// A file under the temp directory, removed when the test ends.
struct temp_file {
  std::string path;
  explicit temp_file(const std::string& name)
      : path("/tmp/actorpipe_wordpiece_test_" + std::to_string(::getpid()) + "_" + name) {}
  ~temp_file() { std::remove(path.c_str()); }
  void write(const std::string& text) const {
    std::ofstream f(path, std::ios::binary | std::ios::trunc);
    f << text;
  }
};

// BERT's tokenization_test vocabulary, plus [PAD], [MASK] and the pieces of "unaffable".
// Ids are line numbers: [PAD]=0 [UNK]=1 [CLS]=2 [SEP]=3 [MASK]=4 want=5 ##want=6 ##ed=7 wa=8
// un=9 runn=10 ##ing=11 ,=12 ##aff=13 ##able=14.
const char* const small_vocab =
    "[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\nwant\n##want\n##ed\nwa\nun\nrunn\n##ing\n,\n##aff\n##able\n";

wordpiece_tokenizer small_tokenizer(const wordpiece_options& options = {}) {
  temp_file f("vocab.txt");
  f.write(small_vocab);
  return wordpiece_tokenizer::from_vocab_file(f.path, options);
}

}  // namespace

CATCH_TEST_CASE("wordpiece splits a word into the longest sub-words first", "[data][wordpiece]") {
  const wordpiece_tokenizer t = small_tokenizer();
  CATCH_CHECK(t.vocab_size() == 15);
  CATCH_CHECK(t.tokenize("unaffable") == strings{"un", "##aff", "##able"});
  CATCH_CHECK(t.ids("unaffable") == ids{9, 13, 14});
  // BERT's own test: lower-cased, é unaccented, the comma split off.
  CATCH_CHECK(t.tokenize("UNwant\xC3\xA9" "d,running") == strings{"un", "##want", "##ed", ",", "runn", "##ing"});
  CATCH_CHECK(t.ids("UNwant\xC3\xA9" "d,running") == ids{9, 6, 7, 12, 10, 11});
  CATCH_CHECK(t.tokenize("") == strings{});
  CATCH_CHECK(t.tokenize(" \t\n ") == strings{});
}

CATCH_TEST_CASE("wordpiece gives [UNK] for a word without a match and for a too-long word", "[data][wordpiece]") {
  const wordpiece_tokenizer t = small_tokenizer();
  // "unwantedX": un ##want ##ed fit, "##X" does not, so the whole word is [UNK].
  CATCH_CHECK(t.tokenize("unwantedX running") == strings{"[UNK]", "runn", "##ing"});
  CATCH_CHECK(t.ids("unwantedX running") == ids{1, 10, 11});
  CATCH_CHECK(t.tokenize("xyz") == strings{"[UNK]"});

  // 100 characters is the longest word WordPiece looks at; 101 is [UNK] without a look.
  const wordpiece_tokenizer a = wordpiece_tokenizer::from_tokens({"[PAD]", "[UNK]", "[CLS]", "[SEP]", "a", "##a"}, "test");
  CATCH_CHECK(a.ids(std::string(100, 'a')).size() == 100);
  CATCH_CHECK(a.tokenize(std::string(101, 'a')) == strings{"[UNK]"});
  // Characters, not bytes: 100 two-byte 'á' (unaccented to 'a') still fit.
  std::string accented;
  for (int i = 0; i < 100; ++i) accented += "\xC3\xA1";
  CATCH_CHECK(a.ids(accented).size() == 100);

  wordpiece_options short_words;
  short_words.max_word_chars = 4;
  const wordpiece_tokenizer s = small_tokenizer(short_words);
  CATCH_CHECK(s.tokenize("want wanted") == strings{"want", "[UNK]"});
  short_words.max_word_chars = 0;
  CATCH_CHECK_THROWS_WITH(small_tokenizer(short_words), Contains("max_word_chars=0"));
}

CATCH_TEST_CASE("basic tokenization lower-cases and strips accents", "[data][wordpiece]") {
  CATCH_CHECK(basic_tokenize("H\xC3\xA9llo", true) == strings{"hello"});  // Héllo
  CATCH_CHECK(basic_tokenize("H\xC3\xA9llo", false) == strings{"H\xC3\xA9llo"});
  // e + COMBINING ACUTE ACCENT (already decomposed) loses the mark too.
  CATCH_CHECK(basic_tokenize("Caf" "e\xCC\x81", true) == strings{"cafe"});
  // ÀÉÎÕÜ Ç Ñ ÿ -> plain letters; ß, æ and ø have no decomposition: only lower-cased.
  CATCH_CHECK(basic_tokenize("\xC3\x80\xC3\x89\xC3\x8E\xC3\x95\xC3\x9C \xC3\x87\xC3\x91\xC3\xBF", true) ==
              strings{"aeiou", "cny"});
  CATCH_CHECK(basic_tokenize("Stra\xC3\x9F" "e \xC3\x86sir \xC3\x98re", true) ==
              strings{"stra\xC3\x9F" "e", "\xC3\xA6sir", "\xC3\xB8re"});
  // Latin Extended-A: Łódź -> łodz, Œuvre -> œuvre, İstanbul -> istanbul, Šťastný -> stastny.
  CATCH_CHECK(basic_tokenize("\xC5\x81\xC3\xB3\x64\xC5\xBA \xC5\x92uvre \xC4\xB0stanbul \xC5\xA0\xC5\xA5" "astn\xC3\xBD",
                             true) == strings{"\xC5\x82odz", "\xC5\x93uvre", "istanbul", "stastny"});
  // × and ÷ are symbols, not letters: kept as they are, inside the word.
  CATCH_CHECK(basic_tokenize("2\xC3\x97" "3", true) == strings{"2\xC3\x97" "3"});
}

CATCH_TEST_CASE("basic tokenization splits punctuation into tokens of its own", "[data][wordpiece]") {
  CATCH_CHECK(basic_tokenize("hello,world!", true) == strings{"hello", ",", "world", "!"});
  CATCH_CHECK(basic_tokenize("a$b`c~d", true) == strings{"a", "$", "b", "`", "c", "~", "d"});
  CATCH_CHECK(basic_tokenize("don't...", true) == strings{"don", "'", "t", ".", ".", "."});
  // Em dash (U+2014), curly quotes (U+201C/D), inverted question mark (U+00BF).
  CATCH_CHECK(basic_tokenize("a\xE2\x80\x94" "b \xE2\x80\x9Cq\xE2\x80\x9D \xC2\xBFs?", true) ==
              strings{"a", "\xE2\x80\x94", "b", "\xE2\x80\x9C", "q", "\xE2\x80\x9D", "\xC2\xBF", "s", "?"});
  // A vocab whose specials look like punctuation still splits them in text, as BERT does.
  CATCH_CHECK(basic_tokenize("[CLS]", false) == strings{"[", "CLS", "]"});
}

CATCH_TEST_CASE("basic tokenization puts every CJK ideograph in a token of its own", "[data][wordpiece]") {
  // ab中文cd: 中 is U+4E2D, 文 U+6587.
  CATCH_CHECK(basic_tokenize("ab\xE4\xB8\xAD\xE6\x96\x87" "cd", true) ==
              strings{"ab", "\xE4\xB8\xAD", "\xE6\x96\x87", "cd"});
  // Ideographic full stop U+3002 is punctuation; hiragana (U+3072 U+3089) is not spaced out.
  CATCH_CHECK(basic_tokenize("\xE4\xB8\xAD\xE3\x80\x82\xE3\x81\xB2\xE3\x82\x89", true) ==
              strings{"\xE4\xB8\xAD", "\xE3\x80\x82", "\xE3\x81\xB2\xE3\x82\x89"});
  // An ideograph from plane 2 (U+20000).
  CATCH_CHECK(basic_tokenize("x\xF0\xA0\x80\x80y", true) == strings{"x", "\xF0\xA0\x80\x80", "y"});
}

CATCH_TEST_CASE("basic tokenization cleans whitespace, control characters and invalid UTF-8", "[data][wordpiece]") {
  CATCH_CHECK(basic_tokenize("a\tb\nc\r\nd  e", true) == strings{"a", "b", "c", "d", "e"});
  // No-break space (U+00A0) and ideographic space (U+3000) separate words.
  CATCH_CHECK(basic_tokenize("a\xC2\xA0" "b\xE3\x80\x80" "c", true) == strings{"a", "b", "c"});
  // NUL, other C0 controls, DEL, U+FFFD, zero-width space and a BOM are dropped, not spaces.
  CATCH_CHECK(basic_tokenize(std::string("a\0b\x01" "c\x7F" "d", 7), true) == strings{"abcd"});
  CATCH_CHECK(basic_tokenize("a\xEF\xBF\xBD" "b\xE2\x80\x8B" "c\xEF\xBB\xBF" "d", true) == strings{"abcd"});
  // Invalid bytes, an overlong '/', a surrogate and a cut-short character are dropped.
  CATCH_CHECK(basic_tokenize("ab\xFF\xFE" "cd", true) == strings{"abcd"});
  CATCH_CHECK(basic_tokenize("a\xC0\xAF" "b\xED\xA0\x80" "c", true) == strings{"abc"});
  CATCH_CHECK(basic_tokenize("ab\xE4\xB8", true) == strings{"ab"});
  CATCH_CHECK(basic_tokenize("\xC3" "a", true) == strings{"a"});  // a lead byte then ASCII: the ASCII stays
  // A four-byte character that is not an ideograph stays in its word.
  CATCH_CHECK(basic_tokenize("hi\xF0\x9F\x98\x80", true) == strings{"hi\xF0\x9F\x98\x80"});
}

CATCH_TEST_CASE("basic tokenization of random bytes never fails and gives valid UTF-8 words", "[data][wordpiece]") {
  std::mt19937 rng(7);
  std::uniform_int_distribution<int> byte(0, 255), length(0, 40);
  const wordpiece_tokenizer t = small_tokenizer();
  for (int i = 0; i < 2000; ++i) {
    std::string s(length(rng), '\0');
    for (char& c : s) c = static_cast<char>(byte(rng));
    for (bool lower : {true, false}) {
      const strings words = basic_tokenize(s, lower);
      // Valid UTF-8 with nothing left to clean or split comes back unchanged.
      for (const std::string& w : words) CATCH_REQUIRE(basic_tokenize(w, lower) == strings{w});
    }
    CATCH_REQUIRE(t.ids(s).size() <= s.size());
  }
}

CATCH_TEST_CASE("a vocab.txt without the BERT special tokens is an error naming the file and them",
                "[data][wordpiece]") {
  temp_file f("bad_vocab.txt");
  f.write("[UNK]\n[CLS]\nhello\n");
  CATCH_CHECK_THROWS_WITH(wordpiece_tokenizer::from_vocab_file(f.path),
                          Contains(f.path) && Contains("lacks [PAD], [SEP]"));
  f.write("");
  CATCH_CHECK_THROWS_WITH(wordpiece_tokenizer::from_vocab_file(f.path), Contains(f.path) && Contains("is empty"));
  CATCH_CHECK_THROWS_WITH(wordpiece_tokenizer::from_vocab_file(f.path + ".missing"),
                          Contains(f.path + ".missing") && Contains("cannot be opened"));
  CATCH_CHECK_THROWS_WITH(wordpiece_tokenizer::from_vocab_file("/tmp"), "vocab file '/tmp' is a directory, not a vocab.txt");
  CATCH_CHECK_THROWS_WITH(wordpiece_tokenizer::from_vocab_file("/dev/zero"),
                          "vocab file '/dev/zero' is not a regular file (a pipe or a device?): give a file");
  // An editor's byte-order mark before [PAD] (it read as lacking [PAD]).
  f.write("\xEF\xBB\xBF[PAD]\n[UNK]\n[CLS]\n[SEP]\nhello\n");
  CATCH_CHECK(wordpiece_tokenizer::from_vocab_file(f.path).vocab_size() == 5);
  CATCH_CHECK_THROWS_WITH(wordpiece_tokenizer::from_tokens({"[PAD]", "[UNK]", "[CLS]"}, "my tokens"),
                          Contains("my tokens lacks [SEP]"));
}

CATCH_TEST_CASE("vocab.txt ids are line numbers and lookups go both ways", "[data][wordpiece]") {
  temp_file f("crlf_vocab.txt");
  f.write("hello\r\n[PAD]\r\n[UNK]\r\n[CLS]\r\n[SEP]\r\n##lo\r\n");  // CRLF, no [MASK]
  const wordpiece_tokenizer t = wordpiece_tokenizer::from_vocab_file(f.path);
  CATCH_CHECK(t.vocab_size() == 6);
  CATCH_CHECK(t.pad_id() == 1);
  CATCH_CHECK(t.unk_id() == 2);
  CATCH_CHECK(t.cls_id() == 3);
  CATCH_CHECK(t.sep_id() == 4);
  CATCH_CHECK(t.mask_id() == -1);
  CATCH_CHECK(t.id_of("hello") == 0);
  CATCH_CHECK(t.id_of("##lo") == 5);
  CATCH_CHECK(t.id_of("nope") == -1);
  CATCH_CHECK(t.token_of(5) == "##lo");
  CATCH_CHECK_THROWS_AS(t.token_of(6), std::out_of_range);
  CATCH_CHECK_THROWS_WITH(t.token_of(-1), Contains("token id -1") && Contains("[0, 6)"));
  CATCH_CHECK(small_tokenizer().mask_id() == 4);
}

CATCH_TEST_CASE("encode pads one sentence to seq_len and cuts it to seq_len - 2", "[data][wordpiece]") {
  const wordpiece_tokenizer t = small_tokenizer();
  const encoded_text e = t.encode("unaffable", 8);  // [CLS] un ##aff ##able [SEP] [PAD] x3
  CATCH_CHECK(e.input_ids == ids{2, 9, 13, 14, 3, 0, 0, 0});
  CATCH_CHECK(e.token_type_ids == ids{0, 0, 0, 0, 0, 0, 0, 0});
  CATCH_CHECK(e.attention_mask == ids{1, 1, 1, 1, 1, 0, 0, 0});

  const encoded_text cut = t.encode("unaffable", 4);  // [CLS] un ##aff [SEP]
  CATCH_CHECK(cut.input_ids == ids{2, 9, 13, 3});
  CATCH_CHECK(cut.attention_mask == ids{1, 1, 1, 1});
  CATCH_CHECK(t.encode("unaffable", 2).input_ids == ids{2, 3});
  CATCH_CHECK(t.encode("", 3).input_ids == ids{2, 3, 0});
  CATCH_CHECK_THROWS_WITH(t.encode("want", 1), Contains("seq_len=1"));
}

CATCH_TEST_CASE("encode_pair trims the longer sentence first, as BERT's _truncate_seq_pair", "[data][wordpiece]") {
  const wordpiece_tokenizer t = small_tokenizer();
  // a = un ##aff ##able want (4 tokens), b = runn ##ing (2).
  const std::string a = "unaffable want", b = "running";

  // Room for 9 + 3: nothing cut, 3 of padding (type 0, mask 0).
  const encoded_text padded = t.encode_pair(a, b, 12);
  CATCH_CHECK(padded.input_ids == ids{2, 9, 13, 14, 5, 3, 10, 11, 3, 0, 0, 0});
  CATCH_CHECK(padded.token_type_ids == ids{0, 0, 0, 0, 0, 0, 1, 1, 1, 0, 0, 0});
  CATCH_CHECK(padded.attention_mask == ids{1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0});

  // Room for 5: a (longer) loses "want".
  const encoded_text e8 = t.encode_pair(a, b, 8);
  CATCH_CHECK(e8.input_ids == ids{2, 9, 13, 14, 3, 10, 11, 3});
  CATCH_CHECK(e8.token_type_ids == ids{0, 0, 0, 0, 0, 1, 1, 1});
  CATCH_CHECK(e8.attention_mask == ids{1, 1, 1, 1, 1, 1, 1, 1});

  // Room for 3: a 4 -> 3 -> 2, then a tie of 2 and 2 takes from b.
  const encoded_text e6 = t.encode_pair(a, b, 6);
  CATCH_CHECK(e6.input_ids == ids{2, 9, 13, 3, 10, 3});
  CATCH_CHECK(e6.token_type_ids == ids{0, 0, 0, 0, 1, 1});
  CATCH_CHECK(e6.attention_mask == ids{1, 1, 1, 1, 1, 1});

  // The shorter side (b first) is trimmed only once it is the longer.
  CATCH_CHECK(t.encode_pair(b, a, 7).input_ids == ids{2, 10, 11, 3, 9, 13, 3});
  CATCH_CHECK(t.encode_pair(a, b, 3).input_ids == ids{2, 3, 3});
  CATCH_CHECK(t.encode_pair(a, b, 3).token_type_ids == ids{0, 0, 1});
  CATCH_CHECK_THROWS_WITH(t.encode_pair(a, b, 2), Contains("seq_len=2"));
}

CATCH_TEST_CASE("a word vocabulary from texts puts specials first, then words by count, then alphabetically",
                "[data][wordpiece]") {
  const strings texts = {"the cat sat.", "The dog, the cat!"};
  const wordpiece_tokenizer t = wordpiece_tokenizer::from_texts(texts);
  // the x3, cat x2, then the ones seen once in byte order: ! , . dog sat.
  CATCH_CHECK(t.vocab() == strings{"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "cat", "!", ",", ".", "dog", "sat"});
  CATCH_CHECK(t.pad_id() == 0);
  CATCH_CHECK(t.unk_id() == 1);
  CATCH_CHECK(t.cls_id() == 2);
  CATCH_CHECK(t.sep_id() == 3);
  CATCH_CHECK(t.mask_id() == 4);
  CATCH_CHECK(t.ids("The bird sat!") == ids{5, 1, 11, 7});
  // A word vocabulary has no "##" pieces: an unknown word is one [UNK], even when a prefix is known.
  CATCH_CHECK(t.tokenize("cats") == strings{"[UNK]"});

  CATCH_CHECK(wordpiece_tokenizer::from_texts(texts, {}, 2).vocab() ==
              strings{"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "cat"});
  wordpiece_options cased;
  cased.lower_case = false;
  CATCH_CHECK(wordpiece_tokenizer::from_texts(texts, cased).vocab()[5] == "cat");  // the x2, The x1, cat x2

  // Written out and read back, the ids are the same.
  temp_file f("words.txt");
  t.write_vocab_file(f.path);
  const wordpiece_tokenizer back = wordpiece_tokenizer::from_vocab_file(f.path);
  CATCH_CHECK(back.vocab() == t.vocab());
  CATCH_CHECK(back.ids("The bird sat!") == ids{5, 1, 11, 7});
}

// Hugging Face's Python BertTokenizer (BasicTokenizer: google-research/bert's rules with Python's
// unicodedata, then NFC) gives the expected tokens below; they were computed with it.
namespace {

std::string utf8(const std::u32string& s) {
  std::string out;
  for (char32_t cp : s) {
    if (cp < 0x80) {
      out += static_cast<char>(cp);
    } else if (cp < 0x800) {
      out += static_cast<char>(0xC0 | (cp >> 6));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
      out += static_cast<char>(0xE0 | (cp >> 12));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    } else {
      out += static_cast<char>(0xF0 | (cp >> 18));
      out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    }
  }
  return out;
}

strings words(std::initializer_list<std::u32string> ws) {
  strings out;
  for (const std::u32string& w : ws) out.push_back(utf8(w));
  return out;
}

strings uncased(const std::u32string& text) { return basic_tokenize(utf8(text), true); }
strings cased(const std::u32string& text) { return basic_tokenize(utf8(text), false); }

}  // namespace

CATCH_TEST_CASE("punctuation is BERT's: ASCII symbols and category P*, not other symbols", "[data][wordpiece]") {
  // Full-width + $ < = > ^ ` | ~ are symbols (Sm, Sc, Sk), not P*: they stay inside the word.
  const std::u32string fullwidth_symbols = U"a\uFF0Bb\uFF04c\uFF1Cd\uFF1De\uFF1Ef\uFF3Eg\uFF40h\uFF5Ci\uFF5Ej";
  CATCH_CHECK(uncased(fullwidth_symbols) == words({fullwidth_symbols}));
  // U+2044 fraction slash, U+2052 commercial minus, U+2E50/U+2E51 crosses, U+2E2F vertical tilde.
  CATCH_CHECK(uncased(U"1\u20442 a\u2052b c\u2E50d\u2E51e f\u2E2Fg") ==
              words({U"1\u20442", U"a\u2052b", U"c\u2E50d\u2E51e", U"f\u2E2Fg"}));
  // Full-width ! ( ) are punctuation.
  CATCH_CHECK(uncased(U"a\uFF01b\uFF08c\uFF09") == words({U"a", U"\uFF01", U"b", U"\uFF08", U"c", U"\uFF09"}));
  // Devanagari danda, Arabic comma and question mark, Armenian comma and full stop, Hebrew maqaf
  // and sof pasuq.
  CATCH_CHECK(uncased(U"\u0915\u0964 a\u060Cb\u061F \u0570\u055D\u0589 \u05D0\u05BE\u05D1\u05C3") ==
              words({U"\u0915", U"\u0964", U"a", U"\u060C", U"b", U"\u061F", U"\u0570", U"\u055D", U"\u0589", U"\u05D0",
                     U"\u05BE", U"\u05D1", U"\u05C3"}));
  // The Greek question mark and ano teleia are split off as what NFC makes of them: ';' and U+00B7.
  CATCH_CHECK(uncased(U"a\u037Eb c\u0387d") == words({U"a", U";", U"b", U"c", U"\u00B7", U"d"}));
  CATCH_CHECK(cased(U"a\u037Eb c\u0387d") == words({U"a", U";", U"b", U"c", U"\u00B7", U"d"}));
  // Wavy dash U+3030, katakana double hyphen U+30A0, vertical and small forms, angle brackets
  // U+27E8/9, ceilings U+2308/9.
  CATCH_CHECK(uncased(U"a\u3030b\u30A0c") == words({U"a", U"\u3030", U"b", U"\u30A0", U"c"}));
  CATCH_CHECK(uncased(U"a\uFE10b\uFE19c\uFE30d\uFE50e\uFE6Bf") ==
              words({U"a", U"\uFE10", U"b", U"\uFE19", U"c", U"\uFE30", U"d", U"\uFE50", U"e", U"\uFE6B", U"f"}));
  CATCH_CHECK(uncased(U"\u27E8x\u27E9 \u2308y\u2309") == words({U"\u27E8", U"x", U"\u27E9", U"\u2308", U"y", U"\u2309"}));
}

CATCH_TEST_CASE("whitespace is BERT's plus what Python's str.split() splits on after cleaning", "[data][wordpiece]") {
  // Line and paragraph separators (Zl, Zp) are not BERT whitespace but Hugging Face's
  // whitespace_tokenize (str.split()) splits on them.
  CATCH_CHECK(uncased(U"x\u2028y\u2029z") == words({U"x", U"y", U"z"}));
  CATCH_CHECK(cased(U"x\u2028y\u2029z") == words({U"x", U"y", U"z"}));
  // NEL, the information separators, \v and \f are Cc: dropped before str.split() sees them.
  CATCH_CHECK(uncased(U"x\u0085y\u001Cz\u000Bw\u000C") == words({U"xyzw"}));
  // Ogham space mark and narrow no-break space are Zs.
  CATCH_CHECK(uncased(U"x\u1680y\u202Fz") == words({U"x", U"y", U"z"}));
}

CATCH_TEST_CASE("every C* character is dropped: format, tag, private-use and unassigned", "[data][wordpiece]") {
  CATCH_CHECK(uncased(U"a\U000E0001b\U000E0041c") == words({U"abc"}));
  // The flag of Scotland: a black flag and tag characters; the tags go.
  CATCH_CHECK(uncased(U"\U0001F3F4\U000E0067\U000E0062\U000E0073\U000E0063\U000E0074\U000E007F") ==
              words({U"\U0001F3F4"}));
  const std::u32string format_chars =
      U"a\u0890b\u0891c\u08E2d\U000110BDe\U000110CDf\U00013430g\U0001343Fh\U0001BCA0i\U0001BCA3j\U0001D173k\U0001D17Al";
  CATCH_CHECK(uncased(format_chars) == words({U"abcdefghijkl"}));
  CATCH_CHECK(cased(format_chars) == words({U"abcdefghijkl"}));
  // Unassigned (Cn) U+0378 and private use (Co) U+E000, U+F0000.
  CATCH_CHECK(uncased(U"a\u0378b\uE000c\U000F0000d") == words({U"abcd"}));
}

CATCH_TEST_CASE("stripping accents drops Mn after NFD: variation selectors go, enclosing marks stay",
                "[data][wordpiece]") {
  CATCH_CHECK(uncased(U"a\u20DDb\u20E2c\u1ABEd") == words({U"a\u20DDb\u20E2c\u1ABEd"}));
  CATCH_CHECK(uncased(U"I \u2764\uFE0F it") == words({U"i", U"\u2764", U"it"}));
  CATCH_CHECK(cased(U"I \u2764\uFE0F it") == words({U"I", U"\u2764\uFE0F", U"it"}));
}

CATCH_TEST_CASE("CJK ideographs are BERT's list of blocks, as NFC writes them", "[data][wordpiece]") {
  // In: U+4DBF, U+2A6DF, U+2CEAF, U+2F800 (NFC: U+4E3D), U+F900 (NFC: U+8C48). Out: U+4DC0 (a
  // hexagram), U+2CEB0 (Extension F) and U+30000 (Extension G), which BERT's list lacks.
  const strings expected = words({U"\u4DBF", U"a\u4DC0b", U"\U0002A6DF", U"cd\U0002CEB0e\U00030000f", U"\u4E3D", U"g",
                                  U"\u8C48", U"h"});
  const std::u32string text = U"\u4DBFa\u4DC0b\U0002A6DFc\U0002CEAFd\U0002CEB0e\U00030000f\U0002F800g\uF900h";
  CATCH_CHECK(uncased(text) == expected);
  CATCH_CHECK(cased(text) == expected);
}

CATCH_TEST_CASE("text is NFC, and lower-casing is Python's str.lower() for every script", "[data][wordpiece]") {
  // Cased: e + combining acute composes to U+00E9; the angstrom sign is U+00C5.
  CATCH_CHECK(cased(U"Cafe\u0301 \u212B") == words({U"Caf\u00E9", U"\u00C5"}));
  CATCH_CHECK(uncased(U"Cafe\u0301 \u212B") == words({U"cafe", U"a"}));
  // Hangul jamo compose into a syllable; lower-casing decomposes them again.
  CATCH_CHECK(cased(U"\u1100\u1161\u11A8 \uAC00") == words({U"\uAC01", U"\uAC00"}));
  CATCH_CHECK(uncased(U"\u1100\u1161\u11A8 \uAC00") == words({U"\u1100\u1161\u11A8", U"\u1100\u1161"}));
  // A composition exclusion stays decomposed; its nukta is Mn.
  CATCH_CHECK(cased(U"\u0958") == words({U"\u0915\u093C"}));
  CATCH_CHECK(uncased(U"\u0958") == words({U"\u0915"}));
  // Greek varia is a grave accent (punctuation) in NFC.
  CATCH_CHECK(cased(U"\u1FEF") == words({U"`"}));
  // Greek capital sigma at the end of a word is final sigma (an apostrophe is case-ignorable).
  CATCH_CHECK(uncased(U"\u039F\u0394\u039F\u03A3 \u03A3\u0391\u03A3. \u03A3 A\u03A3'") ==
              words({U"\u03BF\u03B4\u03BF\u03C2", U"\u03C3\u03B1\u03C2", U".", U"\u03C3", U"a\u03C2", U"'"}));
  CATCH_CHECK(cased(U"\u039F\u0394\u039F\u03A3") == words({U"\u039F\u0394\u039F\u03A3"}));
  // Cyrillic; U+0401 loses its diaeresis.
  CATCH_CHECK(uncased(U"\u041F\u0420\u0418\u0412\u0415\u0422 \u0401\u0416") ==
              words({U"\u043F\u0440\u0438\u0432\u0435\u0442", U"\u0435\u0436"}));
  // U+0130 lowers to i + U+0307 (dropped); capital sharp s to U+00DF.
  CATCH_CHECK(uncased(U"\u0130stanbul \u1E9E") == words({U"istanbul", U"\u00DF"}));
}
