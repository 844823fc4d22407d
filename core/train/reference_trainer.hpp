// The reference: the same model trained unpartitioned on one thread (its own, which the
// caller waits for), with gradient accumulation over the same microbatches. Every schedule
// must match it.
#pragma once

#include <functional>

#include "core/train/train_options.hpp"

namespace actorpipe {

// With eval data in the model, a pass over it (the whole model per microbatch, no autograd)
// after the steps eval_due names, reported to on_eval and kept in train_result::evals. The
// callbacks run on the reference's thread. A step or an evaluation pass that outlasts
// step_timeout_s throws std::runtime_error naming it; the thread, stuck in the model's or the
// data's code, is left behind (it calls no callback after).
train_result run_reference(const train_options& options, const std::function<void(const step_metrics&)>& on_step = {},
                           const std::function<void(const eval_record&)>& on_eval = {});

}  // namespace actorpipe
