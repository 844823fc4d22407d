// Named tensors out of, and back into, the runners and optimizers of any layout.
#include "core/train/run_state.hpp"

#include <algorithm>
#include <map>
#include <filesystem>
#include <set>
#include <sstream>
#include <stdexcept>

#include "core/checkpoint/checkpoint_store.hpp"
#include "core/checkpoint/run_meta.hpp"
#include "core/log.hpp"
#include "core/model/error_text.hpp"
#include "core/model/layer_model.hpp"
#include "core/model/safetensors.hpp"
#include "core/model/tensor_box_torch.hpp"
#include "core/train/run_setup.hpp"
#include "core/text_file.hpp"

namespace actorpipe {
namespace {

bool is_copy(const chunk_compute& r, const std::string& name) {
  const auto copies = r.tied_copies();
  return std::find(copies.begin(), copies.end(), name) != copies.end();
}

bool starts_with_any(const std::string& name, const std::vector<std::string>& prefixes) {
  return std::any_of(prefixes.begin(), prefixes.end(), [&name](const std::string& p) { return name.rfind(p, 0) == 0; });
}

// Names as a message may show them: a file's are the file's own text (shown_text).
std::string list(const std::vector<std::string>& names) {
  std::string s;
  // Quoted where a name is empty (it read as nothing at all: "1 not in the model: ").
  for (size_t i = 0; i < names.size() && i < 10; ++i)
    s += (i ? ", " : "") + (names[i].empty() ? std::string("'' (an empty name)") : shown_text(names[i], 200));
  if (names.size() > 10) s += " and " + std::to_string(names.size() - 10) + " more";
  return s;
}

std::vector<moment_segment> segments_of(const named_tensors& t) {
  std::map<std::pair<std::string, long long>, moment_segment> by_run;  // (parameter, offset)
  std::set<std::pair<std::string, long long>> counted;                 // those with their steps
  for (const auto& [key, value] : t) {
    const auto at = key.rfind('@'), dot = key.rfind('.', at);
    if (at == std::string::npos || dot == std::string::npos)
      throw std::invalid_argument("optimizer tensor '" + key + "': expected <parameter>.<moment>@<offset>");
    const std::string parameter = key.substr(0, dot), what = key.substr(dot + 1, at - dot - 1);
    // One spelling per offset, as written: "@00" read as "@0", and its run replaced the other
    // without a word; at most 18 digits, so that offset + length stays within 64 bits (an
    // offset of 2^63 - 1 overflowed past the range check).
    const std::string digits = key.substr(at + 1);
    if (digits.empty() || digits.size() > 18 || (digits.size() > 1 && digits[0] == '0') ||
        !std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; }))
      throw std::invalid_argument("optimizer tensor '" + shown_text(key, 200) +
                                  "': bad offset (a whole number as written: no sign, no leading zero, at most 18 digits)");
    const long long offset = std::stoll(digits);
    auto& seg = by_run[{parameter, offset}];
    seg.parameter = parameter;
    seg.offset = offset;
    if (what == "exp_avg")
      seg.exp_avg = value;
    else if (what == "exp_avg_sq")
      seg.exp_avg_sq = value;
    else if (what == "steps") {
      // One whole number of updates, 0 or more (a negative one read as moments missing).
      const at::Tensor& n = unbox(value);
      if (!at::isIntegralType(n.scalar_type(), false))
        throw std::invalid_argument("optimizer tensor '" + key + "' is " + safetensors_dtype_of(value) +
                                    ": a step count is a whole number (I64)");
      if (n.numel() != 1)
        throw std::invalid_argument("optimizer tensor '" + key + "' holds " + std::to_string(n.numel()) +
                                    " values: a step count is one number");
      seg.steps = n.reshape({-1})[0].item<std::int64_t>();
      if (seg.steps < 0)
        throw std::invalid_argument("optimizer tensor '" + key + "' holds " + std::to_string(seg.steps) +
                                    " updates: a step count is 0 or more");
      counted.insert({parameter, offset});
    } else
      throw std::invalid_argument("optimizer tensor '" + key + "': unknown part '" + what + "'");
  }
  std::vector<moment_segment> out;
  for (auto& [k, seg] : by_run) {
    // A part missing would resume with zeros where the moments or the update count were (a
    // count of 0 is another bias correction): not the run that was saved.
    const std::string at = "@" + std::to_string(k.second);
    for (const auto& [part, here] : {std::pair<const char*, bool>{"exp_avg", seg.exp_avg.defined()},
                                     {"exp_avg_sq", seg.exp_avg_sq.defined()}, {"steps", counted.count(k) > 0}})
      if (!here)
        throw std::invalid_argument("optimizer tensor '" + k.first + "." + part + at + "' is missing (the checkpoint has " +
                                    "others of '" + k.first + at + "'): every parameter's moments need exp_avg, " +
                                    "exp_avg_sq and steps");
    // Moments no AdamW run leaves: the first update from them was blamed on --lr (exit 1, which
    // launch --max-restarts retried).
    for (const auto& [part, moment] : {std::pair<const char*, const tensor_box&>{"exp_avg", seg.exp_avg},
                                       {"exp_avg_sq", seg.exp_avg_sq}}) {
      const std::string name = k.first + "." + part + at;
      const at::Tensor& m = unbox(moment);
      if (!m.is_floating_point())
        throw std::invalid_argument("optimizer tensor '" + name + "' is " + safetensors_dtype_of(moment) +
                                    ": moments are floating-point");
      if (const std::string bad = nonfinite_tensor_text({{name, moment}}); !bad.empty())
        throw std::invalid_argument("optimizer tensor " + bad);
      if (std::string(part) == "exp_avg_sq")
        if (const std::int64_t negative = (m < 0).sum().item<std::int64_t>(); negative > 0)
          throw std::invalid_argument("optimizer tensor '" + name + "' holds " + std::to_string(negative) + " of its " +
                                      std::to_string(m.numel()) + " values below 0: a mean of squares is 0 or more");
      if (seg.steps == 0 && m.count_nonzero().item<std::int64_t>() > 0)
        throw std::invalid_argument("optimizer tensor '" + name + "' is not zero where its step count ('" + k.first +
                                    ".steps" + at + "') says no update was made");
    }
    out.push_back(std::move(seg));
  }
  // Runs of one parameter side by side, never over each other: a later one overwrote an earlier
  // one's elements without a word (by_run orders them by parameter, then offset).
  for (size_t i = 1; i < out.size(); ++i) {
    const moment_segment& before = out[i - 1];
    const long long end = before.offset + unbox(before.exp_avg).numel();
    if (out[i].parameter == before.parameter && out[i].offset < end)
      throw std::invalid_argument("optimizer tensors of '" + before.parameter + "' overlap: the run at @" +
                                  std::to_string(before.offset) + " holds elements up to " + std::to_string(end - 1) +
                                  ", and another begins at @" + std::to_string(out[i].offset));
  }
  return out;
}

