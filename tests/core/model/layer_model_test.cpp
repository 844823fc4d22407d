// Tests for the model API (core/model/layer_model, layer_chunk, split_backward) on a user's
// model that is not the GPT: the generic I/W split against the full backward, ties, the
// partition methods that measure the model, and the errors a user gets for bad input.
#include "core/model/layer_chunk.hpp"
#include "core/model/layer_model.hpp"
#include "core/model/tensor_box_torch.hpp"
#include "core/partition.hpp"
#include "core/train/run_setup.hpp"
#include "tests/support/mlp_model.hpp"

#include <algorithm>
#include <map>
#include <memory>
#include <ostream>
#include <stdexcept>

#include <catch2/catch.hpp>

namespace actorpipe {
std::ostream& operator<<(std::ostream& os, const layer_range& r) { return os << '[' << r.start << ", " << r.end << ')'; }
}  // namespace actorpipe

namespace {

using namespace actorpipe;
using actorpipe::testing::mlp_model;
using actorpipe::testing::mlp_options;
using actorpipe::testing::counting_linear_module;

train_options mlp_train_options() {
  train_options o;
  o.model_name = "mlp";
  o.microbatch_size = 4;
  return o;
}

std::shared_ptr<const model_definition> mlp(const mlp_options& m = {}) {
  return std::make_shared<const model_definition>(mlp_model(mlp_train_options(), m));
}

chunk_spec slice(int v, int begin, int end, int layers) {
  chunk_spec s;
  s.virtual_stage = v;
  s.layer_begin = begin;
  s.layer_end = end;
  s.first = begin == 0;
  s.last = end == layers;
  return s;
}

// Forward every microbatch through the chain, then backward (I, or B) in microbatch order.
void run_step(const model_definition& model, std::vector<layer_chunk*> chain, int microbatches, bool split) {
  for (int mb = 0; mb < microbatches; ++mb) {
    const microbatch_tensors d = model.data(0, mb);
    tensor_box act = d.inputs;
    for (auto* c : chain) act = c->forward(mb, act, d.targets, 1.0 / microbatches).output;
  }
  for (int mb = 0; mb < microbatches; ++mb) {
    tensor_box g;
    for (auto it = chain.rbegin(); it != chain.rend(); ++it) g = (*it)->backward(mb, g, split);
  }
}

std::map<std::string, at::Tensor> grads(const std::vector<layer_chunk*>& chain) {
  std::map<std::string, at::Tensor> out;
  for (auto* c : chain)
    for (auto& [name, t] : c->named_parameters()) out[std::to_string(c->spec().virtual_stage) + ":" + name] = unbox(t).grad();
  return out;
}

}  // namespace

CATCH_TEST_CASE("a user model's layers get global names, seeded init and one module per tie key", "[model][layer_model]") {
  const auto model = mlp();
  const int L = static_cast<int>(model->layers.size());
  CATCH_REQUIRE(L == 8);
  layer_chunk whole(model, slice(0, 0, L, L));
  std::vector<std::string> names;
  for (auto& p : whole.named_parameters()) names.push_back(p.first);
  // tied_b reuses tied_a's module: its weight is listed once, under the owner's name.
  CATCH_CHECK(names == std::vector<std::string>{"in.0.weight", "in.0.bias", "h0.fc.weight", "h0.fc.bias", "tied_a.weight",
                                                "tied_a.bias", "h1.fc.weight", "h1.fc.bias", "h2.fc.weight", "h2.fc.bias",
                                                "h3.fc.weight", "h3.fc.bias", "out.weight", "out.bias"});
  CATCH_CHECK(whole.tied_copies().empty());
  // Two slices hold the same numbers as the whole (init depends on the layer name only); the
  // later slice holds a copy of the tied weight and not the owner's bias.
  layer_chunk a(model, slice(0, 0, 4, L)), b(model, slice(1, 4, L, L));
  std::map<std::string, at::Tensor> all;
  for (auto& p : whole.named_parameters()) all[p.first] = unbox(p.second);
  for (auto* c : {&a, &b})
    for (auto& [name, t] : c->named_parameters()) {
      CATCH_INFO(name);
      CATCH_CHECK(torch::equal(unbox(t), all.at(name)));
    }
  CATCH_CHECK(b.tied_copies() == std::vector<std::string>{"tied_a.weight"});
  CATCH_CHECK(unbox(b.tied_parameters("shared").at(0)).sizes() == at::IntArrayRef({32, 32}));
  CATCH_CHECK(a.tied_parameters("shared").size() == 1);
}

