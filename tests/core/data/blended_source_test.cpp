// Blends of token sources (Megatron-LM's weighted --data-path): --data-file's values read as
// Megatron reads its list, each sample drawn from one part by weight as a pure function of
// (seed, step, index), the part's own sample read, the held-out sets one after another; every
// error by its message.
#include <catch2/catch.hpp>
#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <functional>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "core/data/token_source.hpp"

using namespace actorpipe;
using Catch::Contains;

namespace {

std::vector<std::int32_t> sample(const token_source& s, std::uint64_t step, std::uint64_t index, int seq_len) {
  std::vector<std::int32_t> out(static_cast<std::size_t>(seq_len) + 1, -1);
  s.sequence(step, index, seq_len, out.data());
  return out;
}

std::vector<std::int32_t> eval_window(const token_source& s, std::uint64_t index, int seq_len) {
  std::vector<std::int32_t> out(static_cast<std::size_t>(seq_len) + 1, -1);
  s.eval_sequence(index, seq_len, out.data());
  return out;
}

// A flat uint16 token file of `n` tokens (i * mul + add) % vocab, removed with the object.
struct token_file {
  std::string path;
  token_file(const std::string& name, int n, int mul, int add, int vocab)
      : path("/tmp/actorpipe_blend_test_" + std::to_string(::getpid()) + "_" + name + ".bin") {
    std::ofstream f(path, std::ios::binary);
    for (int i = 0; i < n; ++i) {
      const auto t = static_cast<std::uint16_t>((i * mul + add) % vocab);
      const unsigned char b[2] = {static_cast<unsigned char>(t & 0xff), static_cast<unsigned char>(t >> 8)};
      f.write(reinterpret_cast<const char*>(b), 2);
    }
  }
  ~token_file() { std::remove(path.c_str()); }
};

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace

CATCH_TEST_CASE("parse_data_files reads --data-file's values as Megatron reads --data-path", "[data]") {
  const auto one = parse_data_files({"train.bin"});
  CATCH_REQUIRE(one.size() == 1);
  CATCH_CHECK(one[0].path == "train.bin");
  CATCH_CHECK(one[0].weight == 1.0);
  // A file named like a number, alone, is that file.
  CATCH_CHECK(parse_data_files({"0.5"}).at(0).path == "0.5");

  const auto pairs = parse_data_files({"0.3", "a.bin", "0.7", "b.bin"});
  CATCH_REQUIRE(pairs.size() == 2);
  CATCH_CHECK(pairs[0].weight == 0.3);
  CATCH_CHECK(pairs[0].path == "a.bin");
  CATCH_CHECK(pairs[1].weight == 0.7);
  CATCH_CHECK(pairs[1].path == "b.bin");
  // Weights need not add up to 1, and any number reads.
  const auto big = parse_data_files({"30", "a.bin", "1e1", "b.bin"});
  CATCH_CHECK(big[0].weight == 30.0);
  CATCH_CHECK(big[1].weight == 10.0);

  // Files alone: each weighed by its tokens (weight 0 here).
  const auto alone = parse_data_files({"a.bin", "b.bin", "c.bin"});
  CATCH_REQUIRE(alone.size() == 3);
  for (const auto& p : alone) CATCH_CHECK(p.weight == 0.0);
  CATCH_CHECK(alone[2].path == "c.bin");

  const std::string form = "(give weight file pairs, '--data-file 0.3 a.bin 0.7 b.bin', or files alone, weighed by "
                           "their tokens)";
  CATCH_CHECK(error_of([] { parse_data_files({}); }) == "--data-file needs a file (or weight file pairs): got none");
  CATCH_CHECK(error_of([] { parse_data_files({"0.3", "a.bin", "b.bin"}); }) ==
              "--data-file '0.3 a.bin b.bin': 3 values with weights among them do not pair up " + form);
  CATCH_CHECK(error_of([] { parse_data_files({"a.bin", "0.3", "b.bin", "0.7"}); }) ==
              "--data-file 'a.bin 0.3 b.bin 0.7': 'a.bin' stands where a weight belongs (value 1) " + form);
  CATCH_CHECK(error_of([] { parse_data_files({"0.3", "0.5", "0.7", "b.bin"}); }) ==
              "--data-file '0.3 0.5 0.7 b.bin': '0.5' stands where a file belongs (value 2) " + form +
                  "; a file named so: './0.5'");
  for (const std::string w : {"0", "-1", "inf", "nan"})
    CATCH_CHECK(error_of([&] { parse_data_files({w, "a.bin", "1", "b.bin"}); }) ==
                "--data-file '" + w + " a.bin 1 b.bin': weight '" + w + "' of 'a.bin' must be a finite number > 0");
}

CATCH_TEST_CASE("a blend draws each sample's part by weight: the same for the same seed and sample", "[data]") {
  const std::vector<double> weights = {0.3, 0.7};
  // 2 x 100000 samples: each part's share within 1% of its weight's (the standard error is 0.15%).
  std::vector<int> counts(2, 0);
  for (std::uint64_t step = 0; step < 2; ++step)
    for (std::uint64_t i = 0; i < 100000; ++i) ++counts.at(blended_part_of(weights, 1234, step, i));
  CATCH_CHECK(std::abs(counts[0] / 200000.0 - 0.3) < 0.01);
  CATCH_CHECK(std::abs(counts[1] / 200000.0 - 0.7) < 0.01);
  // Three parts of unnormalised weights 1, 2, 7.
  std::vector<int> three(3, 0);
  for (std::uint64_t i = 0; i < 100000; ++i) ++three.at(blended_part_of({1, 2, 7}, 5, 3, i));
  CATCH_CHECK(std::abs(three[0] / 100000.0 - 0.1) < 0.01);
  CATCH_CHECK(std::abs(three[1] / 100000.0 - 0.2) < 0.01);
  CATCH_CHECK(std::abs(three[2] / 100000.0 - 0.7) < 0.01);
  // A pure function: the same answers again; another seed draws others; one part is always it.
  int differ = 0;
  for (std::uint64_t i = 0; i < 1000; ++i) {
    CATCH_CHECK(blended_part_of(weights, 1234, 7, i) == blended_part_of(weights, 1234, 7, i));
    differ += blended_part_of(weights, 1234, 7, i) != blended_part_of(weights, 99, 7, i);
    CATCH_CHECK(blended_part_of({2.5}, 1234, 7, i) == 0);
  }
  CATCH_CHECK(differ > 300);  // two independent draws of 0.3 / 0.7 differ 42% of the time
  CATCH_CHECK(error_of([] { blended_part_of({}, 1, 0, 0); }) == "blended_part_of: no weights");
}

CATCH_TEST_CASE("a blend reads each sample from its part, and the parts' held-out sets in order", "[data]") {
  const int vocab = 300, seq_len = 16;
  token_file a("a", 5000, 7, 1, vocab), b("b", 3000, 11, 5, vocab);
  // Held out: the last 500 and 300 tokens.
  std::shared_ptr<const token_source> sa = open_token_file(a.path, vocab, seq_len + 1, 42, 500);
  std::shared_ptr<const token_source> sb = open_token_file(b.path, vocab, seq_len + 1, 42, 300);
  const auto blend = make_blended_source({{0.25, sa}, {0.75, sb}}, 42);
  CATCH_CHECK(blend->vocab() == vocab);
  int from_a = 0;
  for (std::uint64_t step = 0; step < 3; ++step)
    for (std::uint64_t i = 0; i < 200; ++i) {
      const std::size_t part = blended_part_of({0.25, 0.75}, 42, step, i);
      from_a += part == 0;
      CATCH_CHECK(sample(*blend, step, i, seq_len) == sample(part == 0 ? *sa : *sb, step, i, seq_len));
    }
  CATCH_CHECK(from_a > 100);  // of 600: both parts are read
  CATCH_CHECK(from_a < 250);

  // Held out: a's windows, then b's.
  const std::uint64_t na = sa->eval_sequences(seq_len), nb = sb->eval_sequences(seq_len);
  CATCH_CHECK(na == (500 - 1) / seq_len);
  CATCH_CHECK(blend->eval_sequences(seq_len) == na + nb);
  CATCH_CHECK(eval_window(*blend, 0, seq_len) == eval_window(*sa, 0, seq_len));
  CATCH_CHECK(eval_window(*blend, na - 1, seq_len) == eval_window(*sa, na - 1, seq_len));
  CATCH_CHECK(eval_window(*blend, na, seq_len) == eval_window(*sb, 0, seq_len));
  CATCH_CHECK(eval_window(*blend, na + nb - 1, seq_len) == eval_window(*sb, nb - 1, seq_len));
  CATCH_CHECK(error_of([&] { eval_window(*blend, na + nb, seq_len); }) ==
              "the blend's held-out set has " + std::to_string(na + nb) + " windows of 16 tokens: no window " +
                  std::to_string(na + nb));

  CATCH_CHECK_THAT(blend->describe(), Contains("a blend of 2 sources, each sample drawn by weight: 0.25 (25% of samples) "
                                               "uint16 token file '" + a.path + "'") &&
                                          Contains("; 0.75 (75% of samples) uint16 token file '" + b.path + "'"));
}

CATCH_TEST_CASE("a blend of copies of one file reads that file's samples", "[data]") {
  const int vocab = 256, seq_len = 8;
  token_file a("copy", 4000, 13, 3, vocab);
  std::shared_ptr<const token_source> one = open_token_file(a.path, vocab, seq_len + 1, 7);
  std::shared_ptr<const token_source> again = open_token_file(a.path, vocab, seq_len + 1, 7);
  const auto blend = make_blended_source({{0.5, one}, {1.5, again}}, 7);
  for (std::uint64_t step = 0; step < 4; ++step)
    for (std::uint64_t i = 0; i < 64; ++i) CATCH_CHECK(sample(*blend, step, i, seq_len) == sample(*one, step, i, seq_len));
}

CATCH_TEST_CASE("a blend's errors name the part", "[data]") {
  const auto s256 = std::shared_ptr<const token_source>(make_synthetic_source(256, 1));
  const auto s300 = std::shared_ptr<const token_source>(make_synthetic_source(300, 1));
  CATCH_CHECK(error_of([] { make_blended_source({}); }) == "a blend of data sources needs at least one part: got none");
  CATCH_CHECK(error_of([&] { make_blended_source({{1, s256}, {1, nullptr}}); }) == "blend part 2 has no source");
  for (const double w : {0.0, -2.0, std::nan(""), std::numeric_limits<double>::infinity()})
    CATCH_CHECK_THAT(error_of([&] { make_blended_source({{1, s256}, {w, s256}}); }),
                     Contains("blend part 2 (synthetic Markov source") &&
                         Contains(": a weight must be a finite number > 0"));
  CATCH_CHECK_THAT(error_of([&] { make_blended_source({{1, s256}, {1, s300}}); }),
                   Contains("blend part 2 (synthetic Markov source") &&
                       Contains(") has vocab 300, part 1 vocab 256: the parts share one vocabulary"));
}
