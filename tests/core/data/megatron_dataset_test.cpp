// Megatron-LM indexed datasets (.bin + .idx, MMIDIDX version 1) as token files: every integer
// token type reads the same tokens a flat uint16 file of them reads, at the same offsets; the
// index's header and sequences are checked, each error by its message.
#include <catch2/catch.hpp>
#include <unistd.h>

#include <filesystem>

#include <cstdint>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "core/data/token_source.hpp"
#include "core/log.hpp"
#include "tests/support/megatron_files.hpp"

using namespace actorpipe;
using Catch::Contains;

namespace {

using testing::put_le;
const auto& write_file = testing::write_bytes;

// A Megatron dataset at `prefix`.bin / .idx, written as Megatron's index writer lays it out: one
// sequence per document, the sequences end to end in the .bin.
struct megatron_dataset {
  std::string prefix, bin, idx;
  explicit megatron_dataset(const std::string& name)
      : prefix("/tmp/actorpipe_megatron_test_" + std::to_string(::getpid()) + "_" + name),
        bin(prefix + ".bin"),
        idx(prefix + ".idx") {}
  ~megatron_dataset() {
    std::remove(bin.c_str());
    std::remove(idx.c_str());
  }
  // Type `code` of `bytes` bytes a token; the index's parts as given, or as Megatron writes them.
  void write(const std::vector<std::vector<std::int64_t>>& docs, int code, int bytes) const {
    std::vector<std::int64_t> all, lengths;
    for (const auto& d : docs) {
      lengths.push_back(static_cast<std::int64_t>(d.size()));
      all.insert(all.end(), d.begin(), d.end());
    }
    write_file(bin, testing::token_bytes(all, bytes));
    write_index(code, lengths, testing::end_to_end(lengths, bytes), docs.size() + 1);
  }
  void write_index(int code, const std::vector<std::int64_t>& lengths, const std::vector<std::int64_t>& pointers,
                   std::size_t doc_entries, const std::string& magic = std::string("MMIDIDX\0\0", 9),
                   std::uint64_t version = 1) const {
    write_file(idx, testing::megatron_index(code, lengths, pointers, doc_entries, magic, version));
  }
};

std::vector<std::int32_t> seq(const token_source& s, std::uint64_t step, std::uint64_t index, int seq_len) {
  std::vector<std::int32_t> out(seq_len + 1, -1);
  s.sequence(step, index, seq_len, out.data());
  return out;
}
std::vector<std::int32_t> eval_seq(const token_source& s, std::uint64_t index, int seq_len) {
  std::vector<std::int32_t> out(seq_len + 1, -1);
  s.eval_sequence(index, seq_len, out.data());
  return out;
}

// Three documents of 700, 1 and 1299 tokens below `top`, 2000 in all.
std::vector<std::vector<std::int64_t>> three_documents(std::int64_t top) {
  std::vector<std::vector<std::int64_t>> docs(3);
  const std::size_t sizes[] = {700, 1, 1299};
  std::int64_t k = 0;
  for (int d = 0; d < 3; ++d)
    for (std::size_t i = 0; i < sizes[d]; ++i, ++k) docs[d].push_back((k * 7919 + 13) % top);
  return docs;
}

}  // namespace