std::string replica_prefix(int replica) { return "replica" + std::to_string(replica) + "/"; }

}  // namespace

std::string without_replica(const std::string& name) {
  if (name.rfind("replica", 0) != 0) return name;
  const auto slash = name.find('/');
  if (slash == std::string::npos || slash == 7 ||
      !std::all_of(name.begin() + 7, name.begin() + static_cast<std::ptrdiff_t>(slash), [](char c) { return c >= '0' && c <= '9'; }))
    return name;
  return name.substr(slash + 1);
}

std::function<bool(const std::string&)> wanted_by(const run_state_view& state) {
  auto names = std::make_shared<std::set<std::string>>();
  for (const auto& runner : state.runners)
    if (runner)
      for (const auto& [name, t] : loaded_tensors(*runner)) names->insert(name);
  return [names](const std::string& key) {
    const auto at = key.rfind('@');
    if (at == std::string::npos) return names->count(without_replica(key)) > 0;
    const auto dot = key.rfind('.', at);
    return dot != std::string::npos && names->count(key.substr(0, dot)) > 0;
  };
}

run_state_view state_view(const run_setup& s) {
  return {s.runners, s.optimizers, s.dp_optimizers, s.place.num_virtual_stages()};
}

named_tensors parameter_tensors(const run_state_view& state) {
  torch::NoGradGuard no_grad;
  named_tensors out;
  for (int v = 0; v < state.virtual_stages && v < static_cast<int>(state.runners.size()); ++v) {
    if (!state.runners[v]) continue;
    for (auto& [name, t] : saved_tensors(*state.runners[v])) out.emplace_back(name, box(unbox(t).detach().clone()));
  }
  return out;
}