CATCH_TEST_CASE("the generic split: I then W gives the full backward's gradients bit for bit", "[model][layer_model]") {
  const auto model = mlp();
  const int L = 8;
  layer_chunk a0(model, slice(0, 0, 3, L)), a1(model, slice(1, 3, 6, L)), a2(model, slice(2, 6, L, L));
  layer_chunk b0(model, slice(0, 0, 3, L)), b1(model, slice(1, 3, 6, L)), b2(model, slice(2, 6, L, L));
  run_step(*model, {&a0, &a1, &a2}, 3, false);
  run_step(*model, {&b0, &b1, &b2}, 3, true);
  // After I: no weight gradient yet, except where a chunk had to fall back (none here).
  for (auto* c : {&b0, &b1, &b2}) {
    CATCH_CHECK(c->pending_weight_grads() == 3);
    for (auto& [name, t] : c->named_parameters()) {
      CATCH_INFO(name);
      CATCH_CHECK_FALSE(unbox(t).grad().defined());
    }
  }
  for (int mb = 0; mb < 3; ++mb)
    for (auto* c : {&b0, &b1, &b2}) c->weight_grad(mb);
  const auto ref = grads({&a0, &a1, &a2});
  const auto got = grads({&b0, &b1, &b2});
  CATCH_REQUIRE(ref.size() == got.size());
  for (auto& [name, g] : ref) {
    CATCH_INFO(name);
    CATCH_REQUIRE(g.defined());
    CATCH_CHECK(torch::equal(got.at(name), g));
  }
  CATCH_CHECK_THROWS_WITH(b0.weight_grad(0), Catch::Contains("nothing deferred"));
}

CATCH_TEST_CASE("the generic split falls back to a full backward where weight branches share a parameter", "[model][layer_model]") {
  const auto model = mlp();  // tied_a and tied_b in the second slice use one weight at two depths
  const int L = 8;
  layer_chunk a0(model, slice(0, 0, 1, L)), a1(model, slice(1, 1, L, L));
  layer_chunk b0(model, slice(0, 0, 1, L)), b1(model, slice(1, 1, L, L));
  run_step(*model, {&a0, &a1}, 2, false);
  run_step(*model, {&b0, &b1}, 2, true);
  // The shared weight made the second slice run its whole backward in I.
  for (auto& [name, t] : b1.named_parameters()) {
    CATCH_INFO(name);
    CATCH_CHECK(unbox(t).grad().defined());
  }
  for (int mb = 0; mb < 2; ++mb)
    for (auto* c : {&b0, &b1}) c->weight_grad(mb);
  const auto ref = grads({&a0, &a1}), got = grads({&b0, &b1});
  for (auto& [name, g] : ref) {
    CATCH_INFO(name);
    CATCH_CHECK(torch::equal(got.at(name), g));
  }
}

