// Checkpoint metadata: written with every checkpoint, compared on --resume.
#include "core/checkpoint/run_meta.hpp"

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <map>
#include <mutex>
#include <tuple>

#include "core/content_digest.hpp"
#include "core/data/token_source.hpp"
#include "core/number_text.hpp"
#include "core/optim/optimizer.hpp"
#include "core/text_file.hpp"

namespace actorpipe {
namespace {

// content_digest of an input file, once per (path, size, modification time): a checkpoint is
// written every --save-every steps, a digest of a big data file takes a second.
std::string input_digest(const std::string& path) {
  if (path.empty()) return "";
  namespace fs = std::filesystem;
  std::error_code ec;
  const auto size = fs::file_size(path, ec);
  if (ec) return content_digest(path);
  const auto when = fs::last_write_time(path, ec).time_since_epoch().count();
  static std::mutex mutex;
  static std::map<std::tuple<std::string, std::uintmax_t, long long>, std::string> known;
  const auto key = std::make_tuple(path, size, static_cast<long long>(when));
  {
    std::lock_guard<std::mutex> lock(mutex);
    if (auto it = known.find(key); it != known.end()) return it->second;
  }
  std::string digest = content_digest(path);
  std::lock_guard<std::mutex> lock(mutex);
  return known.emplace(key, std::move(digest)).first->second;
}

std::string shown(const nlohmann::json& v) {
  if (v.is_string()) return "'" + shown_text(v.get<std::string>(), 200) + "'";
  if (v.is_number_float()) return number_text(v.get<double>());
  return shown_text(v.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace), 200);
}

// meta[key] where it is a string, else "" (a damaged or foreign manifest may hold anything:
// json::value threw a raw type_error on another type).
std::string text_at(const nlohmann::json& meta, const char* key) {
  const auto it = meta.find(key);
  return it != meta.end() && it->is_string() ? it->get<std::string>() : std::string();
}

// What an evaluation pass reads: --eval-file's contents, --eval-microbatches and --eval-split
// (the last written only where given: a checkpoint from before it had none).
std::string eval_set(const train_options& o) {
  return data_file_digest(o.text.eval_file) + "/" + std::to_string(o.eval_microbatches) +
         (o.eval_split > 0 ? "/split " + number_text(o.eval_split) : std::string());
}

}  // namespace

std::string data_file_digest(const std::string& path) {
  const std::string index = megatron_index_of(path);
  return input_digest(path) + (index.empty() ? std::string() : "; its index " + input_digest(index));
}

std::string data_content_digest(const train_options& o) {
  if (o.data != "file") return "";
  if (o.data_blend.empty()) return data_file_digest(o.data_file);
  std::string out;
  for (const auto& part : o.data_blend)
    out += (out.empty() ? "" : "; ") + (part.weight > 0 ? number_text(part.weight) : std::string("by its tokens")) + ": " +
           data_file_digest(part.path);
  return "a blend of " + std::to_string(o.data_blend.size()) + " files, " + out;
}

nlohmann::json checkpoint_meta(const train_options& o, int step, bool eval_pending) {
  return {{"step", step},
          {"eval_pending", eval_pending},
          {"steps", o.steps},
          {"model", o.model_name},
          {"gpt", {{"vocab", o.model.vocab}, {"seq_len", o.model.seq_len}, {"hidden", o.model.hidden},
                   {"heads", o.model.heads}, {"layers", o.model.layers}, {"seed", o.model.seed}}},
          {"schedule", o.schedule},
          {"stages", o.stages},
          {"chunks", o.chunks},
          {"dp", o.dp},
          {"zero_stage", o.zero_stage},
          {"microbatches", o.microbatches},
          {"microbatch_size", o.microbatch_size},
          {"lr", o.lr},
          {"warmup_steps", o.warmup_steps},
          {"min_lr_ratio", o.min_lr_ratio},
          {"lr_decay_style", o.lr_decay_style},
          // The step the decay ends at, as the run trained (its --steps when not given).
          {"lr_decay_steps", lr_decay_end(o.lr_decay_steps, o.steps)},
          {"grad_clip", o.grad_clip},
          {"weight_decay", o.weight_decay},
          {"adam_beta1", o.adam_beta1},
          {"adam_beta2", o.adam_beta2},
          {"adam_eps", o.adam_eps},
          {"data", o.data},
          {"data_file", o.data_file},
          {"data_content", data_content_digest(o)},
          {"eval_split", o.eval_split},  // training reads the data file less this share
          {"vocab_file_content", input_digest(o.text.vocab_file)},
          // What an evaluation pass reads (the pass a stopped run skipped runs first on resume).
          {"eval_set", eval_set(o)},
          {"lower_case", o.text.lower_case},
          {"text_columns", o.text.columns},
          {"data_seed", o.data_seed},
          {"threads_per_stage", o.threads_per_stage},
          {"rng", "none: the data and the initial parameters are functions of the seeds and the step"}};
}

