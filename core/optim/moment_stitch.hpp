// Torch side of moment_segment: copying the runs that cover part of one parameter into place.
#pragma once

#include <torch/torch.h>

#include <string>
#include <vector>

#include "core/optim/moment_segments.hpp"

namespace actorpipe {

// Fills exp_avg / exp_avg_sq (1-D, `length` elements: the parameter's elements from `offset`)
// from the segments of `parameter`, and returns their steps. Throws std::invalid_argument naming
// the parameter when the segments leave a gap, disagree on steps, or none exists.
long long stitch_moments(const std::vector<moment_segment>& segments, const std::string& parameter, long long offset,
                         at::Tensor exp_avg, at::Tensor exp_avg_sq);

}  // namespace actorpipe
