// The reference: the same model trained unpartitioned on the calling thread, with gradient
// accumulation over the same microbatches. Every schedule must match it.
#pragma once

#include <functional>

#include "core/train/train_options.hpp"

namespace actorpipe {

train_result run_reference(const train_options& options, const std::function<void(const step_metrics&)>& on_step = {});

}  // namespace actorpipe