named_tensors replica_buffer_tensors(const chunk_compute& runner, int replica) {
  torch::NoGradGuard no_grad;
  named_tensors out;
  if (replica <= 0) return out;
  for (auto& [name, t] : runner.named_buffers())
    out.emplace_back(replica_prefix(replica) + name, box(unbox(t).detach().clone()));
  return out;
}

named_tensors optimizer_tensors(const run_state_view& state) {
  named_tensors out;
  // A tied copy's moments equal its owner's (same gradients, same steps): the owner's go.
  auto add = [&](const chunk_compute& runner, const std::vector<moment_segment>& runs) {
    for (const auto& r : runs) {
      if (is_copy(runner, r.parameter)) continue;
      const std::string at = "@" + std::to_string(r.offset);
      out.emplace_back(r.parameter + ".exp_avg" + at, r.exp_avg);
      out.emplace_back(r.parameter + ".exp_avg_sq" + at, r.exp_avg_sq);
      out.emplace_back(r.parameter + ".steps" + at, box(torch::tensor({static_cast<std::int64_t>(r.steps)})));
    }
  };
  for (size_t id = 0; id < state.runners.size(); ++id) {
    if (!state.runners[id]) continue;
    if (id < state.optimizers.size() && state.optimizers[id]) add(*state.runners[id], state.optimizers[id]->export_moments());
    if (id < state.dp_optimizers.size() && state.dp_optimizers[id])
      add(*state.runners[id], state.dp_optimizers[id]->export_moments());
  }
  return out;
}