CATCH_TEST_CASE("partition methods on a model: parameters counts, profile measures", "[model][layer_model][partition]") {
  train_options o = mlp_train_options();
  mlp_options m;
  m.heavy = {{"h0", 12}, {"h1", 12}};
  const model_definition model = mlp_model(o, m);
  const built_layers built = build_all_layers(model);
  const auto counts = layer_parameter_counts(model, built);
  // in 16*32+32, hidden 32*32+32, tied_b uses the tied weight only, out 32*16+16
  CATCH_CHECK(counts == std::vector<double>{544, 1056, 1056, 1056, 1056, 1056, 1024, 528});

  std::vector<std::string> names;
  for (auto& l : model.layers) names.push_back(l.name);
  const auto costs = profile_layers(model, built);
  CATCH_REQUIRE(costs.size() == 8);
  for (double c : costs) CATCH_CHECK(c > 0);
  CATCH_CHECK(costs[1] > 2 * costs[5]);  // h0 (12 matmuls) against h3 (one): ~12x, wide margin for noise
  const auto uniform = partition_layers("uniform", names, 2, 1);
  const auto profile = partition_layers("profile", names, 2, 1, {}, [&] { return costs; });
  CATCH_CHECK(uniform == std::vector<layer_range>{{0, 4}, {4, 8}});
  CATCH_CHECK(profile != uniform);

  // The profile split balances the profiled costs better than the uniform one: its most
  // expensive stage costs less. (Computed from the costs, not timed here: timings belong in bench/.)
  auto bottleneck = [&](const std::vector<layer_range>& parts) {
    double worst = 0;
    for (const auto& p : parts) {
      double sum = 0;
      for (int i = p.start; i < p.end; ++i) sum += costs[static_cast<std::size_t>(i)];
      worst = std::max(worst, sum);
    }
    return worst;
  };
  CATCH_INFO("most expensive stage: uniform " << bottleneck(uniform) << ", profile " << bottleneck(profile));
  CATCH_CHECK(bottleneck(profile) < bottleneck(uniform));

  // What the user's code does wrong while profiled is named (LibTorch's bare text was all), and
  // what trains cut also profiles: a layer working in place, an integer tensor between layers.
  model_definition bad = mlp_model(o, m);
  bad.layers[3].forward = [](layer_module&, const at::Tensor&) -> at::Tensor { throw std::runtime_error("boom"); };
  CATCH_CHECK_THROWS_WITH(profile_layers(bad, build_all_layers(bad)),
                          "--partition profile: layer 'h1' (layer 3) failed in its forward: boom");
  bad = mlp_model(o, m);
  bad.loss = [](const at::Tensor& out, const at::Tensor& y) { return (out - y).pow(2); };  // not reduced
  CATCH_CHECK_THROWS_WITH(profile_layers(bad, build_all_layers(bad)),
                          "--partition profile: loss: must return a floating-point scalar, got Float [4, 16]");
  model_definition odd = mlp_model(o, m);
  odd.layers[2].forward = [](layer_module& l, const at::Tensor& x) { return l.forward(x); };
  odd.layers[3].build = [] {
    return layer_module(torch::nn::Sequential(torch::nn::ReLU(torch::nn::ReLUOptions(true)), torch::nn::Linear(32, 32)));
  };
  const auto odd_costs = profile_layers(odd, build_all_layers(odd));
  CATCH_CHECK(odd_costs.size() == 8);
}

