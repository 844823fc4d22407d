// BERT through the model API: Hugging Face's parameter names and shapes, padding that cannot
// change a row's logits, the seeded per-epoch shuffle of the training rows, padded eval
// microbatches, and the metrics.
#include <torch/torch.h>

#include <algorithm>
#include <map>
#include <set>

#include "core/model/bert_model.hpp"
#include "core/model/tensor_box_torch.hpp"
#include "tests/support/sentiment_task.hpp"

#include <catch2/catch.hpp>

using namespace actorpipe;
using namespace actorpipe::testing;

namespace {

bert_config small_config() {
  bert_config c;
  c.vocab = static_cast<int>(sentiment_vocab());
  c.hidden = 16;
  c.heads = 2;
  c.layers = 2;
  c.intermediate = 32;
  c.max_positions = 12;
  c.seed = 3;
  return c;
}

model_definition small_model(int train_rows = 40, int eval_rows = 10) {
  bert_data d;
  d.train = sentiment_encoded(sentiment_rows(train_rows, 1), 12);
  d.eval = sentiment_encoded(sentiment_rows(eval_rows, 2), 12);
  d.pad_id = 0;
  d.cls_id = 2;
  d.microbatch_size = 4;
  d.microbatches_per_step = 2;
  return bert_model(small_config(), d);
}

// The whole model's forward, layer by layer, as one chunk would run it.
at::Tensor whole_forward(const model_definition& m, const built_layers& built, at::Tensor x) {
  for (std::size_t i = 0; i < m.layers.size(); ++i) {
    auto module = built.modules[i];
    x = m.layers[i].forward ? m.layers[i].forward(module, x) : module.forward(x);
  }
  return x;
}

}  // namespace

CATCH_TEST_CASE("bert's parameters carry Hugging Face's BertForSequenceClassification names and shapes",
                "[model][bert]") {
  const model_definition m = small_model();
  const built_layers built = build_all_layers(m);
  std::map<std::string, std::vector<std::int64_t>> got;
  for (std::size_t i = 0; i < m.layers.size(); ++i)
    for (const auto& p : built.modules[i].ptr()->named_parameters())
      got[m.layers[i].prefix() + p.key()] = p.value().sizes().vec();
  std::map<std::string, std::vector<std::int64_t>> want = {
      {"bert.embeddings.word_embeddings.weight", {21, 16}},
      {"bert.embeddings.position_embeddings.weight", {12, 16}},
      {"bert.embeddings.token_type_embeddings.weight", {2, 16}},
      {"bert.embeddings.LayerNorm.weight", {16}},
      {"bert.embeddings.LayerNorm.bias", {16}},
      {"bert.pooler.dense.weight", {16, 16}},
      {"bert.pooler.dense.bias", {16}},
      {"classifier.weight", {2, 16}},
      {"classifier.bias", {2}}};
  for (int l = 0; l < 2; ++l) {
    const std::string p = "bert.encoder.layer." + std::to_string(l) + ".";
    for (const char* q : {"attention.self.query.", "attention.self.key.", "attention.self.value.", "attention.output.dense."}) {
      want[p + q + "weight"] = {16, 16};
      want[p + q + "bias"] = {16};
    }
    want[p + "attention.output.LayerNorm.weight"] = {16};
    want[p + "attention.output.LayerNorm.bias"] = {16};
    want[p + "intermediate.dense.weight"] = {32, 16};
    want[p + "intermediate.dense.bias"] = {32};
    want[p + "output.dense.weight"] = {16, 32};
    want[p + "output.dense.bias"] = {16};
    want[p + "output.LayerNorm.weight"] = {16};
    want[p + "output.LayerNorm.bias"] = {16};
  }
  CATCH_CHECK(got == want);
}

CATCH_TEST_CASE("bert: what padding holds cannot change a row's logits", "[model][bert]") {
  const model_definition m = small_model();
  const built_layers built = build_all_layers(m);
  torch::NoGradGuard no_grad;
  at::Tensor x = unbox(m.data(0, 0).inputs).clone();
  CATCH_REQUIRE(x.sizes() == at::IntArrayRef({4, 3, 12}));
  const at::Tensor logits = whole_forward(m, built, x);
  CATCH_CHECK(logits.sizes() == at::IntArrayRef({4, 2}));
  at::Tensor other = x.clone();
  const at::Tensor padding = other.select(1, 2).eq(0);
  CATCH_REQUIRE(padding.any().item<bool>());
  other.select(1, 0).masked_fill_(padding, 7);  // other words where the mask says padding
  other.select(1, 1).masked_fill_(padding, 1);
  CATCH_CHECK(torch::equal(whole_forward(m, built, other), logits));
  // A real token does change them.
  at::Tensor changed = x.clone();
  changed[0][0][1] = 6;
  CATCH_CHECK(!torch::equal(whole_forward(m, built, changed)[0], logits[0]));
}

