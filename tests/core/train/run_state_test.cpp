// The training state by global name: saved from 4 stages, it loads into 2 stages x 2 chunks
// and into one stage (and into 2 data-parallel replicas with ZeRO-1) with the same parameters
// and AdamW moments, through safetensors files; a model that does not fit is one error listing
// the names.
#include <torch/torch.h>

#include <cstdio>
#include <filesystem>
#include <functional>
#include <limits>
#include <map>
#include <set>
#include <stdexcept>
#include <vector>

#include "core/model/safetensors.hpp"
#include "core/model/tensor_box_torch.hpp"
#include "core/train/run_setup.hpp"
#include "core/train/run_state.hpp"
#include "tests/support/train_results.hpp"

#include <catch2/catch.hpp>

using namespace actorpipe;
using Catch::Contains;

namespace {

train_options tiny(int stages, int chunks, int dp = 1, int zero = 0) {
  train_options o = testing::tiny_gpt(chunks == 1 ? "1f1b" : "interleaved", stages, chunks, 1);
  o.dp = dp;
  o.zero_stage = zero;
  o.bucket_mb = 0.002;
  return o;
}

// Two AdamW steps on gradients that depend only on the parameter's name and the step.
void train_a_little(const run_setup& s) {
  for (int k = 0; k < 2; ++k)
    for (size_t id = 0; id < s.runners.size(); ++id) {
      for (auto& [name, t] : s.runners[id]->named_parameters()) {
        torch::manual_seed(static_cast<std::uint64_t>(std::hash<std::string>{}(name) % 100000 + 7 * k));
        unbox(t).mutable_grad() = torch::randn(unbox(t).sizes());
      }
      s.optimizers[id]->step(1e-2);
    }
}

// parameter -> its whole exp_avg, stitched from "<name>.exp_avg@<offset>" runs.
std::map<std::string, at::Tensor> first_moments(const named_tensors& t, const named_tensors& params) {
  std::map<std::string, at::Tensor> out;
  for (auto& [name, p] : params) out[name] = torch::zeros({unbox(p).numel()});
  for (auto& [key, v] : t) {
    const auto at = key.rfind('@');
    const std::string head = key.substr(0, at);
    if (head.size() < 8 || head.compare(head.size() - 8, 8, ".exp_avg") != 0) continue;
    const std::string name = head.substr(0, head.size() - 8);
    out.at(name).narrow(0, std::stoll(key.substr(at + 1)), unbox(v).numel()).copy_(unbox(v));
  }
  return out;
}

std::map<std::string, at::Tensor> as_map(const named_tensors& t) {
  std::map<std::string, at::Tensor> m;
  for (auto& [n, v] : t) m[n] = unbox(v);
  return m;
}

}  // namespace

CATCH_TEST_CASE("the training state saved from 4 stages loads into other layouts by name", "[checkpoint][state]") {
  const run_setup from = prepare_run(tiny(4, 1));
  train_a_little(from);
  const named_tensors params = parameter_tensors(state_view(from)), moments = optimizer_tensors(state_view(from));
  CATCH_CHECK(params.size() == 2 + 4 * 12 + 2);  // the tied head's copy left to tok_emb
  // Through files, as a checkpoint holds them.
  const std::string p_file = std::filesystem::temp_directory_path().string() + "/actorpipe-state-p.safetensors";
  const std::string o_file = std::filesystem::temp_directory_path().string() + "/actorpipe-state-o.safetensors";
  save_safetensors(p_file, params);
  save_safetensors(o_file, moments);
  const named_tensors p_back = load_safetensors(p_file), o_back = load_safetensors(o_file);
  const auto want_params = as_map(params);
  const auto want_moments = first_moments(moments, params);
  for (auto [stages, chunks, dp, zero] : {std::tuple{2, 2, 1, 0}, std::tuple{1, 1, 1, 0}, std::tuple{2, 1, 2, 1}}) {
    CATCH_INFO(stages << " stages x " << chunks << " chunks, dp " << dp);
    const run_setup to = prepare_run(tiny(stages, chunks, dp, zero));
    load_parameter_tensors(state_view(to), p_back);
    load_optimizer_tensors(state_view(to), o_back);
    named_tensors got_params = parameter_tensors(state_view(to));
    CATCH_CHECK(got_params.size() == params.size());
    for (auto& [name, t] : got_params) CATCH_CHECK(torch::equal(unbox(t), want_params.at(name)));
    const auto got_moments = first_moments(optimizer_tensors(state_view(to)), params);
    for (auto& [name, m] : want_moments) CATCH_CHECK(torch::equal(got_moments.at(name), m));
    // Every holder of a tied name took its value, the copy on the last stage too.
    for (auto& r : to.runners)
      for (auto& [name, t] : r->named_parameters()) CATCH_CHECK(torch::equal(unbox(t), want_params.at(name)));
  }
  std::remove(p_file.c_str());
  std::remove(o_file.c_str());
}

