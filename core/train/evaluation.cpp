// Evaluation summaries: concatenate the pieces, then the model's loss (over every row it does
// not ignore) and metrics.
#include "core/train/evaluation.hpp"

#include <cstring>
#include <stdexcept>

#include "core/model/layer_model.hpp"
#include "core/model/tensor_box_torch.hpp"

namespace actorpipe {

eval_piece make_eval_piece(const tensor_box& output, const tensor_box& targets) {
  at::Tensor o = unbox(output).detach();
  const at::Tensor t = unbox(targets).contiguous();
  // Any floating-point output is summarised as float32 (a double model's too): an integer one
  // is no score.
  if (!o.is_floating_point())
    throw std::invalid_argument(std::string("evaluation: the model's output must be floating-point, got ") +
                                c10::toString(o.scalar_type()));
  o = o.to(at::kFloat).contiguous();
  if (t.scalar_type() != at::kLong) throw std::invalid_argument("evaluation: the targets must be int64");
  eval_piece p;
  p.shape = o.sizes().vec();
  p.outputs.resize(static_cast<std::size_t>(o.numel()));
  if (o.numel() > 0) std::memcpy(p.outputs.data(), o.data_ptr<float>(), p.outputs.size() * sizeof(float));
  p.target_shape = t.sizes().vec();
  p.targets.assign(t.data_ptr<std::int64_t>(), t.data_ptr<std::int64_t>() + t.numel());
  return p;
}

eval_piece make_eval_piece(const model_definition& model, const tensor_box& output, const tensor_box& targets) {
  if (!model.eval_target_losses) return make_eval_piece(output, targets);
  const at::Tensor& t = unbox(targets);
  at::Tensor losses;
  {
    torch::NoGradGuard no_grad;
    losses = model.eval_target_losses(unbox(output), t);
  }
  if (!losses.defined() || losses.sizes() != t.sizes())
    throw std::invalid_argument("evaluation: the model's eval_target_losses must give a tensor of the targets' shape " +
                                c10::str(t.sizes()) + ", got " + (losses.defined() ? c10::str(losses.sizes()) : "none"));
  return make_eval_piece(box(losses), targets);
}

eval_record summarize_eval(const model_definition& model, int step, const std::vector<eval_piece>& pieces) {
  const std::size_t n = std::min(pieces.size(), static_cast<std::size_t>(model.eval_microbatches));
  if (n == 0) throw std::invalid_argument("evaluation: no outputs");
  std::vector<at::Tensor> outputs, targets;
  for (std::size_t i = 0; i < n; ++i) {
    const auto& p = pieces[i];
    outputs.push_back(torch::from_blob(const_cast<float*>(p.outputs.data()), p.shape, at::kFloat).clone());
    targets.push_back(torch::from_blob(const_cast<std::int64_t*>(p.targets.data()), p.target_shape, at::kLong).clone());
  }
  const at::Tensor all = torch::cat(outputs, 0), truth = torch::cat(targets, 0);
  eval_record r;
  r.step = step;
  if (model.eval_target_losses) {
    // The pieces are float32 losses of the targets' shape (make_eval_piece checked them; a
    // piece from another process is checked again here).
    if (all.numel() != truth.numel())
      throw std::invalid_argument("evaluation: " + std::to_string(all.numel()) + " target losses for " +
                                  std::to_string(truth.numel()) + " targets");
    const float* loss = all.data_ptr<float>();
    const std::int64_t* target = truth.data_ptr<std::int64_t>();
    double sum = 0;
    std::int64_t counted = 0;
    for (std::int64_t i = 0; i < truth.numel(); ++i)
      if (target[i] != -100) sum += loss[i], ++counted;
    if (counted == 0) throw std::invalid_argument("evaluation: every target is padding (-100)");
    r.loss = sum / static_cast<double>(counted);
  } else {
    torch::NoGradGuard no_grad;
    r.loss = model.loss(all, truth).item<double>();
  }
  if (model.eval_metrics) r.metrics = model.eval_metrics(all, truth);
  r.output_shape = all.sizes().vec();
  r.outputs.assign(all.data_ptr<float>(), all.data_ptr<float>() + all.numel());
  const at::Tensor flat_truth = truth.contiguous();
  r.targets.assign(flat_truth.data_ptr<std::int64_t>(), flat_truth.data_ptr<std::int64_t>() + flat_truth.numel());
  return r;
}

}  // namespace actorpipe