CATCH_TEST_CASE("prepare_run cuts a registered model by --partition and finds the ties", "[model][layer_model]") {
  register_model("test-mlp-setup", [](const train_options& o) { return mlp_model(o); }, "the tests' MLP");
  train_options o = mlp_train_options();
  o.model_name = "test-mlp-setup";
  o.stages = 2;
  o.chunks = 2;
  o.schedule = "interleaved";
  o.microbatches = 4;
  run_setup s = prepare_run(o);
  CATCH_CHECK(s.partition == "uniform");
  CATCH_CHECK(s.layers == std::vector<layer_range>{{0, 2}, {2, 4}, {4, 6}, {6, 8}});
  CATCH_REQUIRE(s.ties.size() == 1);
  CATCH_CHECK(s.ties[0].key == "shared");
  CATCH_CHECK(s.ties[0].stages == std::vector<int>{1, 3});
  CATCH_CHECK(describe_partition(s.layers, s.layer_names) ==
              "0: in .. h0 (2 layers) | 1: tied_a .. h1 (2 layers) | 2: h2 .. h3 (2 layers) | 3: tied_b .. out (2 layers)");
  o.partition = "type:^h";
  s = prepare_run(o);
  CATCH_CHECK(s.layers == std::vector<layer_range>{{0, 3}, {3, 4}, {4, 5}, {5, 8}});
  o.partition = "type:^conv";
  CATCH_CHECK_THROWS_WITH(prepare_run(o), Catch::Contains("--partition 'type:^conv' matches no layer name"));
  // A model whose own default_partition fails is named, not --partition (not given).
  register_model("test-mlp-bad-default", [](const train_options& t) {
    model_definition m = mlp_model(t);
    m.default_partition = "type:^conv";
    return m;
  });
  train_options defaulted = o;
  defaulted.model_name = "test-mlp-bad-default";
  defaulted.partition.clear();
  CATCH_CHECK_THROWS_WITH(prepare_run(defaulted),
                          Catch::StartsWith("model 'mlp': its default_partition 'type:^conv' matches no layer name") &&
                              Catch::EndsWith("(no --partition was given: give one to cut the model another way)"));
  defaulted.partition = "uniform";
  CATCH_CHECK_NOTHROW(prepare_run(defaulted));
  o.partition = "profile";  // measured per process: a job of several would disagree
  CATCH_CHECK_THROWS_WITH(prepare_run(o, {}, [](int rank) { return rank == 0; }),
                          Catch::Contains("--partition profile measures the layers in one process") &&
                              Catch::Contains("counts:A,B"));
  o.partition = "uniform";
  o.stages = 4;
  o.chunks = 3;
  o.schedule = "interleaved";
  o.microbatches = 8;
  CATCH_CHECK_THROWS_WITH(prepare_run(o), Catch::Contains("8 layers cannot be split over stages*chunks=12 virtual stages"));
  o.model_name = "no-such-model";
  CATCH_CHECK_THROWS_WITH(prepare_run(o), Catch::Contains("--model 'no-such-model' is not a registered model") &&
                                              Catch::Contains("gpt") && Catch::Contains("test-mlp-setup"));
  // Two layers of one type under one prefix on different stages: their parameters share names
  // (it trained, then failed to save).
  register_model("test-mlp-same-prefix", [](const train_options& t) {
    model_definition m = mlp_model(t);
    for (const char* layer : {"h0", "h3"}) {
      auto& l = *std::find_if(m.layers.begin(), m.layers.end(), [&](const layer_spec& x) { return x.name == layer; });
      l.has_param_prefix = true;
      l.param_prefix = "hidden.";
    }
    return m;
  });
  o.model_name = "test-mlp-same-prefix";
  o.stages = 2;
  o.chunks = 1;
  o.schedule = "1f1b";
  o.microbatches = 4;
  CATCH_CHECK_THROWS_WITH(prepare_run(o), "parameter 'hidden.fc.weight' is held by virtual stages 0 and 1: two layers give "
                                          "their parameters the same names (give them distinct param prefixes)");
  // A module's own name for a buffer is a tensor name too.
  register_model("test-mlp-tab-buffer", [](const train_options& t) {
    model_definition m = mlp_model(t);
    m.layers[1].build = [] {
      auto lin = torch::nn::Linear(32, 32);
      lin->register_buffer("count\nof", torch::zeros({1}));
      return layer_module(lin);
    };
    return m;
  });
  o.model_name = "test-mlp-tab-buffer";
  CATCH_CHECK_THROWS_WITH(prepare_run(o), "a tensor of virtual stage 0: its name 'h0.count\\x0aof' holds a control "
                                          "character, an invisible mark or bytes of no valid UTF-8 (shown as \\xNN), "
                                          "which a checkpoint's tensor names may not");
  // A name as checkpoints give a data-parallel replica's buffer copies: saved, then not loaded.
  register_model("test-mlp-replica-name", [](const train_options& t) {
    model_definition m = mlp_model(t);
    m.layers[1].name = "replica1/h0";
    return m;
  });
  o.model_name = "test-mlp-replica-name";
  CATCH_CHECK_THROWS_WITH(prepare_run(o), Catch::Contains("its name 'replica1/h0.fc.weight' begins as checkpoints name a "
                                                          "data-parallel replica's copies of its buffers ('replica<N>/')"));
  register_model("test-mlp-one-module", [](const train_options& t) {
    model_definition m = mlp_model(t);
    auto one = std::make_shared<torch::nn::LinearImpl>(32, 32);  // built once, handed to every stage that asks
    m.layers[3].build = [one] { return layer_module(one); };
    return m;
  });
  o.model_name = "test-mlp-one-module";
  o.stages = 2;
  CATCH_CHECK_NOTHROW(prepare_run(o));  // one stage holds h1: nothing shared
  o.dp = 2;  // both replicas build h1 from the one module
  CATCH_CHECK_THROWS_WITH(prepare_run(o), Catch::Contains("is the tensor of 'h1.weight' on virtual stage ") &&
                                              Catch::Contains("a layer's build function returns a module it built once"));
}

