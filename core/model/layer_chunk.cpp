// layer_chunk: a slice of a model's layers, its per-microbatch stashes and deferred weight
// gradients (a split_linear store, or a kept graph for the generic split).
#include "core/model/layer_chunk.hpp"

#include <c10/util/Exception.h>

#include <algorithm>
#include <cstring>
#include <cmath>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <sstream>
#include <stdexcept>
#include <utility>

#include <torch/csrc/autograd/function_hook.h>

#include "core/model/error_text.hpp"
#include "core/model/layer_model.hpp"
#include "core/model/split_backward.hpp"
#include "core/model/split_linear.hpp"
#include "core/model/tensor_box_torch.hpp"

namespace actorpipe {
namespace {

// Building modules seeds torch's global generator first: one build at a time.
std::mutex build_mutex;

struct stash {
  at::Tensor input;    // the caller's input, or our own leaf that collects d loss / d input
  at::Tensor targets;  // last stage only
  double loss_scale = 1.0;
  at::Tensor output;   // output, or the scaled loss on the last stage (undefined under checkpointing)
  std::vector<std::int64_t> output_shape;
};

struct position {
  const layer_spec* spec;
  int index;                 // in the model's list
  layer_module* module;
};

// What a stage's first layer gets: past the leaf that takes the input's gradient, as in the
// whole model, where that layer's input comes out of the layer before it. A layer that works
// in place (ReLU(inplace)) may not touch a leaf that requires a gradient, so it ran whole and
// failed cut there. The copy changes no value and no gradient.
at::Tensor past_leaf(const at::Tensor& x, bool first_stage) { return first_stage ? x : x.clone(); }

// A last stage's loss without a graph: nothing would train.
const char* const detached_loss =
    ": the loss does not depend on any parameter (it requires no gradient): does the loss function or a layer detach "
    "its input?";

}  // namespace

struct layer_chunk::impl {
  std::shared_ptr<const model_definition> model;
  chunk_spec spec;
  std::map<int, layer_module> modules;  // by the index of the layer that built it
  std::vector<position> positions;
  std::vector<std::pair<std::string, at::Tensor>> params;
  std::vector<std::pair<std::string, at::Tensor>> buffers;  // of the modules built here, less tied copies'
  bool buffers_compared = false;  // activation checkpointing compared their bytes around a forward
  std::vector<std::string> copies;
  std::map<std::string, std::vector<at::Tensor>> tied;  // key -> tied parameters held here
  // The parameters of tied copies that tied_parameters leaves out.
  struct untied_parameter {
    std::string layer, owner, key, name;
    at::Tensor tensor;
  };
  std::vector<untied_parameter> untied_in_copies;
  bool module_defers = true;
  std::map<int, stash> stashes;
  std::map<int, weight_grad_store> stores;            // module_defers
  std::map<int, deferred_weight_pass> kept_graphs;    // generic split
  // set_gradient_listener: the listener (shared with the hooks) and the accumulators it hooks
  // (held, so autograd keeps using the hooked nodes).
  std::shared_ptr<std::function<void(int)>> listener;
  // (shared_ptr in LibTorch 1.13, intrusive_ptr in 2.x)
  std::vector<decltype(torch::autograd::impl::grad_accumulator(std::declval<const at::Tensor&>()))> accumulators;

  std::string where(const char* op, int microbatch) const {
    return std::string(op) + " of microbatch " + std::to_string(microbatch) + " on virtual stage " +
           std::to_string(spec.virtual_stage);
  }

