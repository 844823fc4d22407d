// The training state a process holds, as named tensors for a checkpoint, and loading it into
// any layout. Parameters go by their global names (replica 0's stages only: every replica
// holds the same values; tied copies left to their owner), so a checkpoint's parameter file
// is also a plain weights file. AdamW moments go as runs of each parameter's flattened
// moments: "<name>.exp_avg@<offset>", "<name>.exp_avg_sq@<offset>" and "<name>.steps@<offset>"
// (int64 [1]), written by every shard that holds them. Loading stitches what each of the new
// layout's optimizers needs (core/optim/moment_segments.hpp).
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/model/chunk_compute.hpp"
#include "core/optim/data_parallel_optimizer.hpp"
#include "core/optim/optimizer.hpp"

namespace actorpipe {

// What a process's state is made of: by virtual stage id (replica * S + v), null where another
// process holds the stage. `virtual_stages` is S.
struct run_state_view {
  std::vector<std::shared_ptr<chunk_compute>> runners;
  std::vector<std::shared_ptr<shard_optimizer>> optimizers;             // D = 1
  std::vector<std::shared_ptr<data_parallel_optimizer>> dp_optimizers;  // D > 1
  int virtual_stages = 1;
};

struct run_setup;
struct train_options;
struct model_definition;
struct resume_choice;
// The whole of a prepared run (core/train/run_setup.hpp).
run_state_view state_view(const run_setup& setup);

using named_tensors = std::vector<std::pair<std::string, tensor_box>>;

// Copies, so training may go on while they are written.
named_tensors parameter_tensors(const run_state_view& state);
// Data-parallel replica r > 0's copies of a stage's buffers, named "replica<r>/<name>": each
// replica keeps its own running statistics (it sees its own microbatches), and its share of
// an evaluation reads them, so a checkpoint holds every replica's (--save-final replica 0's).
named_tensors replica_buffer_tensors(const chunk_compute& runner, int replica);
// "replica3/bn.running_mean" -> "bn.running_mean" (a replica's copy, as checkpoints name it);
// other names as they are.
std::string without_replica(const std::string& name);
named_tensors optimizer_tensors(const run_state_view& state);

// Loads parameters (every holder of a name, tied copies included, takes its value) and the
// moments; a replica's buffers from its own "replica<r>/" copies where there are (else
// replica 0's), state.virtual_stages telling a runner's replica. Throws
// std::invalid_argument listing the parameters the tensors lack and those whose shapes
// differ (at most 10 of each, then a count); buffers missing are a warning.
// Parameters whose names start with one of `fresh_prefixes` may be missing: they keep their
// values, with a warning (--init-from's task heads).
// "'NAME' holds N of its M values that are not finite (NaN or infinite)" for the first floating
// tensor holding one, "" when all are finite.
std::string nonfinite_tensor_text(const named_tensors& tensors);

void load_parameter_tensors(const run_state_view& state, const named_tensors& parameters,
                            const std::vector<std::string>& fresh_prefixes = {});
// `steps`: the checkpoint's step, where known: no parameter had more updates than it (a count
// past it, up to 2^63 - 1, was taken, and changed the bias correction).
void load_optimizer_tensors(const run_state_view& state, const named_tensors& optimizer, long long steps = -1);

// The parameters in `files` (safetensors: weights files, or a checkpoint's parts, whose AdamW
// moments are left) that `wanted` accepts, in file order.
named_tensors load_parameters(const std::vector<std::string>& files, const std::function<bool(const std::string&)>& wanted);

// --init-from: the parameters of a weights file (safetensors, global names), of a checkpoint
// directory (its parts; the moments are left), or of the newest valid checkpoint of a
// directory of them, into this process's runners. Throws std::invalid_argument as
// load_parameter_tensors does, and for tensors the model has no parameter of ("2 not in the
// model: blocks.2.attn.qkv.weight, ..."; a file of a deeper model is not a fit): those that
// are no parameter of this process's runners and that `elsewhere` (a name the layers of
// other processes may hold; none when empty) does not claim. A LayerNorm's weight and bias
// are also read under their TensorFlow names, gamma and beta (Hugging Face's older files).
// `model` (may be null) says what a file made for another head may hold or lack
// (model_definition::init_unused_prefixes, init_fresh_prefixes). Returns what it read from:
// the file, or the checkpoint.
// `on_checkpoint`, when given, sees the checkpoint chosen where `path` is a directory (before
// anything loads: it may check the run it came from, and throw).
std::string load_weights(const run_state_view& state, const std::string& path,
                         const std::function<bool(const std::string&)>& elsewhere = {},
                         const model_definition* model = nullptr,
                         const std::function<void(const resume_choice&)>& on_checkpoint = {});

// --init-from (`o.init_from`): load_weights into the runners of `setup` (this process's, in a
// pipeline; the whole model, for the reference), making --resume's checks of a checkpoint (a
// damaged newer one said, a model of another shape refused). The optimizer starts fresh. Throws
// std::invalid_argument naming --init-from.
void init_from_weights(const run_setup& setup, const train_options& o);

// For load_weights: whether a parameter name may belong to a layer of `setup` that another
// process holds (its global-name prefix; a layer whose names have no prefix of their own, the
// GPT's embedding, could hold any name). Always false where this process holds every layer.
std::function<bool(const std::string&)> held_elsewhere(const run_setup& setup);

// Whether a tensor of a checkpoint or weights file concerns this process: a parameter one of
// its runners holds (tied copies too), or a moment run of one. A process loads only those.
std::function<bool(const std::string&)> wanted_by(const run_state_view& state);

}  // namespace actorpipe