void load_parameter_tensors(const run_state_view& state, const named_tensors& parameters,
                            const std::vector<std::string>& fresh_prefixes) {
  torch::NoGradGuard no_grad;
  std::map<std::string, at::Tensor> by_name;
  for (auto& [name, t] : parameters) by_name[name] = unbox(t);
  std::vector<std::string> missing, mismatched, wrong_type;
  std::set<std::string> buffers_missing;  // saved before buffers were: they keep their values
  std::set<std::string> fresh;            // a task head the file lacks: it starts as built
  // Tensors given in another floating-point type than the model's, by (given, the model's):
  // copied as converted, said once (float64 weights rounded to float32 without a word).
  std::map<std::pair<c10::ScalarType, c10::ScalarType>, std::set<std::string>> converted;
  for (std::size_t i = 0; i < state.runners.size(); ++i) {
    const auto& runner = state.runners[i];
    if (!runner) continue;
    const int replica = state.virtual_stages > 0 ? static_cast<int>(i) / state.virtual_stages : 0;
    const auto take = [&](const std::string& name, const tensor_box& t, bool buffer) {
      const at::Tensor& p = unbox(t);
      auto it = by_name.end();
      if (buffer && replica > 0) it = by_name.find(replica_prefix(replica) + name);  // its own, if saved
      if (it == by_name.end()) it = by_name.find(name);
      if (it == by_name.end()) {
        if (starts_with_any(name, fresh_prefixes))
          fresh.insert(name);
        else if (buffer)
          buffers_missing.insert(name);
        else
          missing.push_back(name);
        return;
      }
      if (it->second.sizes() != p.sizes()) {
        std::ostringstream s;
        s << name << " (has " << p.sizes() << ", given " << it->second.sizes() << ")";
        mismatched.push_back(s.str());
        return;
      }
      // Whole numbers for a floating-point parameter are no weights of it (cast, they trained
      // from integers without a word).
      if (p.is_floating_point() && !it->second.is_floating_point()) {
        wrong_type.push_back(name + " (has " + std::string(c10::toString(p.scalar_type())) + ", given " +
                             std::string(c10::toString(it->second.scalar_type())) + ")");
        return;
      }
      if (p.is_floating_point() && p.scalar_type() != it->second.scalar_type())
        converted[{it->second.scalar_type(), p.scalar_type()}].insert(name);
      p.copy_(it->second);
    };
    for (const auto& [name, t] : runner->named_parameters()) take(name, t, false);
    for (const auto& [name, t] : runner->named_buffers()) take(name, t, true);
  }
  std::sort(missing.begin(), missing.end());
  missing.erase(std::unique(missing.begin(), missing.end()), missing.end());
  // A tied parameter is held by its owner and its copies: listed once.
  std::sort(mismatched.begin(), mismatched.end());
  mismatched.erase(std::unique(mismatched.begin(), mismatched.end()), mismatched.end());
  std::sort(wrong_type.begin(), wrong_type.end());
  wrong_type.erase(std::unique(wrong_type.begin(), wrong_type.end()), wrong_type.end());
  const bool fits = missing.empty() && mismatched.empty() && wrong_type.empty();
  if (!buffers_missing.empty() && fits)
    log_warn(std::to_string(buffers_missing.size()) + " buffers of the model are not in the saved weights (saved before "
             "buffers were?): they keep their initial values: " + list({buffers_missing.begin(), buffers_missing.end()}));
  if (!fresh.empty() && fits)
    log_warn(std::to_string(fresh.size()) + " tensors of the model's task head are not in the weights: they start as "
             "initialised (train them before you use them): " + list({fresh.begin(), fresh.end()}));
  if (fits) {
    for (const auto& [types, names] : converted) {
      const auto [given, model] = types;
      // Into a type that holds every value of the given one (BFloat16 or Half into Float), exact.
      const bool exact = c10::promoteTypes(given, model) == model;
      log_info("read " + std::to_string(names.size()) + (names.size() == 1 ? " tensor" : " tensors") + " given as " +
               c10::toString(given) + " into the model's " + c10::toString(model) + " parameters" +
               (exact ? " (exactly)" : " (rounded to the nearest " + std::string(c10::toString(model)) + ")") + ": " +
               list({names.begin(), names.end()}));
    }
    return;
  }
  std::string why;
  if (!missing.empty()) why += std::to_string(missing.size()) + " missing: " + list(missing);
  if (!mismatched.empty()) why += (why.empty() ? "" : "; ") + std::to_string(mismatched.size()) + " of another shape: " + list(mismatched);
  if (!wrong_type.empty()) why += (why.empty() ? "" : "; ") + std::to_string(wrong_type.size()) + " of another type: " + list(wrong_type);
  throw std::invalid_argument("the parameters do not fit the model: " + why);
}

named_tensors load_parameters(const std::vector<std::string>& files, const std::function<bool(const std::string&)>& wanted) {
  named_tensors parameters;
  for (const auto& file : files)
    for (auto& t : load_safetensors(file, [&](const std::string& name) {
           return name.find('@') == std::string::npos && wanted(name);  // '@': a checkpoint's moments
         }))
      parameters.push_back(std::move(t));
  return parameters;
}