  at::Tensor run_layers(const at::Tensor& x) {
    at::Tensor h = x;
    for (auto& p : positions) {
      try {
        h = p.spec->forward ? p.spec->forward(*p.module, h) : p.module->forward(h);
      } catch (const std::exception& e) {
        throw_as(e, "layer '" + p.spec->name + "' (layer " + std::to_string(p.index) + "): " + error_text(e));
      }
      if (!h.defined())
        throw std::runtime_error("layer '" + p.spec->name + "' (layer " + std::to_string(p.index) +
                                 "): its forward returned an undefined tensor");
    }
    return h;
  }
  // A copy's forward used a parameter its tie leaves out: its gradient reached it here, where
  // no optimizer holds it (in one piece the module is one, and it trains).
  void check_untied_in_copies() const {
    for (const auto& u : untied_in_copies)
      if (u.tensor.grad().defined())
        throw std::invalid_argument("layer '" + u.layer + "' holds a copy of tie key '" + u.key + "' (its owner, layer '" +
                                    u.owner + "', is on an earlier stage) and its forward uses '" + u.name +
                                    "', which the owner's tied_parameters leave out: the copy would not train it with "
                                    "the owner's; add '" + u.name + "' to tied_parameters");
  }
  at::Tensor run(const at::Tensor& x, const at::Tensor& targets) {
    at::Tensor h = run_layers(x);
    return spec.last ? checked_loss(*model, h, targets) : h;
  }
};

layer_chunk::layer_chunk(std::shared_ptr<const model_definition> model, const chunk_spec& spec)
    : impl_(std::make_unique<impl>()) {
  if (!model) throw std::invalid_argument("layer_chunk: no model");
  const int L = static_cast<int>(model->layers.size());
  if (spec.layer_begin < 0 || spec.layer_end > L || spec.layer_begin >= spec.layer_end) {
    throw std::invalid_argument("layer_chunk: layer range [" + std::to_string(spec.layer_begin) + ", " +
                                std::to_string(spec.layer_end) + ") is empty or outside the model's " + std::to_string(L) +
                                " layers");
  }
  auto& m = *impl_;
  m.model = std::move(model);
  m.spec = spec;
  const auto& layers = m.model->layers;
  std::map<std::string, int> first_of_key;  // over the whole model
  for (int i = 0; i < L; ++i)
    if (!layers[i].tie_key.empty()) first_of_key.emplace(layers[i].tie_key, i);

  std::map<std::string, int> built_for_key;  // key -> index of the module in this slice
  std::set<std::string> names;
  std::lock_guard<std::mutex> lock(build_mutex);
  for (int i = spec.layer_begin; i < spec.layer_end; ++i) {
    const layer_spec& l = layers[i];
    if (l.split != backward_split::module_defers) m.module_defers = false;
    if (!l.tie_key.empty()) {
      auto b = built_for_key.find(l.tie_key);
      if (b != built_for_key.end()) {  // the key's module is already here: share it
        check_tie_shapes(*m.model, first_of_key.at(l.tie_key), m.modules.at(b->second), i);
        m.positions.push_back({&l, i, &m.modules.at(b->second)});
        continue;
      }
    }
    const int owner = l.tie_key.empty() ? i : first_of_key.at(l.tie_key);
    const bool copy = owner < spec.layer_begin;  // the key's owner is on an earlier stage
    const layer_spec& o = layers[owner];
    auto& slot = m.modules[i] = build_layer(*m.model, o);
    for (const auto& [j, other] : m.modules)  // one module under two layers is a tie, and must say so
      if (j != i && other.ptr() == slot.ptr())
        throw std::invalid_argument("layers '" + layers[j].name + "' and '" + l.name +
                                    "' build the same module object: to share it, give both the same tie_key");
    if (!l.tie_key.empty()) built_for_key[l.tie_key] = i;
    if (owner != i) check_tie_shapes(*m.model, owner, slot, i);
    m.positions.push_back({&l, i, &slot});
    for (auto& p : slot.ptr()->named_parameters(true)) {
      const bool is_tied = !l.tie_key.empty() && (o.tied_parameters.empty() ||
                                                  std::find(o.tied_parameters.begin(), o.tied_parameters.end(), p.key()) !=
                                                      o.tied_parameters.end());
      if (copy && !is_tied) {
        // Not part of the tie: the owner trains it, and this copy's forward must not use it
        // (one module in the whole model, its gradient would be lost here): checked after
        // each backward, once a gradient shows it was used.
        if (p.value().requires_grad())
          m.untied_in_copies.push_back({l.name, layers[owner].name, l.tie_key, p.key(), p.value()});
        continue;
      }
      const std::string name = o.prefix() + p.key();
      if (!names.insert(name).second)
        throw std::invalid_argument("layer '" + l.name + "': parameter name '" + name +
                                    "' is already used by an earlier layer of this stage (give the layers distinct param prefixes)");
      m.params.emplace_back(name, p.value());
      if (copy) m.copies.push_back(name);
      if (is_tied) m.tied[l.tie_key].push_back(p.value());
    }
    if (copy) {  // a tied copy's buffers are its owner's
      // Batch statistics a copy gathers would stay here: in one piece the module is one, and
      // both uses update its running statistics.
      for (const auto& sub : slot.ptr()->modules(true)) {
        std::string type = sub->name();
        if (type.size() > 4 && type.compare(type.size() - 4, 4, "Impl") == 0) type.resize(type.size() - 4);
        if (type.find("BatchNorm") != std::string::npos || type.find("InstanceNorm") != std::string::npos)
          throw std::invalid_argument("layer '" + l.name + "' holds a copy of tie key '" + l.tie_key + "' (its owner, layer '" +
                                      o.name + "', is on an earlier stage) with a " + type +
                                      ": the running statistics it updates cannot reach the owner's; put the tied layers "
                                      "on one stage (--partition) or tie a module without them");
      }
      continue;
    }
    for (auto& b : slot.ptr()->named_buffers(true)) {
      const std::string name = o.prefix() + b.key();
      if (!names.insert(name).second)
        throw std::invalid_argument("layer '" + l.name + "': buffer name '" + name +
                                    "' is already used by an earlier layer of this stage (give the layers distinct param prefixes)");
      m.buffers.emplace_back(name, b.value());
    }
  }
  // Activation checkpointing runs each forward twice: a dropout mask drawn again would not be
  // the one the loss saw (wrong gradients), and batch norm would count its batch twice.
  if (spec.activation_checkpointing)
    for (const auto& p : m.positions)
      for (const auto& sub : p.module->ptr()->modules(true)) {
        const std::string type = sub->name();
        if (type.find("Dropout") != std::string::npos || type.find("BatchNorm") != std::string::npos)
          throw std::invalid_argument("layer '" + p.spec->name + "' holds a " + type +
                                      ", which --activation-checkpointing would run twice per microbatch (a new dropout "
                                      "mask, or batch statistics counted twice): train this model without it");
      }
}

layer_chunk::~layer_chunk() {
  if (impl_->listener)
    for (auto& p : impl_->params) set_accumulate_listener(p.second, {});
}

namespace {
// After a parameter's AccumulateGrad ran: tell the listener which parameter it was.
struct accumulated_hook : torch::autograd::FunctionPostHook {
  accumulated_hook(std::shared_ptr<std::function<void(int)>> f, int index) : listener(std::move(f)), parameter(index) {}
  torch::autograd::variable_list operator()(const torch::autograd::variable_list& outputs,
                                            const torch::autograd::variable_list&) override {
    if (*listener) (*listener)(parameter);
    return outputs;
  }
  std::shared_ptr<std::function<void(int)>> listener;
  int parameter;
};
}  // namespace

bool layer_chunk::set_gradient_listener(std::function<void(int parameter)> listener) {
  auto& m = *impl_;
  if (m.listener) {  // hooked already: swap the function the hooks call
    *m.listener = std::move(listener);
    return true;
  }
  m.listener = std::make_shared<std::function<void(int)>>(std::move(listener));
  for (int i = 0; i < static_cast<int>(m.params.size()); ++i) {
    const at::Tensor& p = m.params[i].second;
    if (!p.requires_grad()) continue;
    auto acc = torch::autograd::impl::grad_accumulator(p);
    acc->add_post_hook(std::make_unique<accumulated_hook>(m.listener, i));
    m.accumulators.push_back(std::move(acc));
    auto f = m.listener;
    set_accumulate_listener(p, [f, i] {
      if (*f) (*f)(i);
    });
  }
  return true;
}

const chunk_spec& layer_chunk::spec() const { return impl_->spec; }

tensor_box layer_chunk::evaluate(int microbatch, const tensor_box& input) {
  torch::NoGradGuard no_grad;  // grad mode is thread-local: off here whatever the caller's
  auto& m = *impl_;
  const at::Tensor& in = unbox(input);
  if (!in.defined()) throw std::invalid_argument(m.where("evaluate", microbatch) + ": the input is undefined");
  if (!m.spec.first && !in.is_floating_point())
    throw std::invalid_argument(m.where("evaluate", microbatch) +
                                ": the input of a stage after the first must be a floating-point activation, got " +
                                describe_tensor(in));
  // Evaluation mode while it runs (dropout off, batch norm on its running statistics), as
  // PyTorch's model.eval(); each module's own mode again after, whatever happens.
  struct eval_mode {
    std::vector<std::pair<std::shared_ptr<torch::nn::Module>, bool>> was;
    explicit eval_mode(const std::map<int, layer_module>& modules) {
      for (const auto& [i, module] : modules)
        for (const auto& sub : module.ptr()->modules(true)) was.emplace_back(sub, sub->is_training());
      for (auto& [sub, training] : was) sub->train(false);
    }
    ~eval_mode() {
      for (auto& [sub, training] : was) sub->train(training);
    }
  } mode(m.modules);
  try {
    return box(m.run_layers(in));
  } catch (const std::exception& e) {
    throw_as(e, m.where("evaluate", microbatch) + ": " + e.what());
  }
}

forward_result layer_chunk::forward(int microbatch, const tensor_box& input, const tensor_box& targets, double loss_scale) {
  torch::AutoGradMode enable_grad(true);  // grad mode is thread-local; the caller's is unknown
  auto& m = *impl_;
  if (m.stashes.count(microbatch)) {
    throw std::invalid_argument(m.where("forward", microbatch) + ": microbatch " + std::to_string(microbatch) +
                                " is already stashed (run its backward first)");
  }
  const at::Tensor& in = unbox(input);
  if (!in.defined()) throw std::invalid_argument(m.where("forward", microbatch) + ": the input is undefined");
  at::Tensor x = in;
  if (!m.spec.first) {
    if (!in.is_floating_point()) {
      throw std::invalid_argument(m.where("forward", microbatch) +
                                  ": the input of a stage after the first must be a floating-point activation, got " +
                                  describe_tensor(in));
    }
    // Our own leaf: the caller's tensor is never touched, and backward's d/dinput lands here.
    x = in.detach().requires_grad_(true);
  }
  stash s;
  s.input = x;
  if (m.spec.last) {
    s.targets = unbox(targets);
    if (!s.targets.defined()) throw std::invalid_argument(m.where("forward", microbatch) + ": the targets are undefined");
    if (!std::isfinite(loss_scale)) {
      throw std::invalid_argument(m.where("forward", microbatch) + ": loss_scale must be finite, got " +
                                  std::to_string(loss_scale));
    }
    s.loss_scale = loss_scale;
  }
  forward_result result;
  at::Tensor out;
  try {
    if (m.spec.activation_checkpointing) {
      // A forward that updates a buffer (a running average, a counter of your own) would update
      // it again in the recompute, as batch norm would count its batch twice: found by the
      // buffers' versions, at the forward that first does it, before its backward counts it
      // twice. An update through .data(), set_data or an accessor leaves the version alone: the
      // buffers' bytes are compared too, around every forward where a stage's buffers hold
      // at most 4 MiB (running statistics, counters), around its first where they hold more.
      constexpr std::size_t compared_always = std::size_t{4} << 20;
      std::size_t buffer_bytes = 0;
      for (const auto& [name, b] : m.buffers) buffer_bytes += b.nbytes();
      const bool compare_bytes = !m.buffers_compared || buffer_bytes <= compared_always;
      std::vector<std::int64_t> versions;
      std::vector<at::Tensor> before;
      for (const auto& [name, b] : m.buffers) {
        versions.push_back(b._version());
        if (compare_bytes) before.push_back(b.detach().clone().contiguous());
      }
      torch::NoGradGuard no_grad;  // nothing saved; backward recomputes the same ops
      // On a copy: a layer working in place would change the input the recompute starts from.
      out = m.run(past_leaf(x, m.spec.first), s.targets);
      for (std::size_t i = 0; i < m.buffers.size(); ++i) {
        const at::Tensor& b = m.buffers[i].second;
        bool changed = b._version() != versions[i];
        if (!changed && !before.empty()) {
          const at::Tensor now = b.detach().contiguous();
          changed = now.sizes() != before[i].sizes() || now.scalar_type() != before[i].scalar_type() ||
                    (now.nbytes() > 0 && std::memcmp(now.data_ptr(), before[i].data_ptr(), now.nbytes()) != 0);
        }
        if (changed)
          throw certain_failure("buffer '" + m.buffers[i].first + "' changed in the forward, " +
                                      refused_recompute_words +
                                      " (the update would count twice, as a batch norm's would): train this model "
                                      "without it");
      }
      m.buffers_compared = true;
    } else {
      out = m.run(past_leaf(x, m.spec.first), s.targets);
    }
  } catch (const std::exception& e) {
    throw_as(e, m.where("forward", microbatch) + ": " + e.what());
  }
  s.output_shape = out.sizes().vec();
  if (m.spec.last && !m.spec.activation_checkpointing && !out.requires_grad())
    throw std::invalid_argument(m.where("forward", microbatch) + detached_loss);
  if (m.spec.last) {
    result.loss = out.item<double>();
    if (!m.spec.activation_checkpointing) s.output = out * loss_scale;
  } else {
    result.output = box(out.detach());
    if (!m.spec.activation_checkpointing) s.output = out;
  }
  m.stashes.emplace(microbatch, std::move(s));
  return result;
}

tensor_box layer_chunk::backward(int microbatch, const tensor_box& grad_output, bool split) {
  torch::AutoGradMode enable_grad(true);
  auto& m = *impl_;
  auto it = m.stashes.find(microbatch);
  if (it == m.stashes.end()) {
    throw std::invalid_argument(m.where("backward", microbatch) + ": nothing stashed (run its forward first)");
  }
  at::Tensor g;
  if (!m.spec.last) {
    g = unbox(grad_output);
    if (g.defined() && g.sizes() != at::IntArrayRef(it->second.output_shape)) {
      std::ostringstream expected;
      expected << at::IntArrayRef(it->second.output_shape);
      throw std::invalid_argument(m.where("backward", microbatch) + ": grad_output must be " + expected.str() +
                                  " like the forward output, got " + describe_tensor(g));
    }
  }
  stash s = std::move(it->second);
  m.stashes.erase(it);
  if (!m.spec.last && !g.defined()) {
    // No gradient reached this stage's output (the next stage's input was not on its loss's
    // path): autograd in one piece would not run this part's backward, and its parameters'
    // gradients stay as they are (undefined if nothing else reached them).
    if (split) m.kept_graphs[microbatch];
    return tensor_box();
  }

  at::Tensor out = s.output;
  if (m.spec.activation_checkpointing) {  // the forward again, with the graph its first run did not keep
    out = m.run(past_leaf(s.input, m.spec.first), s.targets);
    if (m.spec.last && !out.requires_grad()) throw std::invalid_argument(m.where("backward", microbatch) + detached_loss);
    if (m.spec.last) out = out * s.loss_scale;
  }
  if (!out.requires_grad()) {
    // Nothing before the output needs a gradient (no parameters, no input path).
    if (split) m.kept_graphs[microbatch];
    return tensor_box();
  }
  const at::Tensor input_leaf = m.spec.first ? at::Tensor() : s.input;
  if (split && !m.module_defers) {
    deferred_weight_pass weights;
    at::Tensor gi = input_grad_pass(out, g, input_leaf, weights);
    m.kept_graphs[microbatch] = std::move(weights);  // W(microbatch) is valid even if nothing was kept
    return m.spec.first || !gi.defined() ? tensor_box() : box(gi);
  }
  {
    // B whole adds its split_linear products into .grad in place, as the deferred W does.
    weight_grad_accumulation in_place;
    std::optional<weight_grad_deferral> defer;
    if (split) defer.emplace(m.stores[microbatch]);  // W(microbatch) is valid even if nothing was deferred
    if (m.spec.last) {
      torch::autograd::backward({out});
    } else {
      torch::autograd::backward({out}, {g});
    }
  }
  m.check_untied_in_copies();
  if (m.spec.first || !s.input.grad().defined()) return tensor_box();  // undefined: no gradient reached the input
  return box(s.input.grad());
}

void layer_chunk::weight_grad(int microbatch) { weight_grad_until(microbatch, {}); }

bool layer_chunk::weight_grad_until(int microbatch, const std::function<bool()>& pause) {
  auto& m = *impl_;
  torch::AutoGradMode enable_grad(true);
  if (auto it = m.stores.find(microbatch); it != m.stores.end()) {
    bool done = false;
    try {
      done = it->second.run_until(pause);
    } catch (...) {
      m.stores.erase(it);  // spent: a retry finds nothing deferred
      throw;
    }
    if (done) m.stores.erase(it);
    m.check_untied_in_copies();
    return done;
  }
  if (auto it = m.kept_graphs.find(microbatch); it != m.kept_graphs.end()) {
    deferred_weight_pass pass = std::move(it->second);
    m.kept_graphs.erase(it);
    pass.run();
    m.check_untied_in_copies();
    return true;
  }
  throw std::invalid_argument(m.where("weight_grad", microbatch) +
                              ": nothing deferred (run backward with split=true first)");
}

int layer_chunk::live_stashes() const { return static_cast<int>(impl_->stashes.size()); }

int layer_chunk::pending_weight_grads() const {
  return static_cast<int>(impl_->stores.size() + impl_->kept_graphs.size());
}

std::vector<std::pair<std::string, tensor_box>> layer_chunk::named_parameters() const {
  std::vector<std::pair<std::string, tensor_box>> out;
  out.reserve(impl_->params.size());
  for (auto& p : impl_->params) out.emplace_back(p.first, box(p.second));
  return out;
}

std::vector<std::pair<std::string, tensor_box>> layer_chunk::named_buffers() const {
  std::vector<std::pair<std::string, tensor_box>> out;
  out.reserve(impl_->buffers.size());
  for (auto& b : impl_->buffers) out.emplace_back(b.first, box(b.second));
  return out;
}

void layer_chunk::zero_grad() {
  // Drop the gradients (PyTorch's set_to_none): the next accumulation starts from the first
  // product itself, and an undefined grad reads as zero everywhere in actorpipe.
  for (auto& p : impl_->params)
    if (p.second.grad().defined()) p.second.mutable_grad() = at::Tensor();
}

std::vector<std::string> layer_chunk::tied_copies() const { return impl_->copies; }

std::vector<tensor_box> layer_chunk::tied_parameters(const std::string& key) const {
  std::vector<tensor_box> out;
  auto it = impl_->tied.find(key);
  if (it != impl_->tied.end())
    for (auto& t : it->second) out.push_back(box(t));
  return out;
}

std::vector<tensor_box> tied_gradient_copies(const chunk_compute& chunk, const std::string& key) {
  torch::NoGradGuard no_grad;
  std::vector<tensor_box> out;
  for (auto& b : chunk.tied_parameters(key)) {
    const at::Tensor& p = unbox(b);
    out.push_back(p.grad().defined() ? box(p.grad().clone()) : tensor_box());
  }
  if (out.empty()) throw std::invalid_argument("tied gradient sync: this virtual stage holds nothing tied under '" + key + "'");
  return out;
}

void set_tied_gradient_sums(const chunk_compute& chunk, const std::string& key,
                            const std::vector<std::vector<tensor_box>>& per_holder) {
  torch::NoGradGuard no_grad;
  const auto params = chunk.tied_parameters(key);
  for (std::size_t j = 0; j < params.size(); ++j) {
    const at::Tensor& p = unbox(params[j]);
    at::Tensor sum;
    for (const auto& holder : per_holder) {
      if (holder.size() != params.size())
        throw std::invalid_argument("tied gradient sync of '" + key + "': a holder sent " + std::to_string(holder.size()) +
                                    " tensors, this one holds " + std::to_string(params.size()));
      const at::Tensor& g = unbox(holder[j]);
      if (!g.defined()) continue;  // no gradient reached that copy
      if (g.sizes() != p.sizes() || g.scalar_type() != p.scalar_type())
        throw std::invalid_argument("tied gradient sync of '" + key + "': a copy's gradient is " + describe_tensor(g) +
                                    ", the parameter is " + describe_tensor(p));
      sum = sum.defined() ? sum + g : g.clone();
    }
    // None reached any copy: the gradient stays undefined (AdamW leaves the parameter alone).
    // The parameter's grad is replaced, never accumulated into in place: each holder owns its own.
    p.mutable_grad() = sum;
  }
}

}  // namespace actorpipe