std::vector<std::string> resume_changes(const nlohmann::json& meta, const train_options& o) {
  std::vector<std::string> out;
  if (!meta.is_object()) return out;
  auto compare = [&](const char* key, const nlohmann::json& now) {
    auto it = meta.find(key);
    if (it == meta.end() || *it == now) return;
    // Numbers compare by value whatever JSON type they were written as (1 against 1.0).
    if (it->is_number() && now.is_number() && it->get<double>() == now.get<double>()) return;
    out.push_back(std::string(key) + " " + shown(*it) + " -> " + shown(now));
  };
  // A setting a checkpoint did not record yet, which its run had at `was`.
  auto compare_or_was = [&](const char* key, const nlohmann::json& was, const nlohmann::json& now) {
    if (meta.find(key) != meta.end())
      compare(key, now);
    else if (was != now)
      out.push_back(std::string(key) + " " + shown(was) + " (before it was saved) -> " + shown(now));
  };
  compare("data", o.data);
  if (o.data == "file" && text_at(meta, "data") == "file") {
    // The same contents under another spelling of the path (../data.txt for data.txt, from
    // another folder) is no change; another file, or the same path with other contents, is.
    const std::string now = data_content_digest(o);
    const auto before = meta.find("data_content");
    if (before == meta.end() || !before->is_string() || before->get<std::string>().empty() || *before != now)
      compare("data_file", o.data_file);
    compare("data_content", now);
  } else if (o.data == "file" || text_at(meta, "data") == "file") {
    compare("data_file", o.data_file);
  }
  // Another share held out trains on other windows (a checkpoint from before it held none out).
  compare_or_was("eval_split", 0.0, o.eval_split);
  compare("vocab_file_content", input_digest(o.text.vocab_file));  // BERT: the embeddings' rows mean other words
  compare("lower_case", o.text.lower_case);
  compare("text_columns", o.text.columns);
  compare("data_seed", o.data_seed);
  // The global batch: microbatches of microbatch_size on each of dp replicas.
  const auto mb = meta.find("microbatches"), size = meta.find("microbatch_size"), dp = meta.find("dp");
  if (mb != meta.end() && size != meta.end() && dp != meta.end() && mb->is_number_integer() &&
      size->is_number_integer() && dp->is_number_integer()) {
    // A damaged manifest's numbers may not multiply within 64 bits (it overflowed).
    std::int64_t before = 0;
    const bool fits = !__builtin_mul_overflow(mb->get<std::int64_t>(), size->get<std::int64_t>(), &before) &&
                      !__builtin_mul_overflow(before, dp->get<std::int64_t>(), &before);
    const std::int64_t now = static_cast<std::int64_t>(o.microbatches) * o.microbatch_size * o.dp;
    if (!fits || before != now)
      out.push_back("global batch " + (fits ? std::to_string(before) : std::string("past 2^63")) + " -> " +
                    std::to_string(now) + " sequences (microbatches x microbatch_size x dp)");
  }
  compare("lr", o.lr);
  compare("warmup_steps", o.warmup_steps);
  compare("min_lr_ratio", o.min_lr_ratio);
  // A checkpoint from before the style could be chosen decayed linearly.
  compare_or_was("lr_decay_style", "linear", o.lr_decay_style);
  // Where the decay ends (a checkpoint from before it could be set: at its run's steps). A
  // resume that keeps it trains on the schedule the interrupted run was on, whatever --steps
  // it is given: no change to name; one that moves it (--steps alone moves an end that follows
  // them) names both.
  {
    const auto saved_steps = meta.find("steps"), saved_end = meta.find("lr_decay_steps");
    const nlohmann::json was = saved_end != meta.end() ? *saved_end : saved_steps != meta.end() ? *saved_steps : nlohmann::json();
    const int now = lr_decay_end(o.lr_decay_steps, o.steps);
    if (!was.is_number_integer() || was.get<long long>() != now) {
      if (was.is_number_integer()) out.push_back("lr_decay_steps " + shown(was) + " -> " + std::to_string(now));
      compare("steps", o.steps);
    }
  }
  compare("grad_clip", o.grad_clip);
  compare("weight_decay", o.weight_decay);
  // A checkpoint from before they could be set ran AdamW at these.
  compare_or_was("adam_beta1", 0.9, o.adam_beta1);
  compare_or_was("adam_beta2", 0.95, o.adam_beta2);
  compare_or_was("adam_eps", 1e-8, o.adam_eps);
  // LibTorch's products split their sums by thread: other rounding, other bits from here on.
  const std::size_t before_threads = out.size();
  compare("threads_per_stage", o.threads_per_stage);
  if (out.size() > before_threads) out.back() += " (LibTorch splits its sums by thread: other rounding)";
  return out;
}

