// A blend of token sources (Megatron-LM's weighted --data-path): each sample drawn from one
// part by weight, as a pure function of (seed, step, index).
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "core/data/splitmix64.hpp"
#include "core/data/token_source.hpp"
#include "core/number_text.hpp"

namespace actorpipe {

namespace {

// Keeps the draw of a sample's part apart from the draw of its window within a file (which
// mixes the same step and index with the seed alone): "blend" in ASCII.
constexpr std::uint64_t blend_key = 0x626c656e64ULL;

class blended_source final : public token_source {
 public:
  blended_source(std::vector<blend_part> parts, std::uint64_t seed) : parts_(std::move(parts)), seed_(seed) {
    if (parts_.empty()) throw std::invalid_argument("a blend of data sources needs at least one part: got none");
    for (std::size_t i = 0; i < parts_.size(); ++i) {
      const blend_part& p = parts_[i];
      if (!p.source) throw std::invalid_argument("blend part " + std::to_string(i + 1) + " has no source");
      if (!std::isfinite(p.weight) || p.weight <= 0)
        throw std::invalid_argument("blend part " + std::to_string(i + 1) + " (" + p.source->describe() +
                                    ") has weight " + number_text(p.weight) + ": a weight must be a finite number > 0");
      if (p.source->vocab() != parts_.front().source->vocab())
        throw std::invalid_argument("blend part " + std::to_string(i + 1) + " (" + p.source->describe() + ") has vocab " +
                                    std::to_string(p.source->vocab()) + ", part 1 vocab " +
                                    std::to_string(parts_.front().source->vocab()) + ": the parts share one vocabulary");
      weights_.push_back(p.weight);
      total_ += p.weight;
    }
  }

  int vocab() const override { return parts_.front().source->vocab(); }

  void sequence(std::uint64_t step, std::uint64_t index, int seq_len, std::int32_t* out) const override {
    parts_[blended_part_of(weights_, seed_, step, index)].source->sequence(step, index, seq_len, out);
  }

  void eval_sequence(std::uint64_t index, int seq_len, std::int32_t* out) const override {
    const std::uint64_t all = eval_sequences(seq_len);
    if (index >= all)
      throw std::out_of_range("the blend's held-out set has " + std::to_string(all) + " windows of " +
                              std::to_string(seq_len) + " tokens: no window " + std::to_string(index));
    for (const blend_part& p : parts_) {
      const std::uint64_t n = p.source->eval_sequences(seq_len);
      if (index < n) return p.source->eval_sequence(index, seq_len, out);
      index -= n;
    }
  }

  std::uint64_t eval_sequences(int seq_len) const override {
    std::uint64_t n = 0;
    for (const blend_part& p : parts_) {
      const std::uint64_t k = p.source->eval_sequences(seq_len);
      if (k > UINT64_MAX - n) return UINT64_MAX;  // a part without an end (the synthetic source's)
      n += k;
    }
    return n;
  }

  std::string describe() const override {
    std::string s = "a blend of " + std::to_string(parts_.size()) + " sources, each sample drawn by weight: ";
    for (std::size_t i = 0; i < parts_.size(); ++i)
      s += (i ? "; " : "") + number_text(parts_[i].weight) + " (" + number_text(100 * parts_[i].weight / total_) +
           "% of samples) " + parts_[i].source->describe();
    return s;
  }

 private:
  std::vector<blend_part> parts_;
  std::vector<double> weights_;
  double total_ = 0;
  std::uint64_t seed_;
};

}  // namespace

std::size_t blended_part_of(const std::vector<double>& weights, std::uint64_t seed, std::uint64_t step,
                            std::uint64_t index) {
  if (weights.empty()) throw std::invalid_argument("blended_part_of: no weights");
  double total = 0;
  for (double w : weights) total += w;
  const std::uint64_t h = splitmix64(splitmix64(splitmix64(step) ^ index) ^ splitmix64(seed ^ blend_key));
  const double at = static_cast<double>(h >> 11) * 0x1.0p-53 * total;  // in [0, total)
  double below = 0;
  for (std::size_t d = 0; d + 1 < weights.size(); ++d) {
    below += weights[d];
    if (at < below) return d;
  }
  return weights.size() - 1;
}

std::vector<data_file_part> parse_data_files(const std::vector<std::string>& values) {
  std::string given;
  for (const auto& v : values) given += (given.empty() ? "" : " ") + v;
  if (values.empty()) throw std::invalid_argument("--data-file needs a file (or weight file pairs): got none");
  if (values.size() == 1) return {{1.0, values.front()}};
  // A value that reads whole as a number is a weight ("./0.5" names a file of that name).
  const auto number = [](const std::string& v, double& out) {
    if (v.empty() || std::isspace(static_cast<unsigned char>(v.front()))) return false;
    char* end = nullptr;
    out = std::strtod(v.c_str(), &end);
    return end == v.c_str() + v.size();
  };
  std::size_t numbers = 0;
  double w = 0;
  for (const auto& v : values) numbers += number(v, w);
  std::vector<data_file_part> parts;
  if (numbers == 0) {  // paths alone: each weighed by its tokens
    for (const auto& v : values) parts.push_back({0.0, v});
    return parts;
  }
  const std::string form = " (give weight file pairs, '--data-file 0.3 a.bin 0.7 b.bin', or files alone, weighed by "
                           "their tokens)";
  if (values.size() % 2 != 0)
    throw std::invalid_argument("--data-file '" + given + "': " + std::to_string(values.size()) +
                                " values with weights among them do not pair up" + form);
  for (std::size_t i = 0; i < values.size(); i += 2) {
    if (!number(values[i], w))
      throw std::invalid_argument("--data-file '" + given + "': '" + values[i] + "' stands where a weight belongs (value " +
                                  std::to_string(i + 1) + ")" + form);
    if (double ignored = 0; number(values[i + 1], ignored))
      throw std::invalid_argument("--data-file '" + given + "': '" + values[i + 1] + "' stands where a file belongs (value " +
                                  std::to_string(i + 2) + ")" + form + "; a file named so: './" + values[i + 1] + "'");
    if (!std::isfinite(w) || w <= 0)
      throw std::invalid_argument("--data-file '" + given + "': weight '" + values[i] + "' of '" + values[i + 1] +
                                  "' must be a finite number > 0");
    parts.push_back({w, values[i + 1]});
  }
  return parts;
}

std::unique_ptr<token_source> make_blended_source(std::vector<blend_part> parts, std::uint64_t seed) {
  return std::make_unique<blended_source>(std::move(parts), seed);
}

}  // namespace actorpipe