CATCH_TEST_CASE("bert's training rows: every row once per epoch, a new seeded order each epoch", "[model][bert]") {
  // 10 rows, 2 microbatches of 3 per step: one epoch is 10 consecutive samples.
  std::vector<std::size_t> seen;
  for (int step = 0; step < 4; ++step)
    for (int mb = 0; mb < 2; ++mb)
      for (auto r : training_rows(10, 9, step, mb, 2, 3)) seen.push_back(r);
  CATCH_REQUIRE(seen.size() == 24);
  std::vector<std::size_t> first(seen.begin(), seen.begin() + 10), second(seen.begin() + 10, seen.begin() + 20);
  CATCH_CHECK(first != second);
  std::sort(first.begin(), first.end());
  std::sort(second.begin(), second.end());
  std::vector<std::size_t> all(10);
  for (std::size_t i = 0; i < 10; ++i) all[i] = i;
  CATCH_CHECK(first == all);
  CATCH_CHECK(second == all);
  CATCH_CHECK(training_rows(10, 9, 1, 1, 2, 3) == training_rows(10, 9, 1, 1, 2, 3));
  CATCH_CHECK(training_rows(10, 9, 1, 1, 2, 3) != training_rows(10, 8, 1, 1, 2, 3));
}

CATCH_TEST_CASE("bert's eval microbatches cover the eval rows in order, the last padded with ignored rows",
                "[model][bert]") {
  const model_definition m = small_model(40, 10);
  CATCH_REQUIRE(m.eval_microbatches == 3);  // 10 rows in microbatches of 4
  const at::Tensor last = unbox(m.eval_data(0, 2).targets);
  CATCH_CHECK(last[0].item<std::int64_t>() != -100);
  CATCH_CHECK(last[1].item<std::int64_t>() != -100);
  CATCH_CHECK(last[2].item<std::int64_t>() == -100);
  CATCH_CHECK(last[3].item<std::int64_t>() == -100);
  // Ignored rows count neither in the loss nor in the metrics.
  const at::Tensor logits = torch::tensor({{2.0, 0.0}, {0.0, 2.0}, {0.0, 2.0}, {9.0, 0.0}});
  const at::Tensor targets = torch::tensor({0, 1, 0, -100}, at::kLong);
  const auto metrics = m.eval_metrics(logits, targets);
  CATCH_REQUIRE(metrics.size() == 3);
  CATCH_CHECK(metrics[0].first == "accuracy");
  CATCH_CHECK(metrics[0].second == Approx(2.0 / 3));
  CATCH_CHECK(metrics[1].first == "f1");
  CATCH_CHECK(metrics[1].second == Approx(2.0 / 3));  // tp 1, fp 1, fn 0
  CATCH_CHECK(metrics[2].first == "mcc");
  CATCH_CHECK(metrics[2].second == Approx(0.5));  // (tp tn - fp fn) / sqrt(2 x 1 x 2 x 1), tn 1
  const double loss = m.loss(logits, targets).item<double>();
  const double want = m.loss(logits.narrow(0, 0, 3), targets.narrow(0, 0, 3)).item<double>();
  CATCH_CHECK(loss == Approx(want));
}

CATCH_TEST_CASE("bert's bad shapes are one error naming the option", "[model][bert]") {
  bert_config c = small_config();
  c.hidden = 15;
  bert_data d;
  d.train = sentiment_encoded(sentiment_rows(8, 1), 12);
  CATCH_CHECK_THROWS_WITH(bert_model(c, d), "--hidden must be a multiple of --heads: got hidden=15, heads=2");
  c = small_config();
  c.max_positions = 8;
  CATCH_CHECK_THROWS_WITH(bert_model(c, d), "bert: examples of 12 tokens exceed the 8 positions");
}
