// Flat buckets out, reduced shards in, AdamW over the shards this replica holds state for.
#include "core/optim/data_parallel_optimizer.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "core/model/tensor_box_torch.hpp"
#include "core/optim/adamw_update.hpp"
#include "core/optim/moment_stitch.hpp"

namespace actorpipe {

struct data_parallel_optimizer::impl {
  std::vector<std::pair<std::string, tensor_box>> named;
  std::vector<at::Tensor> params;  // flattened views of the modules' parameters
  std::vector<bool> decay, in_norm;
  flat_layout layout;
  int replica = 0, zero_stage = 0;
  adamw_options options;
  long long shard_length = 0;
  std::vector<int> held;  // shards with state here
  // Reduced gradients and moments, shard after shard (only this replica's under ZeRO-1).
  at::Tensor reduced, exp_avg, exp_avg_sq;
  long long steps = 0;  // steps taken (the step index)
  // Per parameter: whether a replica had a gradient for it this step (from the flags the
  // reduced slices carry), and the AdamW updates it has had (bias correction is per
  // parameter, as in shard_optimizer: one no replica had a gradient for is not stepped).
  std::vector<bool> has_grad;
  std::vector<long long> param_steps;
  // Early buckets: contributions per parameter in this step's last pass, and in the first step's.
  std::vector<long long> counts, per_step;
  std::vector<bool> late, bucket_out;
  std::vector<std::vector<int>> params_of_bucket, buckets_of_param;
  bool learned = false;

