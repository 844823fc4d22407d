// The model API: a model is an ordered list of named layer specs (each a factory for a
// LibTorch module), optional tie keys (layers that share one module: one weight, gradients
// summed at flush), a loss, a default partition method and the data it trains on. The runtime
// cuts the list over P x V virtual stages and runs any slice of it, whatever the layers are;
// the built-in GPT is one such list (core/model/gpt_model.hpp).
//
//   actorpipe::register_model("mlp", [](const actorpipe::train_options& o) {
//     actorpipe::model_definition m;
//     for (int i = 0; i < 6; ++i)
//       m.layers.push_back(actorpipe::make_layer("fc" + std::to_string(i), [] {
//         return torch::nn::Sequential(torch::nn::Linear(32, 32), torch::nn::Tanh());
//       }));
//     m.loss = [](const at::Tensor& out, const at::Tensor& y) { return torch::mse_loss(out, y); };
//     m.data = ...;  // (step, microbatch) -> inputs and targets
//     return m;
//   });
//
// then `actorpipe train --model mlp` from a binary that registered it (see examples/byo_model).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include <torch/torch.h>

#include "core/data/microbatch.hpp"
#include "core/model/model_names.hpp"
#include "core/train/train_options.hpp"

namespace actorpipe {

// Whether Impl's forward(x) takes one tensor and gives one.
template <class Impl, class = void>
struct takes_one_tensor : std::false_type {};
template <class Impl>
struct takes_one_tensor<Impl, std::enable_if_t<std::is_convertible_v<
                                  decltype(std::declval<Impl&>().forward(std::declval<const at::Tensor&>())), at::Tensor>>>
    : std::true_type {};

// A layer's LibTorch module: any module holder (torch::nn::Linear, torch::nn::Sequential, a
// TORCH_MODULE of yours) or a std::shared_ptr to a module. One whose forward takes one tensor
// and returns one is called so; any other (an LSTM, which returns a tuple) needs the
// layer_spec's forward to say how to call it.
class layer_module {
 public:
  layer_module() = default;
  template <class Impl>
  layer_module(std::shared_ptr<Impl> impl)  // NOLINT: implicit, so factories return modules as they are
      : module_(impl), forward_(plain_forward(impl)) {}
  template <class Impl>
  layer_module(const torch::nn::ModuleHolder<Impl>& holder) : layer_module(holder.ptr()) {}  // NOLINT

  bool empty() const { return !module_; }
  at::Tensor forward(const at::Tensor& x) const {
    if (!forward_) throw std::logic_error("layer_module::forward: this layer_module is empty (default-constructed): it holds no module");
    return forward_(x);
  }
  const std::shared_ptr<torch::nn::Module>& ptr() const { return module_; }
  // The module as its own type (std::bad_cast if it is not one).
  template <class Impl>
  Impl& as() const { return dynamic_cast<Impl&>(*module_); }

 private:
  template <class Impl>
  static std::function<at::Tensor(const at::Tensor&)> plain_forward(const std::shared_ptr<Impl>& impl) {
    if constexpr (takes_one_tensor<Impl>::value) {
      return [impl](const at::Tensor& x) -> at::Tensor { return impl->forward(x); };
    } else {
      return [](const at::Tensor&) -> at::Tensor {
        throw std::invalid_argument(
            "this layer's module does not take one tensor to one tensor (an LSTM returns a tuple): give its "
            "layer_spec a forward that calls it, e.g. [](layer_module& m, const at::Tensor& x) { return "
            "std::get<0>(m.as<torch::nn::LSTMImpl>().forward(x)); }");
      };
    }
  }

  std::shared_ptr<torch::nn::Module> module_;
  std::function<at::Tensor(const at::Tensor&)> forward_;
};

// Builds a layer's module. Its parameters are initialised from the torch generator, which the
// runtime seeds from (model seed, layer name) right before the call: every layout of the model
// (any partition, any process) starts from the same numbers.
using module_factory = std::function<layer_module()>;
// How one position of the list calls its module (DeepSpeed's forward_fn); default: forward(x).
using layer_forward = std::function<at::Tensor(layer_module& module, const at::Tensor& x)>;
// The loss of one microbatch from the last layer's output and the targets: a scalar mean.
using loss_function = std::function<at::Tensor(const at::Tensor& output, const at::Tensor& targets)>;

// How a layer's backward splits into I (input gradient) and W (weight gradients), as
// zero-bubble schedules ask.
enum class backward_split {
  // The runtime does it for any module: I computes the input-gradient path of the autograd
  // graph only and keeps the graph; W later runs each weight branch from the gradients I saw
  // arrive at it (torch.distributed.pipelining's approach).
  generic,
  // The module defers its own weight products into the active weight_grad_deferral (it is
  // built from split_linear): one backward pass, W replays the products. Used for a chunk
  // whose layers all say so.
  module_defers,
};

struct layer_spec {
  std::string name;             // unique in the model; names the layer in splits and errors
  module_factory build;
  layer_forward forward;        // optional
  // Layers with the same non-empty key share one module: built once (by the first layer of
  // the key, under its name's seed) and, where the key spans virtual stages, held as a copy
  // by each, with the gradients of the tied parameters summed at flush. A later layer of the
  // key needs no build of its own; if it has one (as DeepSpeed's TiedLayerSpec does), it must
  // build the same tied parameters (names and shapes), and the first layer's module is used.
  std::string tie_key;
  // Of a tied module, which parameters (by their name inside the module) are the tie; empty:
  // all of them. Only these are held and trained by the copies. Set on the key's first layer
  // (the one that builds the module); a later layer of the key that sets it is refused.
  std::vector<std::string> tied_parameters;
  // Global parameter names are param_prefix + the module's own name ("fc" + "." + "weight").
  // Unset: name + ".". The GPT uses "" for its embedding and "blocks.3." for block 3.
  bool has_param_prefix = false;
  std::string param_prefix;
  backward_split split = backward_split::generic;

