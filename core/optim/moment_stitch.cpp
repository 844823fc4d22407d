// Stitching AdamW moment runs back into place by parameter name and offset.
#include "core/optim/moment_stitch.hpp"

#include <algorithm>
#include <stdexcept>

#include "core/model/tensor_box_torch.hpp"

namespace actorpipe {

long long stitch_moments(const std::vector<moment_segment>& segments, const std::string& parameter, long long offset,
                         at::Tensor exp_avg, at::Tensor exp_avg_sq) {
  torch::NoGradGuard no_grad;
  const long long length = exp_avg.numel(), end = offset + length;
  std::vector<std::pair<long long, long long>> covered;  // [lo, hi) filled
  long long steps = -1;
  for (const auto& s : segments) {
    if (s.parameter != parameter) continue;
    const at::Tensor& m = unbox(s.exp_avg);
    const at::Tensor& v = unbox(s.exp_avg_sq);
    if (!m.defined() || !v.defined() || m.numel() != v.numel())
      throw std::invalid_argument("optimizer state of '" + parameter + "': a run without both moments of one length");
    const long long lo = std::max(offset, s.offset), hi = std::min(end, s.offset + m.numel());
    // A parameter of no elements has runs of none: one at its offset holds its step count.
    const bool empty_here = length == 0 && s.offset <= offset && offset <= s.offset + m.numel();
    if (lo >= hi && !empty_here) continue;
    if (steps >= 0 && s.steps != steps)
      throw std::invalid_argument("optimizer state of '" + parameter + "': runs disagree on the step count (" +
                                  std::to_string(steps) + " and " + std::to_string(s.steps) + ")");
    steps = s.steps;
    if (lo >= hi) continue;
    exp_avg.narrow(0, lo - offset, hi - lo).copy_(m.reshape({-1}).narrow(0, lo - s.offset, hi - lo));
    exp_avg_sq.narrow(0, lo - offset, hi - lo).copy_(v.reshape({-1}).narrow(0, lo - s.offset, hi - lo));
    covered.emplace_back(lo, hi);
  }
  if (steps < 0) throw std::invalid_argument("optimizer state of '" + parameter + "': missing");
  std::sort(covered.begin(), covered.end());
  long long next = offset;
  for (auto& [lo, hi] : covered) {
    if (lo > next) break;
    next = std::max(next, hi);
  }
  if (next < end)
    throw std::invalid_argument("optimizer state of '" + parameter + "': elements " + std::to_string(next) + ".." +
                                std::to_string(end - 1) + " are missing");
  return steps;
}

}  // namespace actorpipe
