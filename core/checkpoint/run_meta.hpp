// What a checkpoint records of the run beside its tensors (manifest.json's "meta"), and what a
// resumed run changes of it.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/train/train_options.hpp"

namespace actorpipe {

// What a data file holds, as a checkpoint records it and a multi-process job compares it:
// content_digest, once per (path, size, modification time), and for a Megatron dataset's .bin
// its index's too ("...; its index ..."), which gives its tokens' type. "" for no path.
std::string data_file_digest(const std::string& path);
// The training data's as data_file_digest says it: --data-file's one file's, or a blend's files'
// with their weights ("a blend of 2 files, 0.3: ...; 0.7: ..."); "" for the synthetic corpus.
std::string data_content_digest(const train_options& options);

// The step (the learning rate's position and the data's, both functions of it), the job's
// shape, the optimizer's settings and the data's. Nothing random runs after initialisation, so
// there is no RNG state to keep. `eval_pending`: the evaluation pass due after `step` did not
// run (the run stopped there), so a run resumed from it makes that pass first.
nlohmann::json checkpoint_meta(const train_options& options, int step, bool eval_pending = false);

// The settings of `options` that make a run resumed from a checkpoint with `meta` train other
// steps than the uninterrupted run would have: the data (data, data_file, data_seed), the
// global batch (microbatches x microbatch_size x dp), the learning rate's schedule (lr,
// warmup_steps, min_lr_ratio, lr_decay_style, steps) and the update (grad_clip, weight_decay, adam_beta1,
// adam_beta2, adam_eps). One entry per change, "data_seed 1234 -> 5"; a key the checkpoint lacks
// is skipped, but for AdamW's betas and eps, which were 0.9, 0.95 and 1e-8 before they were saved,
// and the decay, which was linear. The layout (schedule,
// stages, chunks, the split of the batch into microbatches) trains the same numbers and is
// not listed; the model's shape is checked by the tensors themselves.
std::vector<std::string> resume_changes(const nlohmann::json& meta, const train_options& options);

// Where the checkpoint's run skipped an evaluation pass (it stopped there) and this run's
// evaluation data (--eval-file's contents, --eval-microbatches, --eval-split) differ from that
// run's: why the pass this run makes up for it has other numbers, for a warning; "" when the
// same or not recorded.
std::string pending_eval_change(const nlohmann::json& meta, const train_options& options);

// The built-in models' shape against the checkpoint's: --layers, --hidden and --heads (and the
// GPT's --vocab and --seq-len). The tensors cannot tell all of these: other heads split the
// same tensors otherwise, and fewer layers would leave the checkpoint's last ones unread. ""
// when they agree (or the checkpoint does not say), else why not: "the checkpoint's gpt has
// --layers 4, this run --layers 2: its tensors belong to another model (give --layers 4)".
std::string resume_model_mismatch(const nlohmann::json& meta, const train_options& options);

// BERT's vocabulary against the checkpoint's, for an error about tensors that do not fit:
// "" when the --vocab-file contents agree (or the checkpoint does not say), else a sentence
// naming what differs ("the checkpoint was trained with a --vocab-file, and this run builds
// its vocabulary from --data-file: give that --vocab-file"). Another vocabulary of the same
// size is allowed (resume_changes names it); one of another size cannot load.
std::string resume_vocabulary_hint(const nlohmann::json& meta, const train_options& options);

}  // namespace actorpipe
