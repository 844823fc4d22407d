// The model API's registry and checks, and the whole-model measurements partition methods use.
#include "core/model/layer_model.hpp"

#include <algorithm>
#include <chrono>
#include <map>
#include <mutex>
#include <set>
#include <sstream>
#include <stdexcept>

#include "core/median.hpp"
#include "core/model/bert_task.hpp"
#include "core/model/chunk_compute.hpp"
#include "core/model/compute_threads.hpp"
#include "core/model/error_text.hpp"
#include "core/model/gpt_model.hpp"
#include "core/model/gpt_modules.hpp"
#include "core/model/tensor_box_torch.hpp"
#include "core/text_file.hpp"

namespace actorpipe {
namespace {

struct registered_model {
  model_factory factory;
  std::string description;
};

std::mutex registry_mutex;
std::map<std::string, registered_model>& user_models() {
  static std::map<std::string, registered_model> models;
  return models;
}

const char* gpt_description = "the built-in GPT decoder (--vocab, --seq-len, --hidden, --heads, --layers)";

std::string known_models() {
  std::string out;
  for (auto& [name, description] : list_models()) out += (out.empty() ? "" : ", ") + name;
  return out;
}

}  // namespace

layer_spec make_layer(std::string name, module_factory build) {
  layer_spec s;
  s.name = std::move(name);
  s.build = std::move(build);
  return s;
}

const std::vector<std::string>& model_flags() {
  static const std::vector<std::string> flags = {"--layers", "--hidden",    "--heads",     "--seq-len",
                                                 "--vocab",  "--data-file", "--eval-file", "--eval-split"};
  return flags;
}

void validate_model(const model_definition& m) {
  const std::string who = "model '" + m.name + "'";
  if (m.layers.empty()) throw std::invalid_argument(who + " has no layers: a model needs at least one layer spec");
  // Spelt as the flags are: "hidden" matched nothing, and the model was told it ignored --hidden.
  for (const auto& flag : m.flags_followed)
    if (std::find(model_flags().begin(), model_flags().end(), flag) == model_flags().end()) {
      std::string known;
      for (const auto& f : model_flags()) known += (known.empty() ? "" : ", ") + f;
      throw std::invalid_argument(who + ": flags_followed holds '" + flag + "', not one of " + known);
    }
  std::set<std::string> names;
  std::set<std::string> keys;
  for (std::size_t i = 0; i < m.layers.size(); ++i) {
    const layer_spec& l = m.layers[i];
    const std::string at = who + ", layer " + std::to_string(i);
    if (l.name.empty()) throw std::invalid_argument(at + " has an empty name");
    if (!names.insert(l.name).second) throw std::invalid_argument(at + ": the name '" + l.name + "' is used twice");
    // Caught after training, when its checkpoint or --save-final was written (a tab) or failed
    // (bytes of no UTF-8): the files could not be loaded, or the run's outputs were lost.
    if (const std::string why = unstorable_name_reason(l.name); !why.empty())
      throw std::invalid_argument(at + ": its name " + why + " (its parameters are named after it)");
    if (l.has_param_prefix)
      if (const std::string why = unstorable_name_reason(l.param_prefix); !why.empty())
        throw std::invalid_argument(at + ": its param_prefix " + why);
    const bool follower = !l.tie_key.empty() && keys.count(l.tie_key);
    if (!l.tie_key.empty()) keys.insert(l.tie_key);
    if (!follower && !l.build)
      throw std::invalid_argument(at + " ('" + l.name + "') has no build function" +
                                  (l.tie_key.empty() ? "" : " (the first layer of tie key '" + l.tie_key + "' builds its module)"));
    if (follower && !l.tied_parameters.empty())
      throw std::invalid_argument(at + " ('" + l.name + "'): tied_parameters belongs on the first layer of tie key '" +
                                  l.tie_key + "'");
  }
  if (!m.loss) throw std::invalid_argument(who + " has no loss function");
  if (!m.data) throw std::invalid_argument(who + " has no data (batch function)");
  if (!(m.tokens_per_sample > 0))
    throw std::invalid_argument(who + ": tokens_per_sample must be > 0, got " + std::to_string(m.tokens_per_sample));
  if (m.eval_microbatches < 0)
    throw std::invalid_argument(who + ": eval_microbatches must be >= 0, got " + std::to_string(m.eval_microbatches));
  if (m.eval_microbatches > 0) {
    // Evaluation takes class indices: found after training, the run's result was lost.
    if (!m.eval_data) throw std::invalid_argument(who + " has eval_microbatches but no eval_data");
    microbatch_tensors first;
    try {
      first = m.eval_data(0, 0);
    } catch (const std::exception& e) {
      throw std::invalid_argument(who + ": its eval_data(0, 0) failed: " + error_text(e));
    }
    const at::Tensor& t = unbox(first.targets);
    if (!t.defined() || t.scalar_type() != at::kLong)
      throw std::invalid_argument(who + ": eval_data's targets must be int64 (class indices, token ids; -100 for "
                                  "padding), got " +
                                  (t.defined() ? std::string(c10::toString(t.scalar_type())) : std::string("none")));
  }
}

void register_model(const std::string& name, model_factory factory, std::string description) {
  if (name.empty() || name.find_first_of(" \t\n\r") != std::string::npos)
    throw std::invalid_argument("register_model: a model name must be non-empty without whitespace, got '" +
                                shown_text(name, 200) + "'");
  // It is said in lists of the known models and written into checkpoints: printable UTF-8, as
  // layer names are ("x\xff" printed as a replacement character).
  if (const std::string why = unstorable_name_reason(name); !why.empty())
    throw std::invalid_argument("register_model: the model name " + why);
  if (name == "gpt" || name == "bert")
    throw std::invalid_argument("register_model: '" + name + "' is a built-in model and cannot be replaced");
  if (!factory) throw std::invalid_argument("register_model: model '" + name + "' needs a factory");
  std::lock_guard<std::mutex> lock(registry_mutex);
  user_models()[name] = {std::move(factory), std::move(description)};
}

bool has_model(const std::string& name) {
  if (name == "gpt" || name == "bert") return true;
  std::lock_guard<std::mutex> lock(registry_mutex);
  return user_models().count(name) > 0;
}

std::vector<std::pair<std::string, std::string>> list_models() {
  std::vector<std::pair<std::string, std::string>> out{{"gpt", gpt_description}, {"bert", bert_description}};
  std::lock_guard<std::mutex> lock(registry_mutex);
  for (auto& [name, m] : user_models()) out.emplace_back(name, m.description);
  return out;
}

model_definition make_model(const train_options& options) {
  model_definition m;
  if (options.model_name == "gpt") {
    m = gpt_model(options);
  } else if (options.model_name == "bert") {
    m = bert_task_model(options);
  } else {
    model_factory factory;
    {
      std::lock_guard<std::mutex> lock(registry_mutex);
      auto it = user_models().find(options.model_name);
      if (it != user_models().end()) factory = it->second.factory;
    }
    if (!factory)
      throw std::invalid_argument("--model '" + options.model_name + "' is not a registered model (known: " + known_models() + ")");
    try {
      m = factory(options);
    } catch (const std::exception& e) {  // refused before anything ran, naming the model
      throw std::invalid_argument("--model '" + options.model_name + "': its factory failed: " + error_text(e));
    }
  }
  if (m.name.empty()) m.name = options.model_name;
  validate_model(m);
  return m;
}

void seed_layer_init(std::uint64_t seed, const std::string& name) {
  torch::manual_seed(parameter_seed(seed, name));  // the GPT's per-name seed, for whole layers
}

namespace {

// `built` as build_all_layers gave it for `model` (one module per layer), or std::invalid_argument
// naming `function` (an empty built_layers was read past its end: SIGSEGV).
void check_built(const model_definition& model, const built_layers& built, const char* function) {
  if (built.modules.size() != model.layers.size())
    throw std::invalid_argument(std::string(function) + ": " + std::to_string(built.modules.size()) + " built modules for the " +
                                std::to_string(model.layers.size()) + " layers of model '" + model.name +
                                "' (give it build_all_layers(model))");
  for (std::size_t i = 0; i < built.modules.size(); ++i)
    if (built.modules[i].empty())
      throw std::invalid_argument(std::string(function) + ": layer '" + model.layers[i].name + "' (layer " +
                                  std::to_string(i) + ") has no built module (give it build_all_layers(model))");
}

}  // namespace

void check_tie_shapes(const model_definition& model, int owner, const layer_module& owner_module, int follower) {
  const int layers = static_cast<int>(model.layers.size());
  if (owner < 0 || owner >= layers || follower < 0 || follower >= layers)
    throw std::invalid_argument("check_tie_shapes: layers " + std::to_string(owner) + " and " + std::to_string(follower) +
                                " of model '" + model.name + "', which has layers 0.." + std::to_string(layers - 1));
  if (owner_module.empty()) throw std::invalid_argument("check_tie_shapes: the owner's module is empty");
  const layer_spec& o = model.layers[owner];
  const layer_spec& f = model.layers[follower];
  if (!f.build) return;
  const layer_module mine = build_layer(model, f);
  auto theirs = owner_module.ptr()->named_parameters(true);
  auto ours = mine.ptr()->named_parameters(true);
  auto shape = [](const at::Tensor& t) {
    std::ostringstream os;
    os << t.sizes();
    return os.str();
  };
  for (const auto& p : theirs) {
    const bool tied = o.tied_parameters.empty() ||
                      std::find(o.tied_parameters.begin(), o.tied_parameters.end(), p.key()) != o.tied_parameters.end();
    if (!tied) continue;
    const at::Tensor* other = ours.find(p.key());
    const std::string head = "tie key '" + o.tie_key + "': layer '" + f.name + "' (layer " + std::to_string(follower) + ") ";
    const std::string tail = ", but layer '" + o.name + "' (layer " + std::to_string(owner) + "), which owns the tie, has " +
                             p.key() + " " + shape(p.value());
    if (!other) throw std::invalid_argument(head + "builds no parameter " + p.key() + tail);
    if (other->sizes() != p.value().sizes()) throw std::invalid_argument(head + "builds " + p.key() + " " + shape(*other) + tail);
  }
}

layer_module build_layer(const model_definition& model, const layer_spec& layer) {
  if (!layer.build) throw std::invalid_argument("layer '" + layer.name + "' has no build function");
  layer_module module;
  try {
    // Seeded and built as one: another run of this process seeding meanwhile changed its layers.
    const std::lock_guard<std::mutex> generator(default_generator_use());
    seed_layer_init(model.seed, layer.name);
    module = layer.build();
  } catch (const std::exception& e) {
    throw std::invalid_argument("layer '" + layer.name + "': its build function failed: " + error_text(e));
  }
  if (module.empty()) throw std::invalid_argument("layer '" + layer.name + "': its build function returned no module");
  return module;
}

built_layers build_all_layers(const model_definition& model) {
  built_layers b;
  std::map<std::string, std::size_t> by_key;
  for (std::size_t i = 0; i < model.layers.size(); ++i) {
    const layer_spec& l = model.layers[i];
    auto it = l.tie_key.empty() ? by_key.end() : by_key.find(l.tie_key);
    if (it != by_key.end()) {
      check_tie_shapes(model, static_cast<int>(it->second), b.modules[it->second], static_cast<int>(i));
      b.modules.push_back(b.modules[it->second]);
      continue;
    }
    if (!l.tie_key.empty()) by_key[l.tie_key] = b.modules.size();
    b.modules.push_back(build_layer(model, l));
  }
  return b;
}

std::vector<double> layer_parameter_counts(const model_definition& model, const built_layers& built) {
  check_built(model, built, "layer_parameter_counts");
  std::vector<double> counts;
  std::set<std::string> keys_seen;
  std::map<std::string, std::vector<std::string>> tied_of;
  for (std::size_t i = 0; i < model.layers.size(); ++i) {
    const layer_spec& l = model.layers[i];
    const bool follower = !l.tie_key.empty() && !keys_seen.insert(l.tie_key).second;
    if (!l.tie_key.empty() && !follower) tied_of[l.tie_key] = l.tied_parameters;
    double n = 0;
    for (const auto& p : built.modules[i].ptr()->named_parameters(true)) {
      if (!p.value().requires_grad()) continue;
      const auto& tied = tied_of[l.tie_key];
      if (follower && !tied.empty() && std::find(tied.begin(), tied.end(), p.key()) == tied.end()) continue;
      n += static_cast<double>(p.value().numel());
    }
    counts.push_back(n);
  }
  return counts;
}

std::string describe_tensor(const at::Tensor& t) {
  if (!t.defined()) return "an undefined tensor";
  std::ostringstream os;
  os << c10::toString(t.scalar_type()) << " " << t.sizes();
  return os.str();
}

at::Tensor checked_loss(const model_definition& model, const at::Tensor& output, const at::Tensor& targets) {
  at::Tensor loss;
  try {
    loss = model.loss(output, targets);
  } catch (const std::exception& e) {
    throw_as(e, "loss: " + error_text(e));
  }
  if (!loss.defined() || loss.numel() != 1 || !loss.is_floating_point())
    throw std::runtime_error("loss: must return a floating-point scalar, got " + describe_tensor(loss));
  return loss.reshape({});
}

std::vector<double> profile_layers(const model_definition& model, const built_layers& built, int repeats) {
  using clock = std::chrono::steady_clock;
  check_built(model, built, "profile_layers");
  // 0 or fewer passes gave every layer 0 s, a "median" of nothing.
  if (repeats < 1 || repeats > 1000)
    throw std::invalid_argument("profile_layers: repeats=" + std::to_string(repeats) + " must be in [1, 1000]");
  const std::size_t L = model.layers.size();
  const microbatch_tensors sample = model.data(0, 0);
  const at::Tensor& inputs = unbox(sample.inputs);
  const at::Tensor& targets = unbox(sample.targets);
  std::vector<std::vector<double>> runs(L);
  torch::AutoGradMode enable_grad(true);
  // What fails here is the user's layer or loss, run as --partition profile runs it: named.
  const auto failed = [&model](std::size_t i, const char* pass, const std::exception& e) {
    return std::invalid_argument("--partition profile: layer '" + model.layers[i].name + "' (layer " + std::to_string(i) +
                                 ") failed in its " + pass + ": " + error_text(e));
  };
  for (int r = 0; r < repeats + 1; ++r) {
    std::vector<at::Tensor> ins(L), outs(L);
    std::vector<double> t(L, 0.0);
    at::Tensor h = inputs;
    for (std::size_t i = 0; i < L; ++i) {
      // Each layer on its own leaf, so its backward can be timed alone; the layer gets a copy
      // past the leaf, as a stage's first layer does (it may work in place).
      ins[i] = h.is_floating_point() ? h.detach().requires_grad_(true) : h;
      auto t0 = clock::now();
      auto& module = const_cast<layer_module&>(built.modules[i]);
      const layer_spec& l = model.layers[i];
      const at::Tensor in = ins[i].requires_grad() ? ins[i].clone() : ins[i];
      try {
        h = l.forward ? l.forward(module, in) : module.forward(in);
      } catch (const std::exception& e) {
        throw failed(i, "forward", e);
      }
      if (i + 1 == L) {
        try {
          h = checked_loss(model, h, targets);
        } catch (const std::exception& e) {
          throw std::invalid_argument(std::string("--partition profile: ") + e.what());
        }
      }
      outs[i] = h;
      t[i] += std::chrono::duration<double>(clock::now() - t0).count();
    }
    at::Tensor g;
    for (std::size_t i = L; i-- > 0;) {
      auto t0 = clock::now();
      if (outs[i].requires_grad()) {  // else nothing before it needs a gradient (an integer output)
        try {
          if (g.defined()) {
            torch::autograd::backward({outs[i]}, {g});
          } else {
            torch::autograd::backward({outs[i]});
          }
        } catch (const std::exception& e) {
          throw failed(i, "backward", e);
        }
      }
      g = ins[i].requires_grad() ? ins[i].grad() : at::Tensor();
      t[i] += std::chrono::duration<double>(clock::now() - t0).count();
      if (!g.defined() && i > 0 && outs[i - 1].is_floating_point()) g = at::zeros_like(outs[i - 1]);
    }
    for (const auto& m : built.modules) m.ptr()->zero_grad();
    if (r == 0) continue;  // warm-up: first-touch allocations
    for (std::size_t i = 0; i < L; ++i) runs[i].push_back(t[i]);
  }
  std::vector<double> per_layer(L);
  for (std::size_t i = 0; i < L; ++i) per_layer[i] = median(runs[i]);
  return per_layer;
}

}  // namespace actorpipe
