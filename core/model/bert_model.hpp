// BERT for sequence classification through the model API: embeddings, post-LN encoder layers
// with bidirectional self-attention masked for padding, a pooler and a classifier, cross-entropy
// loss. Parameter names are Hugging Face's BertForSequenceClassification names
// ("bert.embeddings.word_embeddings.weight", "bert.encoder.layer.0.attention.self.query.weight",
// ..., "classifier.weight"), so its model.safetensors loads with --init-from.
//
// One tensor goes from stage to stage, so the attention mask rides along: the first layer takes
// int64 [B, 3, T] (token ids, token type ids, attention mask) and every encoder layer passes on
// float [B, T, H + 1], the hidden states with the mask (1 real, 0 padding) as the last channel.
// Layers: "embeddings", "encoder.layer.0" .. "encoder.layer.{L-1}", "pooler", "classifier";
// default partition type:^encoder\. (the embeddings with the first layers, the head with the last).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/model/layer_model.hpp"

namespace actorpipe {

struct bert_config {
  int vocab = 30522;
  int hidden = 128;
  int layers = 2;
  int heads = 2;
  int intermediate = 512;  // the MLP's inner width (Hugging Face's intermediate_size)
  int max_positions = 128;
  int type_vocab = 2;
  int num_labels = 2;
  double layer_norm_eps = 1e-12;
  double init_std = 0.02;
  std::uint64_t seed = 1234;
};

// Examples encoded to a fixed length: row i's ids, token types and mask are [i*T, (i+1)*T).
struct encoded_examples {
  int seq_len = 0;
  std::vector<std::int64_t> input_ids, token_type_ids, attention_mask;
  std::vector<std::int64_t> labels;
  std::size_t size() const { return labels.size(); }
};

// Which rows microbatch `microbatch` of step `step` holds: `per_step` microbatches of
// `microbatch_size` rows each step, walking a fresh seeded shuffle of the rows each epoch, so
// every row is seen once per epoch and the order is a pure function of (seed, step, microbatch).
std::vector<std::size_t> training_rows(std::size_t rows, std::uint64_t seed, std::uint64_t step, int microbatch,
                                       int per_step, int microbatch_size);

// Microbatch tensors of `rows` (inputs int64 [B, 3, T], targets int64 [B]); a row index at or
// past the end is padding: [CLS] alone ([PAD] ids, mask 1 at position 0) with target -100,
// which the loss and the metrics ignore.
microbatch_tensors bert_microbatch(const encoded_examples& data, const std::vector<std::size_t>& rows,
                                   std::int64_t pad_id, std::int64_t cls_id);

// The model on `train` (and, for evaluation, `eval`: microbatch m of eval pass holds rows
// m*B .. m*B+B-1, padded past the end). Throws std::invalid_argument naming the option for a
// bad shape (hidden not a multiple of heads, a sequence longer than max_positions, ...).
struct bert_data {
  std::shared_ptr<const encoded_examples> train, eval;
  std::int64_t pad_id = 0, cls_id = 101;
  std::uint64_t seed = 1234;
  int microbatch_size = 4;
  int microbatches_per_step = 4;  // every replica's together
  std::string description;
};
model_definition bert_model(const bert_config& config, const bert_data& data);

}  // namespace actorpipe