CATCH_TEST_CASE("bad models get one clear error each", "[model][layer_model]") {
  const train_options o = mlp_train_options();
  model_definition empty = mlp_model(o);
  empty.layers.clear();
  CATCH_CHECK_THROWS_WITH(validate_model(empty), Catch::Contains("model 'mlp' has no layers"));

  model_definition twice = mlp_model(o);
  twice.layers[3].name = "h0";
  CATCH_CHECK_THROWS_WITH(validate_model(twice), Catch::Contains("layer 3") && Catch::Contains("'h0' is used twice"));

  // Names a checkpoint cannot hold: a tab trained and wrote files its loader calls corrupt;
  // bytes of no UTF-8 trained and then failed every save. Printable UTF-8 is a name.
  model_definition tab = mlp_model(o);
  tab.layers[2].name = "b\tc";
  CATCH_CHECK_THROWS_WITH(validate_model(tab), "model 'mlp', layer 2: its name 'b\\x09c' holds a control character, an "
                                               "invisible mark or bytes of no valid UTF-8 (shown as \\xNN), which a "
                                               "checkpoint's tensor names may not (its parameters are named after it)");
  model_definition not_utf8 = mlp_model(o);
  not_utf8.layers[1].name = "h\xff";
  CATCH_CHECK_THROWS_WITH(validate_model(not_utf8), Catch::Contains("layer 1: its name 'h\\xff' holds"));
  model_definition prefix = mlp_model(o);
  prefix.layers[1].has_param_prefix = true;
  prefix.layers[1].param_prefix = "p\u202e.";
  CATCH_CHECK_THROWS_WITH(validate_model(prefix), Catch::Contains("layer 1: its param_prefix 'p\\xe2\\x80\\xae.' holds"));
  model_definition printable = mlp_model(o);
  printable.layers[1].name = "层 0/é.x";
  CATCH_CHECK_NOTHROW(validate_model(printable));

  model_definition unbuilt = mlp_model(o);
  unbuilt.layers[1].build = nullptr;
  CATCH_CHECK_THROWS_WITH(validate_model(unbuilt), Catch::Contains("layer 1 ('h0') has no build function"));

  model_definition no_loss = mlp_model(o);
  no_loss.loss = nullptr;
  CATCH_CHECK_THROWS_WITH(validate_model(no_loss), Catch::Contains("has no loss function"));

  // A tie between layers of different shapes: tied_b builds [16, 32] where tied_a has [32, 32].
  mlp_options bad;
  bad.mismatched_tie = true;
  auto mismatched = std::make_shared<const model_definition>(mlp_model(o, bad));
  CATCH_CHECK_THROWS_WITH(layer_chunk(mismatched, slice(0, 0, 8, 8)),
                          Catch::Contains("tie key 'shared': layer 'tied_b' (layer 6) builds weight [16, 32]") &&
                              Catch::Contains("layer 'tied_a' (layer 2), which owns the tie, has weight [32, 32]"));
  CATCH_CHECK_THROWS_WITH(layer_chunk(mismatched, slice(1, 4, 8, 8)), Catch::Contains("builds weight [16, 32]"));
  CATCH_CHECK_THROWS_WITH(build_all_layers(*mismatched), Catch::Contains("builds weight [16, 32]"));

  // Registration.
  CATCH_CHECK_THROWS_WITH(register_model("gpt", [](const train_options& t) { return mlp_model(t); }),
                          Catch::Contains("'gpt' is a built-in model"));
  CATCH_CHECK_THROWS_WITH(register_model("my model", [](const train_options& t) { return mlp_model(t); }),
                          Catch::Contains("non-empty without whitespace"));
  CATCH_CHECK_THROWS_WITH(register_model("x", nullptr), Catch::Contains("needs a factory"));
  // A factory that throws is named (refused, exit 2), not an anonymous failure.
  static const bool registered = [] {
    register_model("test-factory-throws", [](const train_options&) -> model_definition { throw std::runtime_error("no data"); });
    return true;
  }();
  (void)registered;
  train_options named = o;
  named.model_name = "test-factory-throws";
  CATCH_CHECK_THROWS_AS(make_model(named), std::invalid_argument);
  CATCH_CHECK_THROWS_WITH(make_model(named), "--model 'test-factory-throws': its factory failed: no data");

  // A layer that fails in forward is named, with the stage and microbatch.
  model_definition broken = mlp_model(o);
  broken.layers[5].forward = [](layer_module&, const at::Tensor& x) { return x.matmul(at::ones({7, 7})); };
  layer_chunk c(std::make_shared<const model_definition>(broken), slice(0, 0, 8, 8));
  const auto d = broken.data(0, 0);
  CATCH_CHECK_THROWS_WITH(c.forward(0, d.inputs, d.targets, 1.0),
                          Catch::Contains("forward of microbatch 0 on virtual stage 0") && Catch::Contains("layer 'h3' (layer 5)"));
  CATCH_CHECK(c.live_stashes() == 0);
  // A layer that returns no tensor, last in its stage: named too (the stage's actor said only
  // "F0.0 produced no tensor to send").
  model_definition hollow_out = mlp_model(o);
  hollow_out.layers[2].forward = [](layer_module&, const at::Tensor&) { return at::Tensor(); };
  layer_chunk first(std::make_shared<const model_definition>(hollow_out), slice(0, 0, 3, 8));
  CATCH_CHECK_THROWS_WITH(first.forward(0, d.inputs, d.targets, 1.0),
                          Catch::Contains("forward of microbatch 0 on virtual stage 0") &&
                              Catch::Contains("layer 'tied_a' (layer 2): its forward returned an undefined tensor"));
  CATCH_CHECK(first.live_stashes() == 0);

  // A build function that returns no module, or throws: the same error from the partition
  // methods (the default one segfaulted on it) as from a stage.
  model_definition hollow = mlp_model(o);
  hollow.layers[1].build = [] { return layer_module(); };
  CATCH_CHECK_THROWS_WITH(build_all_layers(hollow), "layer 'h0': its build function returned no module");
  CATCH_CHECK_THROWS_WITH(layer_chunk(std::make_shared<const model_definition>(hollow), slice(0, 0, 8, 8)),
                          "layer 'h0': its build function returned no module");
  hollow.layers[1].build = []() -> layer_module { return layer_module(torch::nn::Linear(nullptr)); };
  CATCH_CHECK_THROWS_WITH(build_all_layers(hollow), Catch::Contains("layer 'h0': its build function failed: "));
  // One module object under two layers without a tie: refused in a stage, and across stages.
  model_definition shared = mlp_model(o);
  auto one = std::make_shared<torch::nn::LinearImpl>(32, 32);
  for (int i : {3, 4}) shared.layers[i].build = [one] { return layer_module(one); };
  CATCH_CHECK_THROWS_WITH(layer_chunk(std::make_shared<const model_definition>(shared), slice(0, 0, 8, 8)),
                          "layers 'h1' and 'h2' build the same module object: to share it, give both the same tie_key");
  // A loss that does not depend on the model: refused, not trained silently.
  model_definition detached = mlp_model(o);
  detached.loss = [](const at::Tensor& out, const at::Tensor& y) { return torch::mse_loss(out.detach(), y); };
  layer_chunk dc(std::make_shared<const model_definition>(detached), slice(0, 0, 8, 8));
  CATCH_CHECK_THROWS_WITH(dc.forward(0, d.inputs, d.targets, 1.0),
                          Catch::Contains("the loss does not depend on any parameter (it requires no gradient)"));
  // With activation checkpointing the forward keeps no graph: its recompute in the backward
  // finds the loss detached (it trained nothing, without a word).
  chunk_spec recomputed = slice(0, 0, 8, 8);
  recomputed.activation_checkpointing = true;
  layer_chunk ac(std::make_shared<const model_definition>(detached), recomputed);
  ac.forward(0, d.inputs, d.targets, 1.0);
  CATCH_CHECK_THROWS_WITH(ac.backward(0, {}, false),
                          Catch::Contains("backward of microbatch 0 on virtual stage 0") &&
                              Catch::Contains("the loss does not depend on any parameter (it requires no gradient)"));
}