  std::string prefix() const { return has_param_prefix ? param_prefix : name + "."; }
};

// A layer spec with the defaults.
layer_spec make_layer(std::string name, module_factory build);

struct model_definition {
  std::string name;
  std::vector<layer_spec> layers;
  loss_function loss;
  batch_function data;
  std::string data_description;  // one line for the summary
  // uniform | parameters | type:REGEX | profile | counts:A,B,...  (core/model/partition_methods.hpp)
  std::string default_partition = "parameters";
  // What one sample counts as in throughput ("tokens/s"): the GPT's seq_len, else 1.
  double tokens_per_sample = 1;
  std::uint64_t seed = 1234;  // layer init: torch generator seeded from (seed, layer name)
  // Evaluation, optional: a forward-only pass over eval_data(0, m), m in [0, eval_microbatches),
  // with int64 targets (a classifier's class indices, a language model's next tokens; -100
  // marks a padding target, which counts in no loss or metric; checked before training),
  // floating-point outputs (summarised as float32), the pass's loss, and the named numbers
  // (accuracy, F1, ...) that eval_metrics makes of every output and target of the pass,
  // concatenated in order.
  batch_function eval_data;
  int eval_microbatches = 0;
  std::function<std::vector<std::pair<std::string, double>>(const at::Tensor& outputs, const at::Tensor& targets)>
      eval_metrics;
  // Optional, for a model whose output is large (a language model's logits: batch x tokens x
  // vocab): each target's loss, a tensor of the targets' shape, computed where the output is
  // (the last stage). The pass keeps and sends these instead of the output; its loss is their
  // mean over the targets that are not -100, and eval_metrics sees them as the outputs.
  // Unset: the pass keeps the outputs and its loss is loss(outputs, targets).
  std::function<at::Tensor(const at::Tensor& output, const at::Tensor& targets)> eval_target_losses;
  // --init-from a file made for another head, as Hugging Face's from_pretrained takes a
  // pretrained checkpoint: name prefixes the file may hold that this model has no use for (a
  // pretraining head: BERT's "cls."), skipped with a note; and those of parameters that start
  // as built where the file lacks them (a task head: BERT's "classifier."), with a warning.
  // Every other name must match either way; --resume takes a checkpoint strictly.
  std::vector<std::string> init_unused_prefixes;
  std::vector<std::string> init_fresh_prefixes;
  // And the base model's prefix (Hugging Face's base_model_prefix; BERT's "bert."): a file of
  // the bare base model (BertModel's names, "embeddings...") loads under it, as from_pretrained
  // loads it into a model with a head. "" for none.
  std::string init_base_prefix;
  // The command line's model flags this definition follows, of --layers, --hidden, --heads,
  // --seq-len, --vocab, --data-file, --eval-file and --eval-split (train_options.model,
  // data_file, text.eval_file, eval_split). A run given one it does not list is told the flag
  // may do nothing; the data flags are refused (the run would train or evaluate on other data
  // than they name).
  std::vector<std::string> flags_followed;
};

// The command line's model flags, as flags_followed spells them.
const std::vector<std::string>& model_flags();

// Checks a definition before anything is built: at least one layer, unique non-empty names,
// a build function per layer, a loss, data. Throws std::invalid_argument naming the layer.
void validate_model(const model_definition& model);

// Models by name, for `--model NAME`. "gpt" is built in (its options: train_options.model).
using model_factory = std::function<model_definition(const train_options& options)>;
// Adds (or replaces a user-registered) model. Throws std::invalid_argument for an empty or
// whitespace-containing name, "gpt", or an empty factory.
void register_model(const std::string& name, model_factory factory, std::string description = "");
// has_model, list_models: core/model/model_names.hpp
// Builds and validates options.model_name's definition (std::invalid_argument for an unknown
// name, listing the known ones).
model_definition make_model(const train_options& options);

// The modules of a whole model, built as the runtime builds them (one per layer, or per tie
// key), for the partition methods that look at them; and what they measure.
struct built_layers {
  std::vector<layer_module> modules;  // per layer (tied layers share one)
};
built_layers build_all_layers(const model_definition& model);
// Trainable elements per layer (a tied follower counts the tied parameters it uses).
std::vector<double> layer_parameter_counts(const model_definition& model, const built_layers& built);
// Forward + backward seconds per layer on microbatch 0 of step 0 (the loss counted with the
// last layer): the median of `repeats` passes after one warm-up pass.
std::vector<double> profile_layers(const model_definition& model, const built_layers& built, int repeats = 3);

// A later layer of a tie key with a build of its own: throws std::invalid_argument unless its
// module has the owner's tied parameters with the same shapes (naming both layers).
void check_tie_shapes(const model_definition& model, int owner, const layer_module& owner_module, int follower);

// Seeds torch's generator for building layer `name` (a pure function of seed and name).
void seed_layer_init(std::uint64_t seed, const std::string& name);

// Builds `layer`'s module as every part of the runtime does: its init seeded by name, and a
// build function that throws or returns no module one std::invalid_argument naming the layer.
layer_module build_layer(const model_definition& model, const layer_spec& layer);

// The model's loss on the last layer's output, as a stage and --partition profile take it:
// a floating-point scalar (reshaped to 0-d), or std::runtime_error "loss: ..." saying why not.
at::Tensor checked_loss(const model_definition& model, const at::Tensor& output, const at::Tensor& targets);

// A tensor for a message: "Float [4, 16]", or "an undefined tensor".
std::string describe_tensor(const at::Tensor& t);

}  // namespace actorpipe
