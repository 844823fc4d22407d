// BERT's tokenizer, by hand-checked cases: sub-word splits and [UNK] with a small vocab.txt
// written here, cleaning, lower-casing and accent stripping, punctuation and CJK splitting, UTF-8
// that is not valid, the fixed-length encoding with BERT's pair truncation, word vocabularies.
#include <catch2/catch.hpp>
#include <unistd.h>

#include <cstdio>
#include <fstream>
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