CATCH_TEST_CASE("a process holding some stages reads only their parameters and moments from a file", "[checkpoint][state]") {
  const run_setup all = prepare_run(tiny(2, 1));
  train_a_little(all);
  named_tensors everything = parameter_tensors(state_view(all));
  const named_tensors moments = optimizer_tensors(state_view(all));
  everything.insert(everything.end(), moments.begin(), moments.end());
  const std::string file = std::filesystem::temp_directory_path().string() + "/actorpipe-state-wanted.safetensors";
  save_safetensors(file, everything);
  // The view of a process that holds stage 1 only (stage 0 on another process).
  run_state_view view = state_view(all);
  view.runners[0] = nullptr;
  view.optimizers[0] = nullptr;
  std::set<std::string> stage1;
  for (auto& [name, t] : all.runners[1]->named_parameters()) stage1.insert(name);
  CATCH_REQUIRE(stage1.count("tok_emb.weight") == 1);  // the tied head's copy
  const named_tensors got = load_safetensors(file, wanted_by(view));
  std::set<std::string> got_params;
  std::size_t got_moments = 0;
  for (auto& [key, t] : got) {
    if (key.find('@') == std::string::npos) {
      got_params.insert(key);
    } else {
      const std::string head = key.substr(0, key.rfind('.', key.rfind('@')));
      CATCH_CHECK(stage1.count(head) == 1);
      ++got_moments;
    }
  }
  CATCH_CHECK(got_params == stage1);
  CATCH_CHECK(got_moments > 0);
  CATCH_CHECK(got.size() < everything.size());
  std::remove(file.c_str());
}

CATCH_TEST_CASE("parameters that do not fit the model are one error listing them", "[checkpoint][state]") {
  const run_setup small = prepare_run(tiny(2, 1));
  named_tensors params = parameter_tensors(state_view(small));
  params.erase(params.begin());  // drop one
  train_options wider = tiny(2, 1);
  wider.model.hidden = 64;
  const run_setup other = prepare_run(wider);
  CATCH_CHECK_THROWS_WITH(load_parameter_tensors(state_view(small), params), Contains("1 missing: "));
  CATCH_CHECK_THROWS_WITH(load_parameter_tensors(state_view(other), parameter_tensors(state_view(small))),
                          Contains("of another shape: ") && Contains("(has [") && Contains("and "));
}

CATCH_TEST_CASE("optimizer moments missing a part are refused, not resumed as zeros", "[checkpoint][state]") {
  // A hand-edited checkpoint without a parameter's steps resumed with 0 AdamW updates (another
  // bias correction), without a word.
  const run_setup from = prepare_run(tiny(2, 1));
  train_a_little(from);
  const named_tensors moments = optimizer_tensors(state_view(from));
  CATCH_REQUIRE_NOTHROW(load_optimizer_tensors(state_view(from), moments));
  for (const std::string part : {".steps@", ".exp_avg@", ".exp_avg_sq@"}) {
    CATCH_INFO(part);
    named_tensors without;
    std::string dropped;
    for (const auto& [name, t] : moments) {
      if (dropped.empty() && name.find(part) != std::string::npos) {
        dropped = name;
        continue;
      }
      without.emplace_back(name, t);
    }
    CATCH_REQUIRE(!dropped.empty());
    CATCH_CHECK_THROWS_WITH(load_optimizer_tensors(state_view(from), without),
                            "optimizer tensor '" + dropped + "' is missing (the checkpoint has others of '" +
                                dropped.substr(0, dropped.find(part)) + dropped.substr(dropped.rfind('@')) +
                                "'): every parameter's moments need exp_avg, exp_avg_sq and steps");
  }
}