CATCH_TEST_CASE("megatron dataset: every integer token type reads the tokens a flat uint16 file of them reads", "[data]") {
  const auto docs = three_documents(250);
  std::vector<unsigned char> flat;
  for (const auto& d : docs)
    for (std::int64_t t : d) put_le(flat, static_cast<std::uint64_t>(t), 2);
  const std::string flat_path = "/tmp/actorpipe_megatron_test_" + std::to_string(::getpid()) + "_flat.bin";
  write_file(flat_path, flat);
  const int S = 16;
  const auto reference = open_token_file(flat_path, 256, S + 1, 99, 300);
  struct type {
    int code, bytes;
    const char* name;
  };
  for (const type t : {type{1, 1, "uint8"}, type{2, 1, "int8"}, type{3, 2, "int16"}, type{4, 4, "int32"},
                       type{5, 8, "int64"}, type{8, 2, "uint16"}}) {
    CATCH_INFO(t.name);
    megatron_dataset m(std::string("types_") + t.name);
    auto small = docs;
    if (t.code == 2)  // int8 holds ids below 128
      for (auto& d : small)
        for (auto& v : d) v %= 128;
    m.write(t.code == 2 ? small : docs, t.code, t.bytes);
    const token_file_format f = read_token_file_format(m.bin);
    CATCH_CHECK(f.type == t.name);
    CATCH_CHECK(f.token_bytes == t.bytes);
    CATCH_CHECK(f.index_path == m.idx);
    CATCH_CHECK(f.tokens == 2000);
    CATCH_CHECK(f.sequences == 3);
    CATCH_CHECK(f.documents == 3);
    const auto src = open_token_file(m.bin, 256, S + 1, 99, 300);
    CATCH_CHECK_THAT(src->describe(), Contains("Megatron dataset '" + m.bin + "' (" + t.name +
                                               " tokens, 3 sequences in 3 documents by its index '" + m.idx +
                                               "'; 2000 tokens, vocab 256; training reads its first 1700, its last 300 "
                                               "are held out)"));
    if (t.code == 2) continue;  // other tokens than the flat file's
    for (std::uint64_t step = 0; step < 3; ++step)
      for (std::uint64_t index = 0; index < 40; ++index) CATCH_REQUIRE(seq(*src, step, index, S) == seq(*reference, step, index, S));
    CATCH_REQUIRE(src->eval_sequences(S) == reference->eval_sequences(S));
    for (std::uint64_t index = 0; index < src->eval_sequences(S); ++index)
      CATCH_REQUIRE(eval_seq(*src, index, S) == eval_seq(*reference, index, S));
  }
  std::remove(flat_path.c_str());
}

CATCH_TEST_CASE("megatron dataset: int32 tokens past uint16, and the vocabulary checked in every type", "[data]") {
  megatron_dataset m("wide");
  auto docs = three_documents(60000);
  docs[2][5] = 70000;  // 70000 read as uint16 would be 4464
  m.write(docs, 4, 4);
  const auto src = open_token_file(m.bin, 100000, 9);
  std::vector<std::int32_t> all;
  for (const auto& d : docs) all.insert(all.end(), d.begin(), d.end());
  bool saw = false;
  for (std::uint64_t index = 0; index < 2000 && !saw; ++index) {
    const auto s = seq(*src, 0, index, 8);
    for (std::int32_t t : s) saw = saw || t == 70000;
  }
  CATCH_CHECK(saw);
  CATCH_CHECK_THROWS_AS(open_token_file(m.bin, 70000, 9), token_out_of_vocab);
  CATCH_CHECK_THROWS_WITH(open_token_file(m.bin, 70000, 9),
                          "data file '" + m.bin + "' token 70000 at position 706 is >= vocab 70000");
  docs[0][3] = -7;
  m.write(docs, 4, 4);
  CATCH_CHECK_THROWS_WITH(open_token_file(m.bin, 100000, 9),
                          "data file '" + m.bin + "' token -7 at position 3 is below 0: no token id (int32 tokens)");
  docs[0][3] = 1;
  for (auto& d : docs)
    for (auto& v : d) v %= 256;
  docs[1][0] = 300;
  m.write(docs, 8, 2);  // uint16: 300 checked against 256
  CATCH_CHECK_THROWS_WITH(open_token_file(m.bin, 256, 9), Contains("token 300 at position 700 is >= vocab 256"));
}

CATCH_TEST_CASE("megatron dataset: which files have an index", "[data]") {
  megatron_dataset m("which");
  m.write(three_documents(50), 8, 2);
  CATCH_CHECK(megatron_index_of(m.bin) == m.idx);
  CATCH_CHECK(megatron_index_of(m.prefix) == "");  // the prefix names no file of tokens
  CATCH_CHECK(megatron_index_of(m.idx) == "");
  std::remove(m.idx.c_str());
  CATCH_CHECK(megatron_index_of(m.bin) == "");
  const token_file_format flat = read_token_file_format(m.bin);  // read as flat uint16 tokens
  CATCH_CHECK(flat.index_path.empty());
  CATCH_CHECK(flat.type == "uint16");
  CATCH_CHECK(flat.tokens == 2000);
  CATCH_CHECK_THAT(open_token_file(m.bin, 50, 9)->describe(), Contains("uint16 token file '" + m.bin + "' (2000 tokens"));
}