CATCH_TEST_CASE("a stage's first layer may work in place, as it may in the whole model", "[model][layer_model]") {
  // ReLU(inplace) first in a stage met the leaf that takes the stage's input gradient: "a leaf
  // Variable that requires grad is being used in an in-place operation", cut there only.
  mlp_options untied;
  untied.tied = false;  // a tie's gradients are summed by the runtime, not by the chunks
  model_definition m = mlp_model(mlp_train_options(), untied);
  m.layers[2].forward = [](layer_module& l, const at::Tensor& x) { return l.forward(x); };  // no tanh: a Linear's
  m.layers[3].build = [] {  // output, which its backward does not need
    return layer_module(torch::nn::Sequential(torch::nn::ReLU(torch::nn::ReLUOptions(true)), torch::nn::Linear(32, 32)));
  };
  auto model = std::make_shared<const model_definition>(m);
  layer_chunk whole(model, slice(0, 0, 8, 8));
  run_step(*model, {&whole}, 2, false);
  for (const bool split : {false, true}) {
    CATCH_INFO("split " << split);
    layer_chunk a(model, slice(0, 0, 3, 8)), b(model, slice(1, 3, 8, 8));
    run_step(*model, {&a, &b}, 2, split);
    if (split)
      for (int mb = 0; mb < 2; ++mb) b.weight_grad(mb), a.weight_grad(mb);
    std::map<std::string, at::Tensor> cut;
    for (auto* c : {&a, &b})
      for (auto& [name, t] : c->named_parameters()) cut[name] = unbox(t).grad();
    for (auto& [name, t] : whole.named_parameters()) {
      CATCH_INFO(name);
      CATCH_REQUIRE(cut.count(name));
      CATCH_CHECK(torch::equal(cut.at(name), unbox(t).grad()));
    }
  }
}