std::string pending_eval_change(const nlohmann::json& meta, const train_options& o) {
  if (!meta.is_object()) return "";
  const auto saved = meta.find("eval_set");
  if (saved == meta.end() || !saved->is_string()) return "";  // not recorded: nothing to say
  if (saved->get<std::string>() == eval_set(o)) return "";
  return "other evaluation data than the interrupted run's (--eval-file, --eval-microbatches, --eval-split): its numbers "
         "are not the ones that run would have had";
}

std::string resume_model_mismatch(const nlohmann::json& meta, const train_options& o) {
  if (!meta.is_object()) return "";
  const auto saved_model = meta.find("model");
  if (saved_model != meta.end() && saved_model->is_string() && saved_model->get<std::string>() != o.model_name)
    return "the checkpoint is of --model " + shown_text(saved_model->get<std::string>(), 200) + ", this run trains --model " +
           o.model_name + ": its tensors belong to another model (give --model " +
           shown_text(saved_model->get<std::string>(), 200) + ")";
  if (text_at(meta, "model") != o.model_name) return "";
  if (o.model_name != "gpt" && o.model_name != "bert") return "";
  const auto shape = meta.find("gpt");
  if (shape == meta.end() || !shape->is_object()) return "";
  // The keys the built-in models take their shape from (bert's vocabulary and positions come
  // from its files and flags of its own).
  std::vector<std::pair<const char*, int>> keys = {{"layers", o.model.layers}, {"hidden", o.model.hidden}, {"heads", o.model.heads}};
  if (o.model_name == "gpt") keys.insert(keys.end(), {{"vocab", o.model.vocab}, {"seq_len", o.model.seq_len}});
  std::string saved, now;
  for (const auto& [key, value] : keys) {
    const auto it = shape->find(key);
    if (it == shape->end() || !it->is_number_integer() || it->get<long long>() == value) continue;
    std::string flag = std::string("--") + key;
    std::replace(flag.begin(), flag.end(), '_', '-');
    saved += (saved.empty() ? "" : " ") + flag + " " + std::to_string(it->get<long long>());
    now += (now.empty() ? "" : " ") + flag + " " + std::to_string(value);
  }
  if (saved.empty()) return "";
  return "the checkpoint's " + o.model_name + " has " + saved + ", this run " + now +
         ": its tensors belong to another model (give " + saved + ")";
}

std::string resume_vocabulary_hint(const nlohmann::json& meta, const train_options& o) {
  if (!meta.is_object() || o.model_name != "bert" || text_at(meta, "model") != "bert") return "";
  const auto saved = meta.find("vocab_file_content");
  if (saved == meta.end() || !saved->is_string()) return "";
  const std::string now = input_digest(o.text.vocab_file);
  if (saved->get<std::string>() == now) return "";
  if (now.empty())
    return "the checkpoint was trained with a --vocab-file, and this run builds its vocabulary from --data-file: give "
           "the --vocab-file it was trained with";
  if (saved->get<std::string>().empty())
    return "the checkpoint's vocabulary was built from its --data-file, and this run reads --vocab-file '" +
           o.text.vocab_file + "': leave --vocab-file out";
  return "--vocab-file '" + o.text.vocab_file +
         "' is not the vocabulary the checkpoint was trained with: give the one it was trained with";
}

}  // namespace actorpipe