std::string nonfinite_tensor_text(const named_tensors& tensors) {
  for (const auto& [name, t] : tensors) {
    const at::Tensor& x = unbox(t);
    if (!x.is_floating_point()) continue;
    const std::int64_t bad = x.numel() - at::isfinite(x).sum().item<std::int64_t>();
    if (bad > 0)
      return "'" + name + "' holds " + std::to_string(bad) + " of its " + std::to_string(x.numel()) +
             " values that are not finite (NaN or infinite)";
  }
  return "";
}

std::string load_weights(const run_state_view& state, const std::string& path,
                         const std::function<bool(const std::string&)>& elsewhere, const model_definition* model,
                         const std::function<void(const resume_choice&)>& on_checkpoint) {
  std::string from = path;
  const auto wanted = wanted_by(state);
  // TensorFlow's names of a LayerNorm's weight and bias, in Hugging Face's older files: read as
  // the model's where the model has no tensor of the file's name and has one of the new name.
  int renamed = 0, based = 0;
  const std::string base = model ? model->init_base_prefix : std::string();
  const auto model_name = [&](const std::string& name) {
    if (wanted(name)) return name;
    // A bare base model's file: its names under the base prefix (then TensorFlow's, below).
    for (const std::string& as : base.empty() ? std::vector<std::string>{name} : std::vector<std::string>{name, base + name}) {
      if (wanted(as)) return as;
      for (const auto& [from_suffix, to_suffix] :
           {std::pair<std::string, std::string>{".gamma", ".weight"}, {".beta", ".bias"}}) {
        if (as.size() <= from_suffix.size() || as.compare(as.size() - from_suffix.size(), from_suffix.size(), from_suffix) != 0)
          continue;
        std::string renamed_to = as.substr(0, as.size() - from_suffix.size()) + to_suffix;
        if (wanted(renamed_to)) return renamed_to;
      }
    }
    // A bare file's buffers the model has no use for (BertModel's embeddings.position_ids) are
    // skipped as the same names under the prefix are.
    if (!base.empty() && model && starts_with_any(base + name, model->init_unused_prefixes)) return base + name;
    return name;
  };
  std::set<std::string> in_files;
  named_tensors parameters;
  const auto read_files = [&](const std::vector<std::string>& files) {
    in_files.clear();
    parameters = load_parameters(files, [&](const std::string& name) {
      const std::string as = model_name(name);
      in_files.insert(as);
      return wanted(as);
    });
  };
  std::error_code ec;
  if (!std::filesystem::is_directory(path, ec)) {
    read_files({path});
  } else {  // a checkpoint, or a directory of them
    resume_choice c;
    try {
      c = read_resume_checkpoint(path, [&](const resume_choice& chosen) {
        if (on_checkpoint) on_checkpoint(chosen);
        std::vector<std::string> files;
        for (const auto& f : chosen.manifest.files) files.push_back(chosen.path + "/" + f.name);
        read_files(files);
      });
    } catch (const checkpoint_error& e) {
      // Its text names --resume, which finds checkpoints alike.
      std::string why = e.what();
      const std::string resume = "--resume '" + path + "': ";
      if (why.rfind(resume, 0) == 0) why = why.substr(resume.size());
      // "no valid checkpoint (none written)", or what is wrong with the one there ("'ck/step-2' is
      // a directory with ck/step-2/stage-1.safetensors: SHA-256 ..." read as one sentence).
      throw std::invalid_argument("'" + path + "' is a directory " +
                                  (why.rfind("no ", 0) == 0 ? "with " + why : "whose checkpoint cannot be used: " + why) +
                                  " (give a weights file, a checkpoint, or a folder of them)");
    }
    from = c.path;
  }
  std::map<std::string, std::string> read_as;  // model name -> the file's name
  for (auto& [name, t] : parameters) {
    std::string as = model_name(name);
    const bool under_base = !base.empty() && as.rfind(base, 0) == 0 && name.rfind(base, 0) != 0;
    based += under_base;
    renamed += as != (under_base ? base + name : name);
    // Both names of one LayerNorm tensor (gamma and weight), or one name in two files: which
    // is meant cannot be told.
    if (const auto [at, fresh] = read_as.emplace(as, name); !fresh)
      throw std::invalid_argument("the weights hold '" + as + "' twice" +
                                  (at->second != name ? " (as '" + at->second + "' and '" + name + "')" : std::string()));
    name = std::move(as);
  }
  // Weights that are not numbers make a first step's loss NaN, blamed on the learning rate.
  if (const std::string bad = nonfinite_tensor_text(parameters); !bad.empty()) throw std::invalid_argument(bad);
  if (renamed > 0)
    log_info("read " + std::to_string(renamed) + " LayerNorm tensors under their TensorFlow names (gamma, beta as weight, bias)");
  if (based > 0)
    log_info("read " + std::to_string(based) + " tensors of a bare base model under '" + base +
             "' (as Hugging Face's from_pretrained does)");
  const std::vector<std::string> no_prefixes;
  // What does not fit is said with the names the model lacks (below): a misspelt name is one
  // missing and one not in the model, and the second says which.
  std::string fit_error;
  try {
    load_parameter_tensors(state, parameters, model ? model->init_fresh_prefixes : no_prefixes);
  } catch (const std::invalid_argument& e) {
    fit_error = e.what();
  }
  // Finite in the file, not in the model: an F64 value past a float's range became infinite.
  for (const auto& runner : state.runners)
    if (runner && fit_error.empty())
      for (const auto& [name, t] : loaded_tensors(*runner)) {
        const at::Tensor& x = unbox(t);
        if (!x.is_floating_point()) continue;
        if (const std::int64_t bad = x.numel() - at::isfinite(x).sum().item<std::int64_t>(); bad > 0)
          throw std::invalid_argument("'" + name + "' holds " + std::to_string(bad) + " of its " + std::to_string(x.numel()) +
                                      " values beyond the range of the model's " + std::string(c10::toString(x.scalar_type())) +
                                      " parameters (infinite once converted)");
      }
  const std::set<std::string> file_names = in_files;
  std::vector<std::string> model_names;
  for (const auto& runner : state.runners)
    if (runner)
      for (const auto& p : loaded_tensors(*runner)) model_names.push_back(p.first);
  // Names the model lacks: neither a parameter of this process's runners nor a name another
  // process's layers may hold.
  for (const auto& name : model_names) in_files.erase(name);
  for (auto it = in_files.begin(); it != in_files.end();)  // other replicas' buffers (a data-parallel run's)
    it = without_replica(*it) != *it ? in_files.erase(it) : std::next(it);
  for (auto it = in_files.begin(); elsewhere && it != in_files.end();) it = elsewhere(*it) ? in_files.erase(it) : std::next(it);
  std::vector<std::string> unused;  // a pretraining head the model does not have
  for (auto it = in_files.begin(); model && it != in_files.end();) {
    if (!starts_with_any(*it, model->init_unused_prefixes)) {
      ++it;
      continue;
    }
    unused.push_back(*it);
    it = in_files.erase(it);
  }
  if (!unused.empty())
    log_info("skipped " + std::to_string(unused.size()) + " tensors of " + path + " that the model has no use for: " + list(unused));
  const std::string extra = in_files.empty() ? std::string()
                                             : std::to_string(in_files.size()) + " not in the model: " +
                                                   list({in_files.begin(), in_files.end()});
  if (fit_error.empty() && extra.empty()) return from;
  // A file saved under other names by one prefix (a BERT file without "bert.", say).
  std::string hint;
  for (const auto& m : model_names) {
    if (!hint.empty() || file_names.count(m)) continue;
    for (const auto& n : in_files) {
      if (m.size() > n.size() && m.compare(m.size() - n.size(), n.size(), n) == 0 && m[m.size() - n.size() - 1] == '.') {
        hint = " (the model's names are the file's with '" + m.substr(0, m.size() - n.size()) + "' before them)";
        break;
      }
      if (n.size() > m.size() && n.compare(n.size() - m.size(), m.size(), m) == 0 && n[n.size() - m.size() - 1] == '.') {
        hint = " (the file's names are the model's with '" + n.substr(0, n.size() - m.size()) + "' before them)";
        break;
      }
    }
  }
  throw std::invalid_argument((fit_error.empty() ? "the parameters do not fit the model: " + extra
                                                 : fit_error + (extra.empty() ? "" : "; " + extra)) +
                              hint);
}