// A hand-edited checkpoint's moments that no AdamW run leaves: runs of one parameter over each
// other or past its end (a later run overwrote elements, one past the end was cut short, without
// a word), negative or non-finite moments and a negative or fractional step count (the first
// update was blamed on --lr, or a negative count read as "missing").
CATCH_TEST_CASE("optimizer moments no AdamW run leaves are refused naming the tensor", "[checkpoint][state]") {
  const run_setup from = prepare_run(tiny(2, 1));
  train_a_little(from);
  const named_tensors moments = optimizer_tensors(state_view(from));
  std::string param;  // a parameter with one run at @0
  for (const auto& [name, t] : moments)
    if (name.size() > 8 && name.compare(name.size() - 8, 8, ".steps@0") == 0) param = name.substr(0, name.size() - 8);
  CATCH_REQUIRE(!param.empty());
  const auto with = [&](const std::function<void(named_tensors&)>& edit) {
    named_tensors t = moments;
    edit(t);
    return t;
  };
  const auto find = [](const named_tensors& t, const std::string& name) -> at::Tensor {
    for (auto& [n, x] : t)
      if (n == name) return unbox(x);
    throw std::logic_error("no " + name);
  };
  const auto set = [](named_tensors& t, const std::string& name, at::Tensor value) {
    for (auto& [n, x] : t)
      if (n == name) x = box(std::move(value));
  };
  const std::int64_t length = find(moments, param + ".exp_avg@0").numel();
  struct bad_case {
    named_tensors tensors;
    std::string message;
  };
  const auto spelled = [&](const std::string& offset) {  // a second run at offset 0, written as `offset`
    return with([&](named_tensors& t) {
      for (const std::string part : {".exp_avg@", ".exp_avg_sq@", ".steps@"})
        t.emplace_back(param + part + offset, box(find(t, param + part + "0").clone() + (part == ".steps@" ? 0 : 1)));
    });
  };
  const std::string bad_offset = "': bad offset (a whole number as written: no sign, no leading zero, at most 18 digits)";
  const std::vector<bad_case> cases = {
      // "@00" read as "@0": its run replaced the other without a word (other moments, exit 0).
      {spelled("00"), "optimizer tensor '" + param + ".exp_avg@00" + bad_offset},
      {spelled("+0"), "optimizer tensor '" + param + ".exp_avg@+0" + bad_offset},
      // 2^63 - 1: offset + length overflowed past the range check.
      {spelled("9223372036854775807"), "optimizer tensor '" + param + ".exp_avg@9223372036854775807" + bad_offset},
      // A second run over the second half of the first.
      {with([&](named_tensors& t) {
         const long long half = length / 2;
         for (const std::string part : {".exp_avg@", ".exp_avg_sq@", ".steps@"})
           t.emplace_back(param + part + std::to_string(half), box(find(t, param + part + "0").clone()));
       }),
       "optimizer tensors of '" + param + "' overlap: the run at @0 holds elements up to " + std::to_string(length - 1) +
           ", and another begins at @" + std::to_string(length / 2)},
      // One run past the parameter's end.
      {with([&](named_tensors& t) {
         for (const std::string part : {".exp_avg@", ".exp_avg_sq@", ".steps@"}) {
           const at::Tensor x = find(t, param + part + "0");
           set(t, param + part + "0", part == ".steps@" ? x.clone() : torch::cat({x, x.narrow(0, 0, 1)}));
         }
       }),
       "optimizer tensors of '" + param + "@0' hold " + std::to_string(length + 1) + " elements from 0, past the " +
           "parameter's " + std::to_string(length)},
      {with([&](named_tensors& t) {
         at::Tensor v = find(t, param + ".exp_avg_sq@0").clone();
         v[0] = -1.0;
         set(t, param + ".exp_avg_sq@0", v);
       }),
       "optimizer tensor '" + param + ".exp_avg_sq@0' holds 1 of its " + std::to_string(length) +
           " values below 0: a mean of squares is 0 or more"},
      {with([&](named_tensors& t) {
         at::Tensor m = find(t, param + ".exp_avg@0").clone();
         m[0] = std::numeric_limits<float>::quiet_NaN();
         set(t, param + ".exp_avg@0", m);
       }),
       "optimizer tensor '" + param + ".exp_avg@0' holds 1 of its " + std::to_string(length) +
           " values that are not finite (NaN or infinite)"},
      {with([&](named_tensors& t) { set(t, param + ".steps@0", torch::tensor({std::int64_t{-5}})); }),
       "optimizer tensor '" + param + ".steps@0' holds -5 updates: a step count is 0 or more"},
      {with([&](named_tensors& t) { set(t, param + ".steps@0", torch::tensor({2.0f})); }),
       "optimizer tensor '" + param + ".steps@0' is F32: a step count is a whole number (I64)"},
      {with([&](named_tensors& t) { set(t, param + ".steps@0", torch::tensor({std::int64_t{2}, std::int64_t{2}})); }),
       "optimizer tensor '" + param + ".steps@0' holds 2 values: a step count is one number"},
      {with([&](named_tensors& t) { set(t, param + ".steps@0", torch::tensor({std::int64_t{0}})); }),
       "optimizer tensor '" + param + ".exp_avg@0' is not zero where its step count ('" + param +
           ".steps@0') says no update was made"},
  };
  for (const auto& c : cases) {
    CATCH_INFO(c.message);
    CATCH_CHECK_THROWS_WITH(load_optimizer_tensors(state_view(from), c.tensors), c.message);
  }
  CATCH_CHECK_NOTHROW(load_optimizer_tensors(state_view(from), moments));  // the untouched ones load
  // More updates than the checkpoint's steps (2^63 - 1 was taken, and changed the bias correction).
  CATCH_CHECK_NOTHROW(load_optimizer_tensors(state_view(from), moments, 2));
  CATCH_CHECK_THROWS_WITH(load_optimizer_tensors(state_view(from), moments, 1),
                          Catch::StartsWith("optimizer tensor '") && Contains(".steps@") &&
                              Contains("' holds 2 updates, more than the checkpoint's 1 steps"));
}
