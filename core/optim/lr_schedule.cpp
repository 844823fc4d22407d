// The learning-rate schedule (linear warm-up, then linear decay) and the gradient-clip
// coefficient: plain arithmetic, kept out of the torch library so core/ can use it.
#include <algorithm>
#include <cmath>
#include <limits>
#include <sstream>
#include <stdexcept>
#include <string>

#include "core/optim/optimizer.hpp"
#include "core/exact_number.hpp"
#include "core/number_text.hpp"
#include "core/text_file.hpp"

namespace actorpipe {

const char* lr_decay_name(lr_decay style) {
  switch (style) {
    case lr_decay::linear: return "linear";
    case lr_decay::cosine: return "cosine";
    case lr_decay::constant: return "constant";
  }
  return "?";
}

lr_decay parse_lr_decay(const std::string& text) {
  for (lr_decay style : {lr_decay::linear, lr_decay::cosine, lr_decay::constant})
    if (text == lr_decay_name(style)) return style;
  throw std::invalid_argument("--lr-decay-style must be linear, cosine or constant: got '" + shown_text(text, 60) + "'");
}

std::string optimizer_setting_error(const std::string& flag, double value) {
  if (flag == "--min-lr-ratio")
    return value >= 0 && value <= 1 ? "" : flag + " must be in [0, 1] (a fraction of --lr): got " + exact_number_text(value);
  if (flag == "--adam-beta1" || flag == "--adam-beta2")
    return value >= 0 && value < 1 ? "" : flag + " must be in [0, 1): got " + exact_number_text(value);
  if (flag == "--adam-eps")  // the update adds it in float: past a float's range it is inf or nothing
    return value >= std::numeric_limits<float>::min() && value <= std::numeric_limits<float>::max()
               ? ""
               : flag + " must be a number > 0 within a float's normal range, 1.18e-38 to 3.4e38: got " +
                     exact_number_text(value);
  throw std::invalid_argument("optimizer_setting_error: no rule for '" + flag + "'");
}

// Warm-up: lr = base_lr * (step + 1) / warmup_steps for step < warmup_steps, so step 0 already
// trains (at base_lr / warmup_steps) and step warmup_steps - 1 reaches base_lr.
// Decay: from base_lr at step warmup_steps down to base_lr * min_ratio at step end - 1 (end:
// decay_steps, else total_steps), then held there; linearly or along a half cosine (Megatron's
// and nanoGPT's: min + (1 - min) x (1 + cos(pi x progress)) / 2); constant stays at base_lr.
// When no decay step is left after the warm-up (total_steps == 1, or warmup_steps >=
// total_steps - 1, without decay_steps) the post-warm-up steps use base_lr.
std::string lr_decay_steps_error(int decay_steps, int warmup_steps) {
  if (decay_steps < 0)
    return "--lr-decay-steps must be >= 0 (0 = the decay ends at the last of --steps): got " + std::to_string(decay_steps);
  const long long first = static_cast<long long>(warmup_steps) + 1;  // the decay's first step, at the full lr
  if (decay_steps > 0 && decay_steps <= first)
    return "--lr-decay-steps " + std::to_string(decay_steps) + " leaves no step to decay over after --warmup-steps " +
           std::to_string(warmup_steps) + ": the decay starts at the full --lr at step " + std::to_string(first) +
           " and reaches the floor at the step it names, so " +
           (first + 1 <= std::numeric_limits<int>::max() ? "at least " + std::to_string(first + 1)
                                                          : std::string("no step count can (lower --warmup-steps)"));
  return "";
}

double lr_at(int step, double base_lr, int warmup_steps, int total_steps, double min_ratio, lr_decay style,
             int decay_steps) {
  if (step < 0) throw std::invalid_argument("lr_at: step=" + std::to_string(step) + " must be >= 0");
  if (!(base_lr >= 0) || !std::isfinite(base_lr))
    throw std::invalid_argument("lr_at: base_lr=" + number_text(base_lr) + " must be a finite number >= 0");
  if (warmup_steps < 0)
    throw std::invalid_argument("lr_at: warmup_steps=" + std::to_string(warmup_steps) + " must be >= 0");
  if (total_steps < 1)
    throw std::invalid_argument("lr_at: total_steps=" + std::to_string(total_steps) + " must be >= 1");
  if (!(min_ratio >= 0 && min_ratio <= 1))
    throw std::invalid_argument("lr_at: min_ratio=" + number_text(min_ratio) + " must be in [0, 1]");
  if (step >= total_steps)
    throw std::invalid_argument("lr_at: step=" + std::to_string(step) + " is past the schedule (total_steps=" +
                                std::to_string(total_steps) + ": steps 0.." + std::to_string(total_steps - 1) + ")");

  if (style != lr_decay::linear && style != lr_decay::cosine && style != lr_decay::constant)
    throw std::invalid_argument("lr_at: style=" + std::to_string(static_cast<int>(style)) + " is no lr_decay");

  if (const std::string why = lr_decay_steps_error(decay_steps, warmup_steps); !why.empty())
    throw std::invalid_argument("lr_at: " + why);

  if (step < warmup_steps) return base_lr * (static_cast<double>(step) + 1) / warmup_steps;
  const int end = lr_decay_end(decay_steps, total_steps);
  const int span = end - 1 - warmup_steps;  // steps after the first full-lr step, to the floor
  if (span <= 0 || style == lr_decay::constant) return base_lr;
  const double progress = std::min(1.0, static_cast<double>(step - warmup_steps) / span);  // 0 .. 1, then 1
  if (style == lr_decay::cosine) return base_lr * (min_ratio + (1.0 - min_ratio) * 0.5 * (1.0 + std::cos(M_PI * progress)));
  return base_lr * (1.0 - (1.0 - min_ratio) * progress);
}

double clip_coefficient(double global_norm, double max_norm) {
  // A NaN norm means the gradients are already broken; stepping with them would silently
  // poison the weights, so say so instead of returning a coefficient.
  if (!(global_norm >= 0))
    throw std::invalid_argument("clip_coefficient: global_norm=" + number_text(global_norm) + " must be a number >= 0");
  if (std::isnan(max_norm)) throw std::invalid_argument("clip_coefficient: max_norm=nan is not a number");
  if (max_norm <= 0) return 1.0;
  return std::min(1.0, max_norm / (global_norm + 1e-6));
}

std::string divergence_error(int step, const std::vector<double>& losses, double grad_norm) {
  const std::string at = "step " + std::to_string(step + 1) + ": ";
  const auto what = [](double x) { return std::isnan(x) ? std::string("not a number") : std::string("infinite"); };
  for (std::size_t m = 0; m < losses.size(); ++m)
    if (!std::isfinite(losses[m]))
      return at + "the loss of microbatch " + std::to_string(m) + " is " + what(losses[m]) +
             ": training diverged (try a lower --lr or --grad-clip), or the microbatch has no loss to give (is it "
             "empty?)";
  if (!std::isfinite(grad_norm))
    return at + "the gradient norm is " + what(grad_norm) + ": training diverged (try a lower --lr or --grad-clip)";
  return "";
}

std::string nonfinite_update_error(int step, const std::string& parameter) {
  return "step " + std::to_string(step + 1) + ": the optimizer's update left " + parameter +
         " with values that are not finite: training diverged (try a lower --lr or --grad-clip); these parameters "
         "are not kept";
}

}  // namespace actorpipe
