// The GPT through the model API: its pieces (core/model/gpt_modules) wrapped as LibTorch
// modules whose parameter names are the GPT's global names, so init, checkpoints and the
// bits stay what they were when the GPT had a runtime of its own.
#include "core/model/gpt_model.hpp"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <limits>
#include <stdexcept>
#include <string>

#include "core/model/gpt_modules.hpp"
#include "core/number_text.hpp"
#include "core/run_room.hpp"
#include "core/model/tensor_box_torch.hpp"

namespace actorpipe {
namespace {

void need(bool ok, const std::string& message) {
  if (!ok) throw std::invalid_argument(message);
}

// A level of dotted parameter names ("attn" in "attn.qkv.weight").
struct name_level : torch::nn::Module {};

// Registers `t` under a dotted name as nested submodules, so named_parameters() lists it
// under that name, in registration order.
void register_dotted(torch::nn::Module& root, const std::string& name, const at::Tensor& t) {
  const auto dot = name.find('.');
  if (dot == std::string::npos) {
    root.register_parameter(name, t, t.requires_grad());
    return;
  }
  const std::string head = name.substr(0, dot);
  std::shared_ptr<torch::nn::Module> child;
  auto children = root.named_children();
  if (auto* found = children.find(head)) {
    child = *found;
  } else {
    child = root.register_module(head, std::make_shared<name_level>());
  }
  register_dotted(*child, name.substr(dot + 1), t);
}

void register_all(torch::nn::Module& m, const named_torch_tensors& params, const std::string& strip) {
  for (const auto& [name, t] : params) register_dotted(m, name.substr(strip.size()), t);
}

struct gpt_embedding_module : torch::nn::Module {
  explicit gpt_embedding_module(const gpt_config& c) : embedding(c) {
    named_torch_tensors p;
    embedding.append_parameters(p);
    register_all(*this, p, "");
  }
  at::Tensor forward(at::Tensor ids) { return embedding.forward(ids); }
  gpt_embedding embedding;
};

struct gpt_block_module : torch::nn::Module {
  gpt_block_module(const gpt_config& c, int index) : block(c, index) {
    named_torch_tensors p;
    block.append_parameters(p);
    register_all(*this, p, "blocks." + std::to_string(index) + ".");
  }
  at::Tensor forward(at::Tensor x) { return block.forward(x); }
  gpt_block block;
};

struct layer_norm_module : torch::nn::Module {
  layer_norm_module(const gpt_config& c, const std::string& name)
      : ln{init_parameter(c, name + ".weight", {c.hidden}), init_parameter(c, name + ".bias", {c.hidden})} {
    register_parameter("weight", ln.weight);
    register_parameter("bias", ln.bias);
  }
  at::Tensor forward(at::Tensor x) { return ln.forward(x); }
  layer_norm ln;
};

// Whether a file is read as tokens (.bin: uint16, or a Megatron dataset's type), else as UTF-8 bytes.
bool is_token_file(const std::string& path) { return path.size() >= 4 && path.compare(path.size() - 4, 4, ".bin") == 0; }

// How a .bin file's tokens read (its Megatron index's header, where it has one). Errors name
// the flag.
token_file_format token_format(const std::string& path, const std::string& flag) {
  try {
    return read_token_file_format(path, false);
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument(flag + ": " + std::string(e.what()));
  }
}

// The tokens a file holds as it is read, or 0 where its size cannot be read or is no whole
// number of tokens (its source's own error names that).
std::uintmax_t file_tokens(const std::string& path) {
  std::error_code ec;
  const std::uintmax_t bytes = std::filesystem::file_size(path, ec);
  if (ec) return 0;
  if (!is_token_file(path)) return bytes;
  try {
    return read_token_file_format(path, false).tokens;
  } catch (const std::invalid_argument&) {
    return 0;
  }
}

// How many of `tokens` --eval-split holds out: the share, rounded down to whole tokens. A share
// whose decimal product is whole gives that number: 0.995 is a little below 0.995 in binary,
// and 0.995 of 3000 tokens is 2985, not 2984.
std::int64_t held_out_tokens(std::uintmax_t tokens, double split) {
  if (split <= 0) return 0;
  const long double product = static_cast<long double>(tokens) * split;
  const long double nearest = std::round(product);
  return static_cast<std::int64_t>(std::abs(product - nearest) < 1e-6L ? nearest : std::floor(product));
}

// --eval-split's own rules: a share below 1 of --data-file, the one eval set given.
void check_eval_split(const train_options& o) {
  const double s = o.eval_split;
  need(s >= 0 && s < 1, "--eval-split=" + number_text(s) + " must be >= 0 and below 1: the share of --data-file's "
                        "tokens held out for evaluation (0: none)");
  if (s == 0) return;
  need(o.data == "file", "--eval-split holds out the end of --data-file, and this run trains on the synthetic corpus, "
                         "which holds out sequences of its own: give --eval-every or --eval-microbatches alone");
  need(o.text.eval_file.empty(), "--eval-split and --eval-file both give the eval set: give one (--eval-file '" +
                                     o.text.eval_file + "', --eval-split " + number_text(s) + ")");
}

// A token file named by `flag` (--data-file, --eval-file): .bin = tokens (uint16, or a Megatron
// dataset's type), else bytes; for --data-file, less the tail --eval-split holds out.
std::shared_ptr<const token_source> open_file_source(const train_options& o, const std::string& p, const std::string& flag) {
  const std::int64_t need_tokens = static_cast<std::int64_t>(o.model.seq_len) + 1;
  // What is wrong with the path first, before what its name implies (the vocabulary text needs).
  std::error_code ec;
  const auto status = std::filesystem::status(p, ec);
  // Megatron's --data-path names a dataset by the prefix of its .bin and .idx.
  if (!std::filesystem::exists(status) && std::filesystem::exists(p + ".bin", ec) && std::filesystem::exists(p + ".idx", ec))
    throw std::invalid_argument(flag + " '" + p + "' does not exist; '" + p + ".bin' and '" + p +
                                ".idx' do (a Megatron dataset, named by its prefix as --data-path names it): give " +
                                flag + " '" + p + ".bin' (its index beside it is read)");
  need(std::filesystem::exists(status), flag + " '" + p + "' does not exist");
  need(!std::filesystem::is_directory(status), flag + " '" + p + "' is a directory: give the file");
  need(std::filesystem::is_regular_file(status), flag + " '" + p + "' is not a regular file");
  // Not read as text: the index says how to read its .bin.
  if (is_megatron_index(p)) {
    const std::string bin = p.size() > 4 && p.compare(p.size() - 4, 4, ".idx") == 0 ? p.substr(0, p.size() - 4) + ".bin" : "";
    throw std::invalid_argument(flag + " '" + p + "' is a Megatron dataset's index: give " +
                                (bin.empty() ? std::string("the .bin it indexes") : "its .bin, " + flag + " '" + bin + "'"));
  }
  const bool tokens_file = is_token_file(p);
  if (!tokens_file)
    need(o.model.vocab >= 256, flag + " '" + p + "' is read as UTF-8 bytes, which needs --vocab >= 256: got " +
                                   std::to_string(o.model.vocab));
  const token_file_format format = tokens_file ? token_format(p, flag) : token_file_format{};
  const std::uintmax_t tokens = tokens_file ? format.tokens : file_tokens(p);
  const std::string unit = tokens_file ? " " + format.type + " tokens" : " bytes";
  if (tokens > 0)
    need(tokens >= static_cast<std::uintmax_t>(need_tokens),
         flag + " '" + p + "' holds " + std::to_string(tokens) + unit + ": one sample of --seq-len " +
             std::to_string(o.model.seq_len) + " needs " + std::to_string(need_tokens));
  const std::int64_t held = flag == "--data-file" ? held_out_tokens(tokens, o.eval_split) : 0;
  if (o.eval_split > 0 && flag == "--data-file" && tokens > 0) {
    const std::string split = "--eval-split " + number_text(o.eval_split);
    need(held >= need_tokens, split + " holds out " + std::to_string(held) + " of the " + std::to_string(tokens) + unit +
                                  " of --data-file '" + p + "': an evaluation window of --seq-len " +
                                  std::to_string(o.model.seq_len) + " needs " + std::to_string(need_tokens));
    need(static_cast<std::int64_t>(tokens) - held >= need_tokens,
         split + " leaves " + std::to_string(static_cast<std::int64_t>(tokens) - held) + " of the " + std::to_string(tokens) +
             unit + " of --data-file '" + p + "' to train on: one sample of --seq-len " + std::to_string(o.model.seq_len) +
             " needs " + std::to_string(need_tokens));
  }
  // The file's own errors name it ("data file 'x' ..."); the flags they concern are these.
  try {
    return tokens_file ? open_token_file(p, o.model.vocab, need_tokens, o.data_seed, held)
                         : open_text_file(p, need_tokens, o.data_seed, held);
  } catch (const token_out_of_vocab& e) {
    throw std::invalid_argument(flag + ": " + std::string(e.what()) + " (--vocab " + std::to_string(o.model.vocab) +
                                "; a .bin file holds token ids below it)");
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument(flag + ": " + std::string(e.what()));
  }
}

// The files --data-file names: its one file, or a blend's.
std::vector<std::string> data_files(const train_options& o) {
  if (o.data_blend.empty()) return {o.data_file};
  std::vector<std::string> files;
  for (const auto& part : o.data_blend) files.push_back(part.path);
  return files;
}

// --data-file's source: its one file, or a blend of files (train_options::data_blend), each read
// as open_file_source reads one, --eval-split holding out each file's own tail. A blend without
// weights weighs each file by the tokens it trains on, as Megatron weighs an unweighted list by
// its datasets' sizes.
std::shared_ptr<const token_source> open_training_source(const train_options& o) {
  if (o.data_blend.empty()) return open_file_source(o, o.data_file, "--data-file");
  const std::string& first = o.data_blend.front().path;
  for (const auto& part : o.data_blend)
    need(is_token_file(part.path) == is_token_file(first),
         "--data-file '" + o.data_file + "' blends " + (is_token_file(first) ? "a token file" : "a text file") + ", '" +
             first + "', and " + (is_token_file(part.path) ? "a token file" : "a text file") + ", '" + part.path +
             "': the files of a blend are read alike (.bin for tokens, any other name for text)");
  std::vector<blend_part> parts;
  for (const auto& part : o.data_blend) {
    std::shared_ptr<const token_source> source = open_file_source(o, part.path, "--data-file");
    double weight = part.weight;
    if (weight == 0) {
      const std::uintmax_t tokens = file_tokens(part.path);
      weight = static_cast<double>(tokens - static_cast<std::uintmax_t>(held_out_tokens(tokens, o.eval_split)));
    }
    parts.push_back({weight, std::move(source)});
  }
  return make_blended_source(std::move(parts), o.data_seed);
}

// The eval set (train_options::eval_microbatches has the rule): a held-out file's consecutive
// windows, or the synthetic source's held-out stream; each target's loss is computed on the
// last stage, so a pass sends batch x tokens numbers per microbatch, not the logits.
void add_gpt_evaluation(model_definition& m, const train_options& o, const std::shared_ptr<const token_source>& train_source) {
  const std::string& file = o.text.eval_file;
  const long long B = o.microbatch_size;
  const int seq_len = o.model.seq_len;
  std::shared_ptr<const token_source> source;
  std::uint64_t sequences = 0;
  std::string described;
  if (!file.empty() || o.eval_split > 0) {
    std::string what;         // the eval set, as its errors name it
    std::uintmax_t tokens;    // the tokens it holds
    std::uintmax_t left = 0;  // its tokens past the last whole window (of each file) are no target of any
    const auto past_windows = [seq_len](std::uintmax_t n, std::uintmax_t windows) {
      return n > windows * seq_len + 1 ? n - 1 - windows * seq_len : 0;
    };
    if (!file.empty()) {
      // The two files read alike: token ids scored against bytes (or the reverse) is no loss at all.
      const std::string trained = o.data == "file" ? data_files(o).front() : std::string();
      if (o.data == "file" && is_token_file(file) != is_token_file(trained))
        throw std::invalid_argument("--eval-file '" + file + "' is read as " +
                                    (is_token_file(file) ? "token ids" : "UTF-8 bytes") + " and --data-file '" +
                                    o.data_file + "' as " + (is_token_file(trained) ? "token ids" : "UTF-8 bytes") +
                                    ": evaluate on a file of the training file's kind (.bin for tokens, any other name "
                                    "for text)");
      source = open_file_source(o, file, "--eval-file");
      what = "--eval-file '" + file + "'";
      tokens = file_tokens(file);
      const std::uint64_t windows = source->eval_sequences(seq_len);
      left = past_windows(tokens, windows);
    } else {  // the training files' held-out tails, which their source reads as its eval windows
      source = train_source;
      tokens = 0;
      for (const std::string& f : data_files(o)) {
        const auto held = static_cast<std::uintmax_t>(held_out_tokens(file_tokens(f), o.eval_split));
        const std::uintmax_t windows = held > 0 ? (held - 1) / seq_len : 0;
        tokens += held;
        left += past_windows(held, windows);
      }
      what = "--eval-split " + number_text(o.eval_split) + " of --data-file '" + o.data_file + "'";
    }
    const std::uint64_t windows = source->eval_sequences(seq_len);
    need(B >= 1, "--microbatch-size must be >= 1: got " + std::to_string(B));
    const std::uint64_t all = (windows + static_cast<std::uint64_t>(B) - 1) / static_cast<std::uint64_t>(B);
    need(all <= static_cast<std::uint64_t>(std::numeric_limits<int>::max()),
         what + " has " + std::to_string(windows) + " windows of --seq-len " + std::to_string(seq_len) +
             ": more microbatches than one pass can count; give --eval-microbatches");
    const std::uint64_t asked = o.eval_microbatches > 0 ? static_cast<std::uint64_t>(o.eval_microbatches) : all;
    need(asked <= all, "--eval-microbatches=" + std::to_string(o.eval_microbatches) + " is more than " + what +
                           " holds: " + std::to_string(windows) + " windows of --seq-len " + std::to_string(seq_len) +
                           " tokens make " + std::to_string(all) + " microbatches of " + std::to_string(B));
    sequences = std::min(windows, asked * static_cast<std::uint64_t>(B));
    m.eval_microbatches = static_cast<int>(asked);
    const std::string set =
        !file.empty() ? source->describe()
        : o.data_blend.empty()
            ? "the last " + std::to_string(tokens) + " tokens of --data-file (--eval-split " + number_text(o.eval_split) + ")"
            : "the last " + number_text(o.eval_split) + " of each of --data-file's " + std::to_string(o.data_blend.size()) +
                  " files, " + std::to_string(tokens) + " tokens (--eval-split), file by file";
    described = "eval: " + set + ", " + std::to_string(sequences) + " consecutive window" +
                (sequences == 1 ? "" : "s") + " of " + std::to_string(seq_len) + " tokens" +
                (asked < all ? " (its first " + std::to_string(asked) + (asked == 1 ? " microbatch)" : " microbatches)")
                 : left > 0 ? " (" + std::string(o.data_blend.empty() || !file.empty() ? "its last " : "the files' last ") +
                                  std::to_string(left) + (left == 1 ? " token makes" : " tokens make") + " no window)"
                            : "");
  } else if (o.eval_every > 0 || o.eval_microbatches > 0) {
    if (o.data != "synthetic")
      throw std::invalid_argument(std::string(o.eval_every > 0 ? "--eval-every" : "--eval-microbatches") +
                                  " with --data-file needs --eval-file, a held-out token file (e.g. nanoGPT's val.bin), "
                                  "or --eval-split F, the file's last F held out");
    source = train_source;
    m.eval_microbatches = o.eval_microbatches > 0 ? o.eval_microbatches : o.microbatches;
    need(m.eval_microbatches >= 1, "--eval-microbatches must be >= 1: got " + std::to_string(m.eval_microbatches));
    sequences = static_cast<std::uint64_t>(m.eval_microbatches) * static_cast<std::uint64_t>(B);
    described = "eval: " + std::to_string(sequences) + " held-out sequences of the same source";
  } else {
    return;
  }
  m.data_description += "; " + described;
  m.eval_data = [source, B, seq_len, sequences](std::uint64_t, int microbatch) {
    return make_eval_microbatch(*source, microbatch, static_cast<int>(B), seq_len, sequences);
  };
  m.eval_target_losses = [](const at::Tensor& logits, const at::Tensor& targets) {
    namespace F = torch::nn::functional;
    const at::Tensor flat = F::cross_entropy(logits.reshape({-1, logits.size(-1)}), targets.reshape({-1}),
                                             F::CrossEntropyFuncOptions().reduction(torch::kNone).ignore_index(-100));
    return flat.reshape(targets.sizes());
  };
  m.eval_metrics = [](const at::Tensor& losses, const at::Tensor& targets) {
    const at::Tensor kept = targets != -100;
    const double mean = losses.masked_select(kept).to(at::kDouble).mean().item<double>();
    return std::vector<std::pair<std::string, double>>{{"perplexity", std::exp(mean)}};
  };
}

}  // namespace

std::shared_ptr<const token_source> open_source(const train_options& o) {
  check_eval_split(o);
  if (o.data == "synthetic") return make_synthetic_source(o.model.vocab, o.data_seed);
  return open_training_source(o);
}

model_definition gpt_model(const train_options& o) {
  const gpt_config c = o.model;
  need(c.vocab >= 2, "--vocab must be >= 2: got " + std::to_string(c.vocab));
  need(c.seq_len >= 1, "--seq-len must be >= 1: got " + std::to_string(c.seq_len));
  need(c.hidden >= 1, "--hidden must be >= 1: got " + std::to_string(c.hidden));
  need(c.heads >= 1, "--heads must be >= 1: got " + std::to_string(c.heads));
  need(c.hidden % c.heads == 0,
       "--hidden must be a multiple of --heads: got hidden=" + std::to_string(c.hidden) + ", heads=" + std::to_string(c.heads));
  need(c.layers >= 1, "--layers must be >= 1: got " + std::to_string(c.layers));
  validate_gpt_config(c);
  // Before anything is allocated (the synthetic source's tables grow with --vocab too): a
  // model past this machine's memory is one error naming its flags, not a process killed for
  // memory while it initialises.
  {
    const double h = c.hidden;
    require_model_memory("the GPT of --layers " + std::to_string(c.layers) + " --hidden " + std::to_string(c.hidden) +
                             " --vocab " + std::to_string(c.vocab) + " --seq-len " + std::to_string(c.seq_len),
                         (static_cast<double>(c.vocab) + c.seq_len) * h + c.layers * (12 * h * h + 13 * h) + 2 * h,
                         pipeline_stages(o), ranks_in_this_process(o), o.microbatch_size, c.seq_len, h, c.heads,
                         blocks_kept_per_microbatch(o, c.layers), 4 * h);
  }

  model_definition m;
  m.name = "gpt";
  m.seed = c.seed;
  m.default_partition = "type:^blocks\\.";
  m.tokens_per_sample = c.seq_len;

  // Every GPT layer either has no linear or defers through split_linear: one backward pass
  // per I, as before the model API.
  auto add = [&](layer_spec l) {
    l.split = backward_split::module_defers;
    m.layers.push_back(std::move(l));
  };
  layer_spec embed = make_layer("embed", [c] { return layer_module(std::make_shared<gpt_embedding_module>(c)); });
  embed.has_param_prefix = true;  // "tok_emb.weight", "pos_emb.weight"
  embed.tie_key = "tok_emb";
  embed.tied_parameters = {"tok_emb.weight"};
  add(std::move(embed));
  for (int i = 0; i < c.layers; ++i) {
    layer_spec b = make_layer("blocks." + std::to_string(i),
                              [c, i] { return layer_module(std::make_shared<gpt_block_module>(c, i)); });
    add(std::move(b));
  }
  add(make_layer("ln_f", [c] { return layer_module(std::make_shared<layer_norm_module>(c, "ln_f")); }));
  layer_spec head;
  head.name = "lm_head";
  head.tie_key = "tok_emb";  // the embedding's module: on another stage, a copy of tok_emb.weight
  head.forward = [](layer_module& module, const at::Tensor& h) {
    const auto& e = static_cast<gpt_embedding_module&>(*module.ptr());
    return h.matmul(e.embedding.token_weight().t());
  };
  add(std::move(head));

  m.loss = [c](const at::Tensor& logits, const at::Tensor& targets) {
    check_token_ids(c, targets, "targets");
    if (targets.size(0) != logits.size(0) || targets.size(1) != logits.size(1)) {
      throw std::invalid_argument("targets [" + std::to_string(targets.size(0)) + ", " + std::to_string(targets.size(1)) +
                                  "] do not match the input's [B, S] = [" + std::to_string(logits.size(0)) + ", " +
                                  std::to_string(logits.size(1)) + "]");
    }
    return torch::nn::functional::cross_entropy(logits.reshape({-1, logits.size(-1)}), targets.reshape({-1}));
  };
  std::shared_ptr<const token_source> source = open_source(o);
  m.data_description = source->describe();
  m.flags_followed = model_flags();  // all of them
  const int microbatch_size = o.microbatch_size, seq_len = c.seq_len;
  m.data = [source, microbatch_size, seq_len](std::uint64_t step, int microbatch) {
    return make_microbatch(*source, step, microbatch, microbatch_size, seq_len);
  };
  add_gpt_evaluation(m, o, source);
  return m;
}

}  // namespace actorpipe