CATCH_TEST_CASE("megatron dataset: a bad index is one error naming it", "[data]") {
  megatron_dataset m("bad");
  const auto docs = three_documents(50);
  m.write(docs, 4, 4);
  const std::string at = "Megatron index '" + m.idx + "' (beside data file '" + m.bin + "') ";
  const std::vector<std::int64_t> lengths{700, 1, 1299}, pointers{0, 2800, 2804};

  m.write_index(4, lengths, pointers, 4, "TNTIDX\0\0\0");
  CATCH_CHECK_THROWS_WITH(read_token_file_format(m.bin),
                          "'" + m.idx + "' is beside data file '" + m.bin + "' and is not a Megatron index (it does not "
                          "begin with MMIDIDX), so the .bin's token type is not known: move it away to read the .bin "
                          "as flat uint16 tokens");
  write_file(m.idx, {});
  CATCH_CHECK_THROWS_WITH(read_token_file_format(m.bin), Contains("is not a Megatron index"));
  write_file(m.idx, {'M', 'M', 'I', 'D', 'I', 'D', 'X', 0, 0, 1, 0});
  CATCH_CHECK_THROWS_WITH(read_token_file_format(m.bin), at + "has 11 bytes: its header alone is 34");
  m.write_index(4, lengths, pointers, 4, std::string("MMIDIDX\0\0", 9), 2);
  CATCH_CHECK_THROWS_WITH(read_token_file_format(m.bin), at + "is of version 2: this reads version 1");
  m.write_index(7, lengths, pointers, 4);
  CATCH_CHECK_THROWS_WITH(read_token_file_format(m.bin), at + "holds float32 values: no token ids");
  m.write_index(6, lengths, pointers, 4);
  CATCH_CHECK_THROWS_WITH(read_token_file_format(m.bin), at + "holds float64 values: no token ids");
  m.write_index(9, lengths, pointers, 4);
  CATCH_CHECK_THROWS_WITH(read_token_file_format(m.bin), at + "names token type code 9, which Megatron does not define");

  // Counts the rest of the file does not hold, or more than they need.
  m.write_index(4, lengths, pointers, 4);
  {
    std::fstream header(m.idx, std::ios::binary | std::ios::in | std::ios::out);
    header.seekp(26);
    header.put(40);  // the document count's low byte: 40 entries, where 4 follow
  }
  CATCH_CHECK_THROWS_WITH(read_token_file_format(m.bin),
                          at + "has 102 bytes, too few for what its header counts 3 sequences and 40 document entries "
                               "(damaged, or cut short?)");
  m.write_index(4, lengths, pointers, 2);
  {
    std::ofstream more(m.idx, std::ios::binary | std::ios::app);
    more.write("\0\0\0\0\0", 5);
  }
  CATCH_CHECK_THROWS_WITH(read_token_file_format(m.bin), at + "has 5 bytes past what its header counts 3 sequences and "
                                                              "2 document entries (damaged?)");
  {  // Megatron-Core's multimodal index: a mode byte a sequence
    m.write_index(4, lengths, pointers, 4);
    std::ofstream modes(m.idx, std::ios::binary | std::ios::app);
    modes.write("\0\0\0", 3);
  }
  CATCH_CHECK(read_token_file_format(m.bin).sequences == 3);

  // Sequences that do not tile the .bin.
  m.write_index(4, lengths, {0, 2804, 2808}, 4);
  CATCH_CHECK_THROWS_WITH(read_token_file_format(m.bin),
                          at + "puts sequence 1 at byte 2804 of the .bin, not at byte 2800 where sequence 0 ends: its "
                               "sequences are read as one stream, end to end, as Megatron writes them");
  CATCH_CHECK(read_token_file_format(m.bin, false).type == "int32");  // the header alone is whole
  m.write_index(4, {700, -1, 1299}, pointers, 4);
  CATCH_CHECK_THROWS_WITH(read_token_file_format(m.bin), at + "gives sequence 1 a length of -1 (damaged?)");
  m.write_index(4, {700, 1, 1300}, pointers, 4);
  CATCH_CHECK_THROWS_WITH(read_token_file_format(m.bin),
                          at + "has sequences past the end of the .bin's 8000 bytes (sequence 2 of 1300 int32 tokens at "
                               "byte 2804): an index of another .bin?");
  m.write_index(4, {700, 1, 1298}, pointers, 4);
  CATCH_CHECK_THROWS_WITH(read_token_file_format(m.bin),
                          at + "has sequences of 1999 int32 tokens (7996 bytes), and the .bin has 8000 bytes: an index "
                               "of another .bin?");
  m.write_index(8, {700, 1, 1299}, {0, 1400, 1402}, 4);  // uint16 read of the 8000 bytes: 4000 tokens
  CATCH_CHECK_THROWS_WITH(read_token_file_format(m.bin), Contains("has sequences of 2000 uint16 tokens (4000 bytes)"));
  m.write_index(4, lengths, pointers, 4);
  CATCH_CHECK_NOTHROW(open_token_file(m.bin, 50, 9));
  {
    std::ofstream odd(m.bin, std::ios::binary | std::ios::app);
    odd.write("\0\0", 2);
  }
  CATCH_CHECK_THROWS_WITH(open_token_file(m.bin, 50, 9), Contains("has sequences of 2000 int32 tokens (8000 bytes), "
                                                                  "and the .bin has 8002 bytes"));
  write_file(m.bin, std::vector<unsigned char>(8002));  // a flat file of no whole number of int32 tokens
  CATCH_CHECK_THROWS_WITH(read_token_file_format(m.bin, false),
                          "data file '" + m.bin + "' has 8002 bytes: not a whole number of int32 tokens");
  // Errors of the files themselves name them as the flat file's do.
  std::remove(m.bin.c_str());
  CATCH_CHECK_THROWS_WITH(read_token_file_format(m.bin), "data file '" + m.bin + "' does not exist");
}

