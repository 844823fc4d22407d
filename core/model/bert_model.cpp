// BERT for sequence classification as a list of layers (see bert_model.hpp). The modules
// register their parameters under Hugging Face's names; init is BERT's (normal(0, init_std)
// weights, zero biases, unit LayerNorm), drawn from the generator the runtime seeds per layer.
#include "core/model/bert_model.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <stdexcept>

#include "core/data/splitmix64.hpp"
#include "core/model/tensor_box_torch.hpp"

namespace actorpipe {
namespace {

void need(bool ok, const std::string& message) {
  if (!ok) throw std::invalid_argument(message);
}

// BERT's init for every parameter a module registered so far.
void bert_init(torch::nn::Module& m, double std) {
  torch::NoGradGuard no_grad;
  for (auto& p : m.named_parameters()) {
    const std::string& name = p.key();
    at::Tensor t = p.value();
    const bool is_norm = name.find("LayerNorm") != std::string::npos;
    if (name.size() >= 4 && name.compare(name.size() - 4, 4, "bias") == 0)
      t.zero_();
    else if (is_norm)
      t.fill_(1.0);
    else
      t.normal_(0.0, std);
  }
}

torch::nn::Linear linear(int in, int out) { return torch::nn::Linear(torch::nn::LinearOptions(in, out)); }
torch::nn::LayerNorm layer_norm(int n, double eps) {
  return torch::nn::LayerNorm(torch::nn::LayerNormOptions({n}).eps(eps));
}

// The hidden states and the mask channel of a packed [B, T, H + 1] activation.
at::Tensor hidden_of(const at::Tensor& x) { return x.narrow(-1, 0, x.size(-1) - 1); }
at::Tensor mask_of(const at::Tensor& x) { return x.select(-1, x.size(-1) - 1); }
at::Tensor packed(const at::Tensor& h, const at::Tensor& mask) { return at::cat({h, mask.unsqueeze(-1)}, -1); }

struct embeddings_module : torch::nn::Module {
  explicit embeddings_module(const bert_config& c)
      : config(c),
        word_embeddings(register_module("word_embeddings", torch::nn::Embedding(c.vocab, c.hidden))),
        position_embeddings(register_module("position_embeddings", torch::nn::Embedding(c.max_positions, c.hidden))),
        token_type_embeddings(register_module("token_type_embeddings", torch::nn::Embedding(c.type_vocab, c.hidden))),
        LayerNorm(register_module("LayerNorm", layer_norm(c.hidden, c.layer_norm_eps))) {
    bert_init(*this, c.init_std);
  }
  // [B, 3, T] int64 -> [B, T, H + 1]
  at::Tensor forward(const at::Tensor& x) {
    if (x.dim() != 3 || x.size(1) != 3 || x.scalar_type() != at::kLong)
      throw std::invalid_argument("bert embeddings: the input must be int64 [B, 3, T] (ids, token types, mask)");
    const int64_t T = x.size(2);
    need(T <= config.max_positions, "bert: a sequence of " + std::to_string(T) + " tokens is longer than the " +
                                        std::to_string(config.max_positions) + " positions (--seq-len)");
    const at::Tensor ids = x.select(1, 0), types = x.select(1, 1), mask = x.select(1, 2);
    if (ids.numel() > 0 && (ids.min().item<int64_t>() < 0 || ids.max().item<int64_t>() >= config.vocab))
      throw std::invalid_argument("bert: a token id outside [0, " + std::to_string(config.vocab) + ")");
    if (types.numel() > 0 && (types.min().item<int64_t>() < 0 || types.max().item<int64_t>() >= config.type_vocab))
      throw std::invalid_argument("bert: a token type id outside [0, " + std::to_string(config.type_vocab) + ")");
    const at::Tensor positions = torch::arange(T, at::kLong).unsqueeze(0);
    at::Tensor h = word_embeddings(ids) + token_type_embeddings(types) + position_embeddings(positions);
    h = LayerNorm(h);
    return packed(h, mask.to(h.scalar_type()));
  }
  bert_config config;
  torch::nn::Embedding word_embeddings, position_embeddings, token_type_embeddings;
  torch::nn::LayerNorm LayerNorm;
};

// Hugging Face's module tree of one layer: attention.self.{query,key,value},
// attention.output.{dense,LayerNorm}, intermediate.dense, output.{dense,LayerNorm}.
struct self_attention_names : torch::nn::Module {
  explicit self_attention_names(int h)
      : query(register_module("query", linear(h, h))),
        key(register_module("key", linear(h, h))),
        value(register_module("value", linear(h, h))) {}
  torch::nn::Linear query, key, value;
};
struct dense_norm : torch::nn::Module {
  dense_norm(int in, int out, double eps)
      : dense(register_module("dense", linear(in, out))), LayerNorm(register_module("LayerNorm", layer_norm(out, eps))) {}
  torch::nn::Linear dense;
  torch::nn::LayerNorm LayerNorm;
};
struct attention_names : torch::nn::Module {
  attention_names(int h, double eps)
      : self(register_module("self", std::make_shared<self_attention_names>(h))),
        output(register_module("output", std::make_shared<dense_norm>(h, h, eps))) {}
  std::shared_ptr<self_attention_names> self;
  std::shared_ptr<dense_norm> output;
};
struct intermediate_names : torch::nn::Module {
  intermediate_names(int h, int inner) : dense(register_module("dense", linear(h, inner))) {}
  torch::nn::Linear dense;
};

struct encoder_layer_module : torch::nn::Module {
  explicit encoder_layer_module(const bert_config& c)
      : heads(c.heads),
        attention(register_module("attention", std::make_shared<attention_names>(c.hidden, c.layer_norm_eps))),
        intermediate(register_module("intermediate", std::make_shared<intermediate_names>(c.hidden, c.intermediate))),
        output(register_module("output", std::make_shared<dense_norm>(c.intermediate, c.hidden, c.layer_norm_eps))) {
    bert_init(*this, c.init_std);
  }
  // [B, T, H + 1] -> [B, T, H + 1]: post-LN, bidirectional attention over the real tokens.
  at::Tensor forward(const at::Tensor& x) {
    const at::Tensor h = hidden_of(x), mask = mask_of(x);
    const int64_t B = h.size(0), T = h.size(1), H = h.size(2), d = H / heads;
    auto split_heads = [&](const at::Tensor& t) { return t.view({B, T, heads, d}).transpose(1, 2); };  // [B, h, T, d]
    const at::Tensor q = split_heads(attention->self->query(h));
    const at::Tensor k = split_heads(attention->self->key(h));
    const at::Tensor v = split_heads(attention->self->value(h));
    at::Tensor scores = q.matmul(k.transpose(-2, -1)) / std::sqrt(static_cast<double>(d));
    const at::Tensor padding = (mask == 0).view({B, 1, 1, T});
    scores = scores.masked_fill(padding, std::numeric_limits<float>::lowest());
    const at::Tensor context = torch::softmax(scores, -1).matmul(v).transpose(1, 2).reshape({B, T, H});
    const at::Tensor a = attention->output->LayerNorm(attention->output->dense(context) + h);
    const at::Tensor m = output->LayerNorm(output->dense(torch::gelu(intermediate->dense(a))) + a);
    return packed(m, mask);
  }
  int heads;
  std::shared_ptr<attention_names> attention;
  std::shared_ptr<intermediate_names> intermediate;
  std::shared_ptr<dense_norm> output;
};

// tanh(dense(first token)): [B, T, H + 1] -> [B, H].
struct pooler_module : torch::nn::Module {
  explicit pooler_module(const bert_config& c) : dense(register_module("dense", linear(c.hidden, c.hidden))) {
    bert_init(*this, c.init_std);
  }
  at::Tensor forward(const at::Tensor& x) { return torch::tanh(dense(hidden_of(x).select(1, 0))); }
  torch::nn::Linear dense;
};

// "classifier.weight" and "classifier.bias" directly (no submodule level in Hugging Face's names).
struct classifier_module : torch::nn::Module {
  explicit classifier_module(const bert_config& c)
      : weight(register_parameter("weight", torch::empty({c.num_labels, c.hidden}))),
        bias(register_parameter("bias", torch::empty({c.num_labels}))) {
    bert_init(*this, c.init_std);
  }
  at::Tensor forward(const at::Tensor& pooled) { return torch::linear(pooled, weight, bias); }
  at::Tensor weight, bias;
};

void validate(const bert_config& c) {
  need(c.vocab >= 5, "bert: the vocabulary must hold its 4 special tokens ([PAD], [UNK], [CLS], [SEP]) and at least one "
                     "other: got " + std::to_string(c.vocab) + " tokens");
  need(c.hidden >= 1, "--hidden must be >= 1: got " + std::to_string(c.hidden));
  need(c.heads >= 1, "--heads must be >= 1: got " + std::to_string(c.heads));
  need(c.hidden % c.heads == 0, "--hidden must be a multiple of --heads: got hidden=" + std::to_string(c.hidden) +
                                    ", heads=" + std::to_string(c.heads));
  need(c.layers >= 1, "--layers must be >= 1: got " + std::to_string(c.layers));
  need(c.intermediate >= 1, "bert: the intermediate size must be >= 1: got " + std::to_string(c.intermediate));
  need(c.max_positions >= 2, "--seq-len must be >= 2 for bert: got " + std::to_string(c.max_positions));
  need(c.num_labels >= 2, "--data-file: a classification task needs >= 2 labels, the file's label column holds " +
                              std::to_string(c.num_labels));
}

// Accuracy over the rows whose target is not -100, and for 2 labels F1 of label 1 and the
// Matthews correlation.
std::vector<std::pair<std::string, double>> classification_metrics(const at::Tensor& logits, const at::Tensor& targets) {
  const at::Tensor keep = targets != -100;
  const at::Tensor predicted = logits.argmax(-1).masked_select(keep), truth = targets.masked_select(keep);
  const double n = static_cast<double>(truth.numel());
  std::vector<std::pair<std::string, double>> out;
  out.emplace_back("accuracy", n > 0 ? predicted.eq(truth).sum().item<double>() / n : 0.0);
  if (logits.size(-1) == 2) {
    const double tp = (predicted.eq(1) & truth.eq(1)).sum().item<double>();
    const double fp = (predicted.eq(1) & truth.eq(0)).sum().item<double>();
    const double fn = (predicted.eq(0) & truth.eq(1)).sum().item<double>();
    const double tn = (predicted.eq(0) & truth.eq(0)).sum().item<double>();
    out.emplace_back("f1", tp > 0 ? 2 * tp / (2 * tp + fp + fn) : 0.0);
    // Matthews correlation (CoLA's GLUE metric): 0 where a margin is empty (one class only).
    const double denominator = std::sqrt((tp + fp) * (tp + fn) * (tn + fp) * (tn + fn));
    out.emplace_back("mcc", denominator > 0 ? (tp * tn - fp * fn) / denominator : 0.0);
  }
  return out;
}

}  // namespace

std::vector<std::size_t> training_rows(std::size_t rows, std::uint64_t seed, std::uint64_t step, int microbatch,
                                       int per_step, int microbatch_size) {
  std::vector<std::size_t> out;
  if (rows == 0) return out;
  const std::uint64_t first = (step * static_cast<std::uint64_t>(per_step) + static_cast<std::uint64_t>(microbatch)) *
                              static_cast<std::uint64_t>(microbatch_size);
  std::uint64_t cached_epoch = ~0ull;
  std::vector<std::size_t> order;
  for (int i = 0; i < microbatch_size; ++i) {
    const std::uint64_t s = first + static_cast<std::uint64_t>(i);
    const std::uint64_t epoch = s / rows;
    if (epoch != cached_epoch) {  // Fisher-Yates on a splitmix64 stream of (seed, epoch)
      order.resize(rows);
      std::iota(order.begin(), order.end(), std::size_t{0});
      std::uint64_t state = splitmix64(seed ^ splitmix64(epoch + 0x9e3779b97f4a7c15ull));
      for (std::size_t j = rows - 1; j > 0; --j) {
        state = splitmix64(state);
        std::swap(order[j], order[static_cast<std::size_t>(state % (j + 1))]);
      }
      cached_epoch = epoch;
    }
    out.push_back(order[static_cast<std::size_t>(s % rows)]);
  }
  return out;
}

microbatch_tensors bert_microbatch(const encoded_examples& data, const std::vector<std::size_t>& rows,
                                   std::int64_t pad_id, std::int64_t cls_id) {
  const int64_t B = static_cast<int64_t>(rows.size()), T = data.seq_len;
  at::Tensor inputs = torch::empty({B, 3, T}, at::kLong), targets = torch::empty({B}, at::kLong);
  auto in = inputs.accessor<int64_t, 3>();
  auto y = targets.accessor<int64_t, 1>();
  for (int64_t b = 0; b < B; ++b) {
    const std::size_t r = rows[static_cast<std::size_t>(b)];
    const bool real = r < data.size();
    for (int64_t t = 0; t < T; ++t) {
      const std::size_t at = r * static_cast<std::size_t>(T) + static_cast<std::size_t>(t);
      in[b][0][t] = real ? data.input_ids[at] : (t == 0 ? cls_id : pad_id);
      in[b][1][t] = real ? data.token_type_ids[at] : 0;
      in[b][2][t] = real ? data.attention_mask[at] : (t == 0 ? 1 : 0);
    }
    y[b] = real ? data.labels[r] : -100;
  }
  return {box(std::move(inputs)), box(std::move(targets))};
}

model_definition bert_model(const bert_config& c, const bert_data& data) {
  validate(c);
  need(data.train && data.train->size() > 0, "bert: no training examples");
  need(data.train->seq_len <= c.max_positions, "bert: examples of " + std::to_string(data.train->seq_len) +
                                                   " tokens exceed the " + std::to_string(c.max_positions) + " positions");
  need(data.microbatch_size >= 1 && data.microbatches_per_step >= 1, "bert: microbatch size and count must be >= 1");
  model_definition m;
  m.name = "bert";
  m.seed = c.seed;
  m.default_partition = "type:^encoder\\.";
  m.tokens_per_sample = data.train->seq_len;
  m.data_description = data.description;
  m.flags_followed = {"--layers", "--hidden", "--heads", "--seq-len", "--data-file", "--eval-file"};  // --vocab: --vocab-file's

  layer_spec embed = make_layer("embeddings", [c] { return layer_module(std::make_shared<embeddings_module>(c)); });
  embed.has_param_prefix = true;
  embed.param_prefix = "bert.embeddings.";
  m.layers.push_back(std::move(embed));
  for (int i = 0; i < c.layers; ++i) {
    layer_spec l = make_layer("encoder.layer." + std::to_string(i),
                              [c] { return layer_module(std::make_shared<encoder_layer_module>(c)); });
    l.has_param_prefix = true;
    l.param_prefix = "bert.encoder.layer." + std::to_string(i) + ".";
    m.layers.push_back(std::move(l));
  }
  layer_spec pool = make_layer("pooler", [c] { return layer_module(std::make_shared<pooler_module>(c)); });
  pool.has_param_prefix = true;
  pool.param_prefix = "bert.pooler.";
  m.layers.push_back(std::move(pool));
  layer_spec head = make_layer("classifier", [c] { return layer_module(std::make_shared<classifier_module>(c)); });
  head.has_param_prefix = true;
  head.param_prefix = "classifier.";
  m.layers.push_back(std::move(head));
  // A pretrained checkpoint (bert-base-uncased's model.safetensors): its pretraining heads and
  // the position and token-type id buffers older files carry go unused; the classifier, a
  // task's, starts fresh where the file has none.
  m.init_unused_prefixes = {"cls.", "bert.embeddings.position_ids", "bert.embeddings.token_type_ids"};
  m.init_fresh_prefixes = {"classifier."};
  m.init_base_prefix = "bert.";

  const int labels = c.num_labels;
  m.loss = [labels](const at::Tensor& logits, const at::Tensor& targets) {
    if (targets.dim() != 1 || targets.size(0) != logits.size(0))
      throw std::invalid_argument("bert: targets must be int64 [B] for logits [B, labels]");
    return torch::nn::functional::cross_entropy(
        logits, targets, torch::nn::functional::CrossEntropyFuncOptions().ignore_index(-100));
  };
  auto train = data.train;
  const bert_data d = data;
  m.data = [train, d](std::uint64_t step, int microbatch) {
    return bert_microbatch(*train, training_rows(train->size(), d.seed, step, microbatch, d.microbatches_per_step,
                                                 d.microbatch_size),
                           d.pad_id, d.cls_id);
  };
  if (data.eval && data.eval->size() > 0) {
    auto eval = data.eval;
    const std::size_t B = static_cast<std::size_t>(data.microbatch_size);
    m.eval_microbatches = static_cast<int>((eval->size() + B - 1) / B);
    m.eval_data = [eval, d, B](std::uint64_t, int microbatch) {
      std::vector<std::size_t> rows(B);
      std::iota(rows.begin(), rows.end(), static_cast<std::size_t>(microbatch) * B);
      return bert_microbatch(*eval, rows, d.pad_id, d.cls_id);
    };
    m.eval_metrics = classification_metrics;
  }
  return m;
}

}  // namespace actorpipe
