// The reference: the same model trained unpartitioned on the calling thread, with gradient
// accumulation over the same microbatches. Every schedule must match it.
#pragma once

#include <functional>

#include "core/train/train_options.hpp"

namespace actorpipe {

// With eval data in the model, a pass over it (the whole model per microbatch, no autograd)
// after the steps eval_due names, reported to on_eval and kept in train_result::evals.
train_result run_reference(const train_options& options, const std::function<void(const step_metrics&)>& on_step = {},
                           const std::function<void(const eval_record&)>& on_eval = {});

}  // namespace actorpipe
