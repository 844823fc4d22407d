// A small synthetic sentiment task for the BERT tests: sentences of filler, positive and
// negative words; the label is 1 when positive words outnumber negative ones. Learnable, and
// made the same way every time from a seed. As TSV text (SST-2's layout) and encoded with a
// word vocabulary ([PAD] 0, [UNK] 1, [CLS] 2, [SEP] 3, [MASK] 4, then the words).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "core/data/splitmix64.hpp"
#include "core/model/bert_model.hpp"

namespace actorpipe::testing {

inline const std::vector<std::string>& sentiment_words() {
  static const std::vector<std::string> words = {"good", "great", "fine", "lovely", "bad", "awful", "poor", "dull",
                                                 "the", "film", "was", "a", "plot", "and", "very", "acting"};
  return words;  // 0-3 positive, 4-7 negative, the rest filler
}

struct sentiment_row {
  std::string sentence;
  int label = 0;
};

inline std::vector<sentiment_row> sentiment_rows(int rows, std::uint64_t seed) {
  const auto& w = sentiment_words();
  std::vector<sentiment_row> out;
  std::uint64_t s = seed;
  auto next = [&](std::uint64_t n) { return (s = splitmix64(s)) % n; };
  while (static_cast<int>(out.size()) < rows) {
    const int length = 4 + static_cast<int>(next(6));
    int score = 0;
    std::string text;
    for (int i = 0; i < length; ++i) {
      const auto k = next(w.size());
      if (k < 4) ++score;
      else if (k < 8) --score;
      text += (i ? " " : "") + w[k];
    }
    if (score == 0) continue;  // no ties: the rule decides every row
    out.push_back({text, score > 0 ? 1 : 0});
  }
  return out;
}

inline std::string sentiment_tsv(const std::vector<sentiment_row>& rows) {
  std::string tsv = "sentence\tlabel\n";
  for (const auto& r : rows) tsv += r.sentence + "\t" + std::to_string(r.label) + "\n";
  return tsv;
}

// Encoded as [CLS] words [SEP] [PAD]...: ids 5 + the word's index.
inline std::shared_ptr<encoded_examples> sentiment_encoded(const std::vector<sentiment_row>& rows, int seq_len) {
  auto e = std::make_shared<encoded_examples>();
  e->seq_len = seq_len;
  const auto& w = sentiment_words();
  for (const auto& r : rows) {
    std::vector<std::int64_t> ids{2};
    std::size_t at = 0;
    while (at <= r.sentence.size()) {
      const auto end = std::min(r.sentence.find(' ', at), r.sentence.size());
      const std::string word = r.sentence.substr(at, end - at);
      std::int64_t id = 1;
      for (std::size_t k = 0; k < w.size(); ++k)
        if (w[k] == word) id = 5 + static_cast<std::int64_t>(k);
      ids.push_back(id);
      at = end + 1;
    }
    ids.resize(std::min<std::size_t>(ids.size(), static_cast<std::size_t>(seq_len - 1)));
    ids.push_back(3);
    for (int t = 0; t < seq_len; ++t) {
      const bool real = t < static_cast<int>(ids.size());
      e->input_ids.push_back(real ? ids[static_cast<std::size_t>(t)] : 0);
      e->token_type_ids.push_back(0);
      e->attention_mask.push_back(real ? 1 : 0);
    }
    e->labels.push_back(r.label);
  }
  return e;
}

inline std::int64_t sentiment_vocab() { return 5 + static_cast<std::int64_t>(sentiment_words().size()); }

}  // namespace actorpipe::testing