  // Where shard j starts in the buffers above.
  long long base(int shard) const { return zero_stage == 0 ? shard * shard_length : 0; }
  // A slice as it travels: its n elements, then one flag per parameter of the bucket.
  long long travel_length(int b) const {
    return layout.slice_length(b) + static_cast<long long>(params_of_bucket[b].size());
  }
};

data_parallel_optimizer::data_parallel_optimizer(std::vector<std::pair<std::string, tensor_box>> params,
                                                 flat_layout layout, int replica, int zero_stage,
                                                 const adamw_options& options, std::vector<std::string> skip_in_norm)
    : impl_(std::make_unique<impl>()) {
  check_adamw_options(options);
  if (zero_stage != 0 && zero_stage != 1)
    throw std::invalid_argument("zero_stage=" + std::to_string(zero_stage) + ": the data-parallel optimizer shards 0 or 1");
  if (replica < 0 || replica >= layout.replicas)
    throw std::invalid_argument("replica=" + std::to_string(replica) + " outside [0, " + std::to_string(layout.replicas) + ")");
  if (params.size() != layout.parameter_sizes.size())
    throw std::invalid_argument("data-parallel optimizer: " + std::to_string(params.size()) + " parameters, layout has " +
                                std::to_string(layout.parameter_sizes.size()));
  auto& s = *impl_;
  for (size_t i = 0; i < params.size(); ++i) {
    const at::Tensor& p = unbox(params[i].second);
    // A user's model of other parameters (Double, BFloat16) trains with dp=1; the flat float32
    // buffers here (the gradients' all-reduce, ZeRO's shards) take float32 only: said as such.
    if (p.scalar_type() != at::kFloat)
      throw std::invalid_argument("data parallelism (dp > 1) needs float32 parameters: '" + params[i].first + "' is " +
                                  std::string(c10::toString(p.scalar_type())) +
                                  " (train this model with dp=1, or build its parameters in float32)");
    if (!p.is_contiguous() || p.numel() != layout.parameter_sizes[i])
      throw std::invalid_argument("data-parallel optimizer: parameter '" + params[i].first +
                                  "' must be a contiguous float32 tensor of the layout's size");
    s.params.push_back(p.view({-1}));
    s.decay.push_back(p.dim() >= 2);
    s.in_norm.push_back(std::find(skip_in_norm.begin(), skip_in_norm.end(), params[i].first) == skip_in_norm.end());
  }
  s.named = std::move(params);
  s.layout = std::move(layout);
  s.replica = replica;
  s.zero_stage = zero_stage;
  s.options = options;
  s.shard_length = s.layout.shard_length();
  if (zero_stage == 0)
    for (int j = 0; j < s.layout.replicas; ++j) s.held.push_back(j);
  else
    s.held.push_back(replica);
  s.counts.assign(s.params.size(), 0);
  s.has_grad.assign(s.params.size(), false);
  s.param_steps.assign(s.params.size(), 0);
  s.late.assign(s.params.size(), false);
  s.buckets_of_param.resize(s.params.size());
  for (int b = 0; b < static_cast<int>(s.layout.buckets.size()); ++b) {
    s.params_of_bucket.emplace_back();
    for (const auto& seg : s.layout.bucket_segments(b)) {
      s.params_of_bucket[b].push_back(seg.parameter);
      s.buckets_of_param[seg.parameter].push_back(b);
    }
  }
  s.bucket_out.assign(s.layout.buckets.size(), false);
  const long long n = s.shard_length * static_cast<long long>(s.held.size());
  s.reduced = torch::zeros({n});
  s.exp_avg = torch::zeros({n});
  s.exp_avg_sq = torch::zeros({n});
}

data_parallel_optimizer::~data_parallel_optimizer() = default;

const flat_layout& data_parallel_optimizer::layout() const { return impl_->layout; }
int data_parallel_optimizer::replica() const { return impl_->replica; }
int data_parallel_optimizer::zero_stage() const { return impl_->zero_stage; }

tensor_box data_parallel_optimizer::gradient_bucket(int b) const {
  torch::NoGradGuard no_grad;
  auto& s = *impl_;
  const long long n = s.layout.slice_length(b), width = s.travel_length(b);
  at::Tensor out = torch::zeros({width * s.layout.replicas});
  for (const auto& seg : s.layout.bucket_segments(b)) {
    const at::Tensor& g = unbox(s.named[seg.parameter].second).grad();
    if (!g.defined()) continue;
    const at::Tensor flat = g.reshape({-1});
    // The segment's elements, cut where slices end: slice j starts at j * width.
    for (long long at = seg.offset; at < seg.offset + seg.length;) {
      const long long j = at / n, end = std::min(seg.offset + seg.length, (j + 1) * n);
      out.narrow(0, j * width + (at - j * n), end - at).copy_(flat.narrow(0, seg.parameter_offset + (at - seg.offset), end - at));
      at = end;
    }
  }
  const auto& qs = s.params_of_bucket[b];
  float* flags = out.data_ptr<float>() + n;
  for (size_t i = 0; i < qs.size(); ++i)
    if (unbox(s.named[qs[i]].second).grad().defined())
      for (int j = 0; j < s.layout.replicas; ++j) flags[j * width + static_cast<long long>(i)] = 1.0f;
  return box(out);
}

std::vector<int> data_parallel_optimizer::gradient_accumulated(int p, bool last_pass) {
  auto& s = *impl_;
  std::vector<int> out;
  if (p < 0 || p >= static_cast<int>(s.counts.size())) return out;
  if (!last_pass) return out;
  ++s.counts[p];
  if (!s.learned) return out;
  auto complete = [&](int q) { return !s.late[q] && s.per_step[q] > 0 && s.counts[q] == s.per_step[q]; };
  if (!complete(p)) return out;
  for (int b : s.buckets_of_param[p]) {
    if (s.bucket_out[b]) continue;
    const auto& qs = s.params_of_bucket[b];
    if (std::all_of(qs.begin(), qs.end(), complete)) {
      s.bucket_out[b] = true;
      out.push_back(b);
    }
  }
  return out;
}

void data_parallel_optimizer::set_late_parameters(const std::vector<tensor_box>& late) {
  auto& s = *impl_;
  for (size_t i = 0; i < s.params.size(); ++i)
    for (const auto& t : late)
      if (unbox(t).unsafeGetTensorImpl() == unbox(s.named[i].second).unsafeGetTensorImpl()) s.late[i] = true;
}

std::vector<int> data_parallel_optimizer::take_remaining_buckets() {
  auto& s = *impl_;
  std::vector<int> out;
  for (int b = 0; b < static_cast<int>(s.bucket_out.size()); ++b)
    if (!s.bucket_out[b]) out.push_back(b);
  if (!s.learned) s.per_step = s.counts, s.learned = true;
  std::fill(s.counts.begin(), s.counts.end(), 0);
  std::fill(s.bucket_out.begin(), s.bucket_out.end(), false);
  return out;
}

int data_parallel_optimizer::step_index() const { return static_cast<int>(impl_->steps); }

tensor_box data_parallel_optimizer::slice(const tensor_box& bucket, int b, int shard) const {
  const long long width = impl_->travel_length(b);
  return box(unbox(bucket).narrow(0, shard * width, width));
}

void data_parallel_optimizer::reduce(int b, const std::vector<tensor_box>& by_replica) {
  torch::NoGradGuard no_grad;
  auto& s = *impl_;
  const long long n = s.layout.slice_length(b), width = s.travel_length(b);
  if (static_cast<int>(by_replica.size()) != s.layout.replicas)
    throw std::invalid_argument("reduce: " + std::to_string(by_replica.size()) + " slices for " +
                                std::to_string(s.layout.replicas) + " replicas");
  at::Tensor out = s.reduced.narrow(0, s.base(s.replica) + s.layout.shard_offset_of_bucket(b), n);
  const auto& qs = s.params_of_bucket[b];
  for (int d = 0; d < s.layout.replicas; ++d) {
    const at::Tensor& t = unbox(by_replica[d]);
    if (!t.defined() || t.numel() != width || t.scalar_type() != at::kFloat || !t.is_contiguous())
      throw std::invalid_argument("reduce: replica " + std::to_string(d) + "'s slice of bucket " + std::to_string(b) +
                                  " is not " + std::to_string(width) + " contiguous float32 elements");
    const at::Tensor flat = t.reshape({-1});
    if (d == 0)
      out.copy_(flat.narrow(0, 0, n));
    else
      out.add_(flat.narrow(0, 0, n));
    const float* flags = flat.data_ptr<float>() + n;
    for (size_t i = 0; i < qs.size(); ++i)
      if (flags[i] != 0) s.has_grad[qs[i]] = true;
  }
}

tensor_box data_parallel_optimizer::reduced_slice(int b) const {
  auto& s = *impl_;
  return box(s.reduced.narrow(0, s.base(s.replica) + s.layout.shard_offset_of_bucket(b), s.layout.slice_length(b)).clone());
}

void data_parallel_optimizer::set_reduced_slice(int shard, int b, const tensor_box& slice) {
  torch::NoGradGuard no_grad;
  auto& s = *impl_;
  if (s.zero_stage != 0) throw std::logic_error("set_reduced_slice: only ZeRO-0 holds every shard");
  const long long n = s.layout.slice_length(b);
  const at::Tensor& t = unbox(slice);
  if (!t.defined() || t.numel() != n) throw std::invalid_argument("reduced slice of bucket " + std::to_string(b) + ": wrong size");
  s.reduced.narrow(0, s.base(shard) + s.layout.shard_offset_of_bucket(b), n).copy_(t.reshape({-1}));
}

double data_parallel_optimizer::grad_sq_sum() const {
  torch::NoGradGuard no_grad;
  auto& s = *impl_;
  double total = 0;
  for (const auto& seg : s.layout.shard_segments(s.replica)) {
    if (!s.in_norm[seg.parameter]) continue;
    total += sq_sum(s.reduced.narrow(0, s.base(s.replica) + seg.offset, seg.length));
  }
  return total;
}

void data_parallel_optimizer::step(double clip, double lr) {
  check_learning_rate(lr);
  if (!std::isfinite(clip)) throw std::invalid_argument("step: clip coefficient must be finite");
  torch::NoGradGuard no_grad;
  auto& s = *impl_;
  ++s.steps;
  // A parameter no replica had a gradient for (frozen, or not reached by this step's data, as
  // a detached input leaves it) is left alone, as shard_optimizer leaves one without a
  // gradient: its reduced zeros would have been decayed by, and counted as an update.
  for (size_t p = 0; p < s.params.size(); ++p)
    if (s.has_grad[p]) ++s.param_steps[p];
  // Shard by shard, segment by segment: ZeRO-0 and ZeRO-1 update the same runs of elements.
  for (int j : s.held) {
    const long long base = s.base(j);
    for (const auto& seg : s.layout.shard_segments(j)) {
      if (!s.has_grad[seg.parameter]) continue;
      const at::Tensor g = s.reduced.narrow(0, base + seg.offset, seg.length);
      at::Tensor p = s.params[seg.parameter].narrow(0, seg.parameter_offset, seg.length);
      at::Tensor m = s.exp_avg.narrow(0, base + seg.offset, seg.length);
      at::Tensor v = s.exp_avg_sq.narrow(0, base + seg.offset, seg.length);
      adamw_update(p, g, m, v, s.param_steps[seg.parameter], s.decay[seg.parameter], lr, s.options,
                   clip < 1.0 ? clip : 1.0);
    }
  }
  std::fill(s.has_grad.begin(), s.has_grad.end(), false);
}

std::string data_parallel_optimizer::nonfinite_parameter() const {
  torch::NoGradGuard no_grad;
  const auto& s = *impl_;
  for (int j : s.held)
    for (const auto& seg : s.layout.shard_segments(j))
      if (!s.params[seg.parameter].narrow(0, seg.parameter_offset, seg.length).isfinite().all().item<bool>())
        return "'" + s.named[seg.parameter].first + "'";
  return "";
}

tensor_box data_parallel_optimizer::parameter_slice(int b) const {
  torch::NoGradGuard no_grad;
  auto& s = *impl_;
  const long long n = s.layout.slice_length(b);
  at::Tensor out = torch::zeros({n});
  for (const auto& seg : s.layout.bucket_segments(b)) {
    const long long lo = std::max(seg.offset, s.replica * n), hi = std::min(seg.offset + seg.length, (s.replica + 1) * n);
    if (lo >= hi) continue;
    out.narrow(0, lo - s.replica * n, hi - lo)
        .copy_(s.params[seg.parameter].narrow(0, seg.parameter_offset + (lo - seg.offset), hi - lo));
  }
  return box(out);
}

void data_parallel_optimizer::set_parameter_slice(int shard, int b, const tensor_box& slice) {
  torch::NoGradGuard no_grad;
  auto& s = *impl_;
  const long long n = s.layout.slice_length(b);
  const at::Tensor& t = unbox(slice);
  if (!t.defined() || t.numel() != n) throw std::invalid_argument("parameter slice of bucket " + std::to_string(b) + ": wrong size");
  const at::Tensor flat = t.reshape({-1});
  for (const auto& seg : s.layout.bucket_segments(b)) {
    const long long lo = std::max(seg.offset, shard * n), hi = std::min(seg.offset + seg.length, (shard + 1) * n);
    if (lo >= hi) continue;
    s.params[seg.parameter].narrow(0, seg.parameter_offset + (lo - seg.offset), hi - lo).copy_(flat.narrow(0, lo - shard * n, hi - lo));
  }
}

void data_parallel_optimizer::zero_grad() {
  torch::NoGradGuard no_grad;
  for (auto& [name, p] : impl_->named) {
    const at::Tensor& g = unbox(p).grad();
    if (g.defined()) g.zero_();
  }
}

std::vector<moment_segment> data_parallel_optimizer::export_moments() const {
  torch::NoGradGuard no_grad;
  auto& s = *impl_;
  std::vector<moment_segment> out;
  for (int j : {s.replica})
    for (const auto& seg : s.layout.shard_segments(j)) {
      const long long at = s.base(j) + seg.offset;
      out.push_back({s.named[seg.parameter].first, seg.parameter_offset, box(s.exp_avg.narrow(0, at, seg.length).clone()),
                     box(s.exp_avg_sq.narrow(0, at, seg.length).clone()), s.param_steps[seg.parameter]});
    }
  return out;
}

void data_parallel_optimizer::import_moments(const std::vector<moment_segment>& runs) {
  auto& s = *impl_;
  long long most = -1;
  std::vector<bool> seen(s.params.size(), false);
  for (int j : s.held)
    for (const auto& seg : s.layout.shard_segments(j)) {
      const long long at = s.base(j) + seg.offset;
      const std::string& name = s.named[seg.parameter].first;
      const long long t = stitch_moments(runs, name, seg.parameter_offset, s.exp_avg.narrow(0, at, seg.length),
                                         s.exp_avg_sq.narrow(0, at, seg.length));
      if (seen[seg.parameter] && s.param_steps[seg.parameter] != t)
        throw std::invalid_argument("optimizer state of '" + name + "': runs disagree on the step count (" +
                                    std::to_string(s.param_steps[seg.parameter]) + " and " + std::to_string(t) + ")");
      seen[seg.parameter] = true;
      s.param_steps[seg.parameter] = t;
      if (t > 0) {  // its zeroed gradient, as the run it continues had it
        at::Tensor param = unbox(s.named[seg.parameter].second);
        restore_gradient(param);
      }
      most = std::max(most, t);
    }
  if (most >= 0) s.steps = most;
}

void data_parallel_optimizer::set_step_index(long long steps) { impl_->steps = steps; }

long long data_parallel_optimizer::state_bytes() const {
  return (impl_->exp_avg.numel() + impl_->exp_avg_sq.numel()) * static_cast<long long>(sizeof(float));
}

}  // namespace actorpipe