// A damaged index is an error or a readable dataset, never a crash, a hang or an allocation its
// counts ask for: random bytes changed in a good one, or cut short, 3000 times.
CATCH_TEST_CASE("megatron dataset: a damaged index is refused or read, never more", "[data][fuzz]") {
  megatron_dataset m("fuzz");
  m.write(three_documents(50), 4, 4);
  std::ifstream in(m.idx, std::ios::binary);
  const std::vector<unsigned char> good((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::uint64_t x = 12345;
  const auto next = [&x] {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    return x;
  };
  int refused = 0, read = 0;
  for (int round = 0; round < 3000; ++round) {
    std::vector<unsigned char> bad = good;
    if (round % 10 == 9) {
      bad.resize(next() % good.size());
    } else {
      const int changes = 1 + static_cast<int>(next() % 4);
      for (int c = 0; c < changes; ++c) {
        // Mostly the header and the first sequences' entries, where the counts and types are.
        const std::size_t at = next() % 2 == 0 ? next() % 64 : next() % bad.size();
        bad[at] = static_cast<unsigned char>(next());
      }
    }
    write_file(m.idx, bad);
    try {
      const token_file_format f = read_token_file_format(m.bin);
      CATCH_REQUIRE(f.tokens * static_cast<std::uint64_t>(f.token_bytes) == 8000);
      ++read;
    } catch (const std::invalid_argument& e) {
      CATCH_REQUIRE_THAT(std::string(e.what()), Contains(m.idx));
      ++refused;
    }
  }
  CATCH_CHECK(refused > 2000);
  CATCH_CHECK(read > 0);  // changes past the sequences' lengths and offsets: the document starts
}

// A big token file (from 1 GiB) says, in the log, that every token is checked before training
// and when that is done; a small one says nothing. (Its progress every 10 s is not reached
// here: a sparse file of zeros reads in about a second.)
CATCH_TEST_CASE("token file: a file of 1 GiB or more says that its tokens are being checked", "[data]") {
  const std::string dir = "/tmp/actorpipe_megatron_test_" + std::to_string(::getpid()) + "_big";
  std::filesystem::create_directories(dir);
  const std::string big = dir + "/big.bin", small = dir + "/small.bin", log = dir + "/log.txt";
  std::ofstream(big).close();
  std::filesystem::resize_file(big, std::uintmax_t{1} << 30);  // sparse: every token 0
  std::ofstream(small).close();
  std::filesystem::resize_file(small, 4096);
  setup_logging({log_level::info, log});
  open_token_file(small, 256, 9);
  flush_log();
  CATCH_CHECK(std::filesystem::file_size(log) == 0);
  open_token_file(big, 256, 9);
  flush_log();
  reset_logging();
  std::ifstream in(log);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  CATCH_CHECK_THAT(text, Contains("data file '" + big + "': checking its 536870912 uint16 tokens against vocab 256, once, "
                                  "before training") &&
                             Contains("data file '" + big + "': every token checked in "));
  std::filesystem::remove_all(dir);
}