CATCH_TEST_CASE("a module whose forward is not one tensor to one (an LSTM) is a layer with a forward that calls it",
                "[model][layer_model]") {
  // It did not compile: layer_module called forward(x) as if it returned a tensor.
  layer_module lstm(torch::nn::LSTM(torch::nn::LSTMOptions(4, 4)));
  const at::Tensor x = torch::ones({3, 2, 4});
  CATCH_CHECK_THROWS_WITH(lstm.forward(x), Catch::Contains("this layer's module does not take one tensor to one tensor "
                                                           "(an LSTM returns a tuple): give its layer_spec a forward"));
  layer_spec spec = make_layer("rnn", [] { return layer_module(torch::nn::LSTM(torch::nn::LSTMOptions(4, 4))); });
  spec.forward = [](layer_module& m, const at::Tensor& in) { return std::get<0>(m.as<torch::nn::LSTMImpl>().forward(in)); };
  layer_module built = spec.build();
  CATCH_CHECK(spec.forward(built, x).sizes() == x.sizes());
}

CATCH_TEST_CASE("evaluation runs the modules in eval mode, and gives them back in their own", "[model][layer_model]") {
  model_definition m = mlp_model(mlp_train_options());
  m.layers.insert(m.layers.begin() + 1,
                  make_layer("drop", [] { return layer_module(torch::nn::Dropout(torch::nn::DropoutOptions(0.5))); }));
  auto model = std::make_shared<const model_definition>(m);
  layer_chunk c(model, slice(0, 0, 9, 9));
  const auto d = m.data(0, 0);
  const at::Tensor a = unbox(c.evaluate(0, d.inputs)), b = unbox(c.evaluate(0, d.inputs));
  CATCH_CHECK(torch::equal(a, b));  // no dropout mask: the same outputs every time
  // Training mode again after: the forward drops (its output differs from the evaluation's).
  const double loss = c.forward(0, d.inputs, d.targets, 1.0).loss;
  const double eval_loss = torch::mse_loss(a, unbox(d.targets)).item<double>();
  CATCH_CHECK(loss != eval_loss);
  // Activation checkpointing would draw a second mask in its recompute: refused.
  chunk_spec recomputed = slice(0, 0, 9, 9);
  recomputed.activation_checkpointing = true;
  CATCH_CHECK_THROWS_WITH(layer_chunk(model, recomputed),
                          "layer 'drop' holds a torch::nn::DropoutImpl, which --activation-checkpointing would run twice "
                          "per microbatch (a new dropout mask, or batch statistics counted twice): train this model "
                          "without it");
}

