// Test helpers for runs of the runtime: a small GPT job, and comparing the parameters two runs
// ended with (by global name).
#pragma once

#include <torch/torch.h>

#include <algorithm>
#include <map>
#include <string>

#include "core/model/tensor_box_torch.hpp"
#include "core/train/train_options.hpp"

namespace actorpipe::testing {

// A GPT small enough for a test: 4 blocks of width 32, 4 microbatches of 2 sequences of 16.
inline train_options tiny_gpt(const std::string& schedule, int stages, int chunks, int steps) {
  train_options o;
  o.model.vocab = 64;
  o.model.seq_len = 16;
  o.model.hidden = 32;
  o.model.heads = 2;
  o.model.layers = 4;
  o.model.seed = 7;
  o.data_seed = 7;
  o.schedule = schedule;
  o.stages = stages;
  o.chunks = chunks;
  o.microbatches = 4;
  o.microbatch_size = 2;
  o.steps = steps;
  o.lr = 3e-3;
  o.warmup_steps = 1;
  o.step_timeout_s = 120;
  return o;
}

inline std::map<std::string, at::Tensor> parameters_by_name(const train_result& r) {
  std::map<std::string, at::Tensor> out;
  for (auto& [name, t] : r.parameters) out[name] = unbox(t);
  return out;
}

// Same names, same bits (and at least one parameter).
inline bool bit_identical(const train_result& a, const train_result& b) {
  auto pa = parameters_by_name(a), pb = parameters_by_name(b);
  if (pa.size() != pb.size() || pa.empty()) return false;
  for (auto& [name, t] : pb)
    if (!pa.count(name) || !torch::equal(pa[name], t)) return false;
  return true;
}

// Every parameter within rtol / atol of the other run's (same names).
inline bool all_close(const train_result& a, const train_result& b, double rtol, double atol) {
  auto pa = parameters_by_name(a), pb = parameters_by_name(b);
  if (pa.size() != pb.size() || pa.empty()) return false;
  for (auto& [name, t] : pb)
    if (!pa.count(name) || !torch::allclose(pa[name], t, rtol, atol)) return false;
  return true;
}

}  // namespace actorpipe::testing