std::function<bool(const std::string&)> held_elsewhere(const run_setup& setup) {
  std::vector<std::string> prefixes;
  bool any_name = false;
  for (int v = 0; v < setup.place.num_virtual_stages(); ++v) {
    if (v < static_cast<int>(setup.runners.size()) && setup.runners[v]) continue;
    for (int l = setup.layers[v].start; l < setup.layers[v].end; ++l) {
      const std::string prefix = setup.model->layers[l].prefix();
      any_name = any_name || prefix.empty();
      prefixes.push_back(prefix);
    }
  }
  return [prefixes, any_name](const std::string& name) { return any_name || starts_with_any(name, prefixes); };
}

void load_optimizer_tensors(const run_state_view& state, const named_tensors& optimizer, long long steps) {
  const auto runs = segments_of(optimizer);
  for (const auto& r : runs)
    if (steps >= 0 && r.steps > steps)
      throw std::invalid_argument("optimizer tensor '" + r.parameter + ".steps@" + std::to_string(r.offset) + "' holds " +
                                  std::to_string(r.steps) + " updates, more than the checkpoint's " +
                                  std::to_string(steps) + " steps");
  // Within its parameter (of those this process holds): one past its end was cut short, one
  // wholly past it passed over, without a word.
  std::map<std::string, std::int64_t> sizes;
  for (const auto& runner : state.runners)
    if (runner)
      for (const auto& [name, t] : loaded_tensors(*runner)) sizes[without_replica(name)] = unbox(t).numel();
  for (const auto& r : runs)
    if (const auto it = sizes.find(r.parameter); it != sizes.end() && r.offset + unbox(r.exp_avg).numel() > it->second)
      throw std::invalid_argument("optimizer tensors of '" + r.parameter + "@" + std::to_string(r.offset) + "' hold " +
                                  std::to_string(unbox(r.exp_avg).numel()) + " elements from " +
                                  std::to_string(r.offset) + ", past the parameter's " + std::to_string(it->second));
  for (size_t id = 0; id < state.runners.size(); ++id) {
    if (id < state.optimizers.size() && state.optimizers[id]) state.optimizers[id]->import_moments(runs);
    if (id < state.dp_optimizers.size() && state.dp_optimizers[id]) state.dp_optimizers[id]->import_moments(runs);
  }
}

void init_from_weights(const run_setup& setup, const train_options& o) {
  const std::string& path = o.init_from;
  std::string from;
  try {
    // From a checkpoint, the checks --resume makes of it: a damaged newer one said, and a model
    // of another shape (the weights could fit one: --heads) refused.
    const auto check = [&o, &path](const resume_choice& c) {
      for (const auto& why : c.refused) log_warn("not initialising from a damaged checkpoint: " + why);
      if (const std::string why = resume_model_mismatch(c.manifest.meta, o); !why.empty())
        throw std::invalid_argument((std::filesystem::path(c.path) == std::filesystem::path(path)
                                         ? std::string()
                                         : "its newest valid checkpoint " + c.path + ": ") + why);
    };
    from = load_weights(state_view(setup), path, held_elsewhere(setup), setup.model.get(), check);
  } catch (const std::exception& e) {
    throw std::invalid_argument("--init-from " + path + ": " + error_text(e));
  }
  log_info("initialised the parameters from " + from);
}

}  // namespace actorpipe