// A forward that updates a buffer of a user's own module counted each microbatch twice under
// activation checkpointing (24 against 12), silently: batch norm and dropout were refused by
// type, a module of one's own was not. Found at the forward that first updates one, by the
// buffers' versions and bytes.
CATCH_TEST_CASE("activation checkpointing refuses a layer whose forward updates a buffer, at its first forward",
                "[model][layer_model]") {
  // Through .data() from the third forward on (the first ones' bytes alone compared missed it).
  for (const auto& [through_data, from_call] : std::vector<std::pair<bool, int>>{{false, 1}, {true, 1}, {true, 3}}) {
    CATCH_INFO("through .data(): " << through_data << ", from forward " << from_call);
    model_definition m = mlp_model(mlp_train_options());
    m.layers[1].build = [through_data = through_data, from_call = from_call] {
      return counting_linear_module(32, through_data, from_call);
    };
    auto model = std::make_shared<const model_definition>(m);
    const auto d = m.data(0, 0);
    chunk_spec plain = slice(0, 0, 8, 8);
    layer_chunk counted(model, plain);
    CATCH_CHECK_NOTHROW(counted.forward(0, d.inputs, d.targets, 1.0));
    chunk_spec recomputed = slice(0, 0, 8, 8);
    recomputed.activation_checkpointing = true;
    layer_chunk twice(model, recomputed);
    for (int mb = 1; mb < from_call; ++mb) CATCH_CHECK_NOTHROW(twice.forward(mb, d.inputs, d.targets, 1.0));
    CATCH_CHECK_THROWS_WITH(twice.forward(0, d.inputs, d.targets, 1.0),
                            Catch::Contains("buffer 'h0.count' changed in the forward, which --activation-checkpointing "
                                            "runs again in backward (the update would count twice, as a batch norm's "
                                            "would): train this model without it"));
    // Every run would fail so: a certain_failure (the run ends as refused, exit 2).
    CATCH_CHECK_THROWS_AS(twice.forward(0, d.inputs, d.targets, 1.0), certain_failure);
  }
  // A buffer the forward leaves alone passes.
  model_definition reads = mlp_model(mlp_train_options());
  reads.layers[1].build = [] {
    auto lin = torch::nn::Linear(32, 32);
    lin->register_buffer("scale", torch::ones({1}));
    return layer_module(lin);
  };
  auto read_only = std::make_shared<const model_definition>(reads);
  chunk_spec recomputed = slice(0, 0, 8, 8);
  recomputed.activation_checkpointing = true;
  layer_chunk once(read_only, recomputed);
  const auto d = reads.data(0, 0);
  CATCH_CHECK_NOTHROW(once.forward(0, d.inputs, d.targets, 1.0));
  CATCH_CHECK_NOTHROW(once.forward(1, d.inputs, d.targets, 1.0));
}

// The model API's functions on input they cannot use: one clear error each (an empty
// built_layers was read past its end, SIGSEGV; repeats 0 profiled every layer at 0 s; a
// default layer_module's forward threw a bare bad_function_call).
CATCH_TEST_CASE("the model API's helpers refuse what they cannot use, naming it", "[model][layer_model]") {
  const train_options o = mlp_train_options();
  const model_definition model = mlp_model(o);
  CATCH_CHECK_THROWS_WITH(layer_parameter_counts(model, built_layers{}),
                          "layer_parameter_counts: 0 built modules for the 8 layers of model 'mlp' (give it "
                          "build_all_layers(model))");
  built_layers hollow;
  hollow.modules.resize(8);
  CATCH_CHECK_THROWS_WITH(profile_layers(model, hollow),
                          "profile_layers: layer 'in' (layer 0) has no built module (give it build_all_layers(model))");
  const built_layers built = build_all_layers(model);
  for (int repeats : {0, -1, 1001})
    CATCH_CHECK_THROWS_WITH(profile_layers(model, built, repeats),
                            "profile_layers: repeats=" + std::to_string(repeats) + " must be in [1, 1000]");
  CATCH_CHECK_THROWS_WITH(check_tie_shapes(model, 7, built.modules[2], -3),
                          "check_tie_shapes: layers 7 and -3 of model 'mlp', which has layers 0..7");
  CATCH_CHECK_THROWS_WITH(check_tie_shapes(model, 2, layer_module(), 6), "check_tie_shapes: the owner's module is empty");
  CATCH_CHECK_THROWS_AS(layer_module().forward(torch::zeros({1})), std::logic_error);
  CATCH_CHECK_THROWS_WITH(layer_module().forward(torch::zeros({1})), Catch::Contains("this layer_module is empty"));
  CATCH_CHECK_THROWS_WITH(register_model(std::string("x\xff"), [](const train_options& t) { return mlp_model(t); }),
                          Catch::StartsWith("register_model: the model name 'x\\xff' holds"));
  // The library's own limits, as the command line's.
  train_options bad = o;
  bad.keep_step_metrics = -1;
  CATCH_CHECK_THROWS_WITH(check_train_options(bad), "keep_step_metrics must be >= 0 (0: every step): got -1");
  bad = o;
  bad.microbatches = 2147483647;  // the unpipelined run ran them until --step-timeout
  CATCH_CHECK_THROWS_WITH(check_train_options(bad),
                          "--microbatches must be at most 1048576 (what a plan may hold): got 2147483647");
}
