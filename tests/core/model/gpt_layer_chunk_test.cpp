// Tests for core/model/layer_chunk on the GPT's layer list (core/model/gpt_model): partition-
// independent init, a 3-chunk pipeline matching the unpartitioned model, the I/W split,
// activation checkpointing, the tied sync and the error messages.
#include "core/model/layer_chunk.hpp"

#include <cmath>
#include <map>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "core/model/gpt_model.hpp"
#include "core/model/gpt_modules.hpp"
#include "core/model/tensor_box_torch.hpp"

#include <catch2/catch.hpp>

namespace {

using actorpipe::box;
using actorpipe::chunk_spec;
using actorpipe::gpt_config;
using actorpipe::tensor_box;
using actorpipe::unbox;

gpt_config tiny() {
  gpt_config c;
  c.vocab = 32;
  c.seq_len = 8;
  c.hidden = 16;
  c.heads = 2;
  c.layers = 3;
  c.init_std = 0.02;
  c.seed = 7;
  return c;
}

// A GPT chunk by its transformer blocks [begin, end): the first also holds the embedding
// (layer 0), the last ln_f and the LM head (the list's last two layers).
struct block_spec {
  int v, block_begin, block_end;
  bool first, last, checkpointing;
};
block_spec spec(int v, int begin, int end, bool first, bool last, bool checkpointing = false) {
  return {v, begin, end, first, last, checkpointing};
}

std::shared_ptr<const actorpipe::model_definition> gpt(const gpt_config& cfg) {
  actorpipe::train_options o;
  o.model = cfg;
  o.microbatch_size = 2;
  return std::make_shared<const actorpipe::model_definition>(actorpipe::gpt_model(o));
}

class chunk_runner : public actorpipe::layer_chunk {
 public:
  chunk_runner(const gpt_config& cfg, const block_spec& b) : layer_chunk(gpt(cfg), to_layers(cfg, b)) {}
  static chunk_spec to_layers(const gpt_config& cfg, const block_spec& b) {
    chunk_spec s;
    s.virtual_stage = b.v;
    s.layer_begin = b.first ? 0 : b.block_begin + 1;
    s.layer_end = b.last ? cfg.layers + 3 : b.block_end + 1;
    s.first = b.first;
    s.last = b.last;
    s.activation_checkpointing = b.checkpointing;
    return s;
  }
};

// The tied sync of two holders, as the chunk actors do it.
void sync_tied(const actorpipe::chunk_compute& a, const actorpipe::chunk_compute& b) {
  const std::vector<std::vector<tensor_box>> both{actorpipe::tied_gradient_copies(a, "tok_emb"),
                                                  actorpipe::tied_gradient_copies(b, "tok_emb")};
  actorpipe::set_tied_gradient_sums(a, "tok_emb", both);
  actorpipe::set_tied_gradient_sums(b, "tok_emb", both);
}

// Random token ids [B, S] from their own generator.
at::Tensor tokens(int64_t b, int64_t s, std::uint64_t seed, int64_t vocab = 32) {
  return at::randint(0, vocab, {b, s}, at::detail::createCPUGenerator(seed), at::TensorOptions().dtype(at::kLong));
}

std::map<std::string, at::Tensor> by_name(const chunk_runner& r) {
  std::map<std::string, at::Tensor> out;
  for (const auto& p : r.named_parameters()) out[p.first] = unbox(p.second);
  return out;
}

bool is_linear_param(const std::string& name) {
  for (const char* part : {".attn.qkv.", ".attn.proj.", ".mlp.fc.", ".mlp.proj."}) {
    if (name.find(part) != std::string::npos) return true;
  }
  return false;
}

double rel_diff(const at::Tensor& a, const at::Tensor& b) {
  const double scale = b.abs().max().item<double>();
  return (a - b).abs().max().item<double>() / (scale > 0 ? scale : 1.0);
}

struct batch {
  at::Tensor inputs;
  at::Tensor targets;
};

std::vector<batch> make_batches(int m) {
  std::vector<batch> out;
  for (int i = 0; i < m; ++i) out.push_back({tokens(2, 8, 100 + i), tokens(2, 8, 200 + i)});
  return out;
}

// One step through a chain of chunks: every forward, then every backward in microbatch
// order (a GPipe step). split: I for all, then W per microbatch. Returns the losses.
std::vector<double> run_step(std::vector<chunk_runner*> chain, const std::vector<batch>& batches, bool split,
                             bool run_w = true) {
  const int m = static_cast<int>(batches.size());
  std::vector<double> losses;
  for (int mb = 0; mb < m; ++mb) {
    tensor_box act = box(batches[mb].inputs);
    for (auto* c : chain) {
      auto r = c->forward(mb, act, box(batches[mb].targets), 1.0 / m);
      if (c->spec().last) losses.push_back(r.loss);
      act = r.output;
    }
  }
  for (int mb = 0; mb < m; ++mb) {
    tensor_box grad;
    for (auto it = chain.rbegin(); it != chain.rend(); ++it) grad = (*it)->backward(mb, grad, split);
  }
  if (split && run_w) {
    for (int mb = 0; mb < m; ++mb) {
      for (auto* c : chain) c->weight_grad(mb);
    }
  }
  return losses;
}

}  // namespace

CATCH_TEST_CASE("parameter names and init do not depend on the partition", "[model][layer_chunk]") {
  const gpt_config cfg = tiny();
  chunk_runner full(cfg, spec(0, 0, 3, true, true));
  const auto full_params = full.named_parameters();
  // The unpartitioned model lists the tied embedding once: the head uses it directly.
  CATCH_REQUIRE(full_params.size() == 2 + 3 * 12 + 2);
  CATCH_CHECK(full_params[0].first == "tok_emb.weight");
  CATCH_CHECK(full_params[1].first == "pos_emb.weight");
  CATCH_CHECK(full_params[2].first == "blocks.0.ln1.weight");
  CATCH_CHECK(full_params[13].first == "blocks.0.mlp.proj.bias");
  CATCH_CHECK(full_params[14].first == "blocks.1.ln1.weight");
  CATCH_CHECK(full_params[38].first == "ln_f.weight");
  CATCH_CHECK(full_params[39].first == "ln_f.bias");
  const auto full_map = by_name(full);
  CATCH_CHECK(full_map.size() == full_params.size());
  CATCH_CHECK(full_map.count("blocks.2.attn.qkv.weight"));
  CATCH_CHECK(full_map.at("blocks.2.attn.qkv.weight").sizes() == at::IntArrayRef({48, 16}));
  CATCH_CHECK(full_map.at("blocks.2.mlp.fc.weight").sizes() == at::IntArrayRef({64, 16}));
  CATCH_CHECK(torch::equal(full_map.at("blocks.1.ln2.weight"), at::ones({16})));
  CATCH_CHECK(torch::equal(full_map.at("blocks.1.mlp.fc.bias"), at::zeros({64})));
  // Different names draw different numbers.
  CATCH_CHECK_FALSE(torch::equal(full_map.at("blocks.0.attn.qkv.weight"), full_map.at("blocks.1.attn.qkv.weight")));

  for (const auto& parts : std::vector<std::vector<block_spec>>{
           {spec(0, 0, 1, true, false), spec(1, 1, 2, false, false), spec(2, 2, 3, false, true)},
           {spec(0, 0, 2, true, false), spec(1, 2, 3, false, false), spec(2, 3, 3, false, true)}}) {
    std::set<std::string> seen;
    for (const auto& s : parts) {
      chunk_runner chunk(cfg, s);
      for (const auto& [name, t] : chunk.named_parameters()) {
        CATCH_INFO("chunk [" << s.block_begin << ", " << s.block_end << ") parameter " << name);
        seen.insert(name);
        CATCH_REQUIRE(full_map.count(name));
        CATCH_CHECK(torch::equal(unbox(t), full_map.at(name)));  // bit for bit
      }
    }
    CATCH_CHECK(seen.size() == full_map.size());
  }
}

CATCH_TEST_CASE("a fresh model's loss is about ln(vocab)", "[model][layer_chunk]") {
  chunk_runner full(tiny(), spec(0, 0, 3, true, true));
  const auto b = make_batches(1)[0];
  const auto r = full.forward(0, box(b.inputs), box(b.targets), 1.0);
  CATCH_CHECK_FALSE(r.output.defined());
  CATCH_CHECK(r.loss == Approx(std::log(32.0)).epsilon(0.02));
  CATCH_CHECK(full.live_stashes() == 1);
  CATCH_CHECK_FALSE(full.backward(0, tensor_box(), false).defined());  // first stage: no input grad
  CATCH_CHECK(full.live_stashes() == 0);
}

CATCH_TEST_CASE("three chained chunks reproduce the unpartitioned model's loss and gradients", "[model][layer_chunk]") {
  const gpt_config cfg = tiny();
  const auto batches = make_batches(3);
  chunk_runner full(cfg, spec(0, 0, 3, true, true));
  const auto full_losses = run_step({&full}, batches, false);

  chunk_runner c0(cfg, spec(0, 0, 1, true, false)), c1(cfg, spec(1, 1, 2, false, false)),
      c2(cfg, spec(2, 2, 3, false, true));
  const auto losses = run_step({&c0, &c1, &c2}, batches, false);
  CATCH_REQUIRE(losses.size() == 3);
  for (int i = 0; i < 3; ++i) CATCH_CHECK(losses[i] == Approx(full_losses[i]).epsilon(1e-6));
  CATCH_CHECK(c0.live_stashes() + c1.live_stashes() + c2.live_stashes() == 0);

  // Tie the embedding: first-stage table + last-stage head copy.
  const tensor_box emb0 = [&] {
    for (const auto& p : c0.named_parameters()) if (p.first == "tok_emb.weight") return p.second;
    return tensor_box();
  }();
  const tensor_box emb2 = c2.named_parameters().back().second;
  CATCH_REQUIRE(c2.named_parameters().back().first == "tok_emb.weight");
  const at::Tensor g0 = unbox(emb0).grad().clone(), g2 = unbox(emb2).grad().clone();
  sync_tied(c0, c2);
  CATCH_CHECK(torch::equal(unbox(emb0).grad(), unbox(emb2).grad()));
  CATCH_CHECK(torch::equal(unbox(emb0).grad(), g0 + g2));
  CATCH_CHECK(c2.tied_copies() == std::vector<std::string>{"tok_emb.weight"});
  CATCH_CHECK(c0.tied_copies().empty());

  const auto full_map = by_name(full);
  int compared = 0;
  for (auto* c : {&c0, &c1, &c2}) {
    for (const auto& [name, t] : c->named_parameters()) {
      CATCH_INFO("parameter " << name);
      const at::Tensor& g = unbox(t).grad();
      CATCH_REQUIRE(g.defined());
      CATCH_CHECK(rel_diff(g, full_map.at(name).grad()) <= 1e-6);
      ++compared;
    }
  }
  CATCH_CHECK(compared == static_cast<int>(full_map.size()) + 1);  // + the head's copy

  // A non-trivial gradient, not zeros everywhere.
  CATCH_CHECK(full_map.at("blocks.0.attn.qkv.weight").grad().abs().max().item<double>() > 1e-6);
}

CATCH_TEST_CASE("split backward (I then W) gives the full backward's gradients", "[model][layer_chunk]") {
  const gpt_config cfg = tiny();
  const auto batches = make_batches(3);
  chunk_runner a0(cfg, spec(0, 0, 1, true, false)), a1(cfg, spec(1, 1, 3, false, true));
  chunk_runner b0(cfg, spec(0, 0, 1, true, false)), b1(cfg, spec(1, 1, 3, false, true));
  const auto full_losses = run_step({&a0, &a1}, batches, false);
  const auto split_losses = run_step({&b0, &b1}, batches, true, /*run_w=*/false);
  CATCH_CHECK(full_losses == split_losses);

  // After I only: the linear layers' weights and biases wait, everything else has its gradient.
  for (auto* c : {&b0, &b1}) {
    CATCH_CHECK(c->pending_weight_grads() == 3);
    CATCH_CHECK(c->live_stashes() == 0);
    for (const auto& [name, t] : c->named_parameters()) {
      CATCH_INFO("parameter " << name);
      CATCH_CHECK(unbox(t).grad().defined() == !is_linear_param(name));
    }
  }
  for (int mb = 0; mb < 3; ++mb) {
    b0.weight_grad(mb);
    b1.weight_grad(mb);
  }
  CATCH_CHECK(b0.pending_weight_grads() + b1.pending_weight_grads() == 0);
  for (int c = 0; c < 2; ++c) {
    const auto ref = by_name(c == 0 ? a0 : a1);
    for (const auto& [name, t] : (c == 0 ? b0 : b1).named_parameters()) {
      CATCH_INFO("parameter " << name);
      CATCH_CHECK(torch::equal(unbox(t).grad(), ref.at(name).grad()));  // bit for bit
    }
  }
}

// A W run out of turn pauses between its products for an F or I that waits (the chunk actor);
// what runs in the pause touches none of the W's gradients, so the bits are the full backward's.
CATCH_TEST_CASE("a W paused part-way, with F and I run in the pause, gives the full backward's gradients",
                "[model][layer_chunk]") {
  const gpt_config cfg = tiny();
  const auto batches = make_batches(3);
  chunk_runner a0(cfg, spec(0, 0, 1, true, false)), a1(cfg, spec(1, 1, 3, false, true));
  run_step({&a0, &a1}, batches, false);

  chunk_runner b0(cfg, spec(0, 0, 1, true, false)), b1(cfg, spec(1, 1, 3, false, true));
  const std::vector<chunk_runner*> chain{&b0, &b1};
  const auto forward = [&](int mb) {
    tensor_box act = box(batches[mb].inputs);
    for (auto* c : chain) act = c->forward(mb, act, box(batches[mb].targets), 1.0 / 3).output;
  };
  const auto input_grad = [&](int mb) {
    tensor_box grad;
    for (auto it = chain.rbegin(); it != chain.rend(); ++it) grad = (*it)->backward(mb, grad, true);
  };
  const auto always = [] { return true; };
  forward(0), forward(1);
  input_grad(0);
  for (auto* c : chain) CATCH_CHECK_FALSE(c->weight_grad_until(0, always));  // W0: its first product
  forward(2);  // in the pause
  input_grad(1);
  CATCH_CHECK(b0.pending_weight_grads() == 2);
  int calls = 0;
  for (auto* c : chain) {  // the rest of W0, a product per call
    for (bool done = false; !done; ++calls) done = c->weight_grad_until(0, always);
  }
  CATCH_CHECK(calls > 6);  // several products per chunk (qkv, proj, fc, proj: weight and bias)
  input_grad(2);
  for (int mb = 1; mb < 3; ++mb) {
    CATCH_CHECK(b1.weight_grad_until(mb, [] { return false; }));  // never asked to pause: whole
    b0.weight_grad(mb);
  }
  CATCH_CHECK(b0.pending_weight_grads() + b1.pending_weight_grads() == 0);
  for (int c = 0; c < 2; ++c) {
    const auto ref = by_name(c == 0 ? a0 : a1);
    for (const auto& [name, t] : chain[c]->named_parameters()) {
      CATCH_INFO("parameter " << name);
      CATCH_CHECK(torch::equal(unbox(t).grad(), ref.at(name).grad()));  // bit for bit
    }
  }
}

CATCH_TEST_CASE("activation checkpointing recomputes the same numbers", "[model][layer_chunk]") {
  const gpt_config cfg = tiny();
  const auto batches = make_batches(2);
  chunk_runner a0(cfg, spec(0, 0, 2, true, false)), a1(cfg, spec(1, 2, 3, false, true));
  chunk_runner b0(cfg, spec(0, 0, 2, true, false, true)), b1(cfg, spec(1, 2, 3, false, true, true));

  // Forward outputs match too.
  const auto b = batches[0];
  const auto fa = a0.forward(9, box(b.inputs), tensor_box(), 1.0);
  const auto fb = b0.forward(9, box(b.inputs), tensor_box(), 1.0);
  CATCH_CHECK(torch::equal(unbox(fa.output), unbox(fb.output)));
  CATCH_CHECK(b0.live_stashes() == 1);
  a0.backward(9, box(at::ones({2, 8, 16})), false);
  b0.backward(9, box(at::ones({2, 8, 16})), false);
  a0.zero_grad();
  b0.zero_grad();
  for (const auto& p : b0.named_parameters()) CATCH_CHECK_FALSE(unbox(p.second).grad().defined());

  const auto la = run_step({&a0, &a1}, batches, false);
  const auto lb = run_step({&b0, &b1}, batches, false);
  CATCH_CHECK(la == lb);
  for (int c = 0; c < 2; ++c) {
    const auto ref = by_name(c == 0 ? a0 : a1);
    for (const auto& [name, t] : (c == 0 ? b0 : b1).named_parameters()) {
      CATCH_INFO("parameter " << name);
      CATCH_CHECK(torch::equal(unbox(t).grad(), ref.at(name).grad()));
    }
  }

  // Checkpointing composes with the I/W split.
  chunk_runner s0(cfg, spec(0, 0, 2, true, false, true)), s1(cfg, spec(1, 2, 3, false, true, true));
  run_step({&s0, &s1}, batches, true);
  for (int c = 0; c < 2; ++c) {
    const auto ref = by_name(c == 0 ? a0 : a1);
    for (const auto& [name, t] : (c == 0 ? s0 : s1).named_parameters()) {
      CATCH_INFO("parameter " << name);
      CATCH_CHECK(torch::equal(unbox(t).grad(), ref.at(name).grad()));
    }
  }
}

CATCH_TEST_CASE("compute enables grad mode itself, whatever the calling thread's mode", "[model][layer_chunk]") {
  chunk_runner full(tiny(), spec(0, 0, 3, true, true));
  const auto b = make_batches(1)[0];
  std::thread([&] {
    torch::NoGradGuard caller_has_grad_off;
    full.forward(0, box(b.inputs), box(b.targets), 1.0);
    full.backward(0, tensor_box(), true);
    full.weight_grad(0);
  }).join();
  for (const auto& p : full.named_parameters()) {
    CATCH_INFO("parameter " << p.first);
    CATCH_CHECK(unbox(p.second).grad().defined());
  }
}

CATCH_TEST_CASE("the tied sum leaves a missing grad out and each holder its own storage", "[model][layer_chunk]") {
  const gpt_config cfg = tiny();
  chunk_runner c0(cfg, spec(0, 0, 1, true, false)), c2(cfg, spec(2, 2, 3, false, true));
  const at::Tensor e0 = unbox(c0.tied_parameters("tok_emb").at(0)), e2 = unbox(c2.tied_parameters("tok_emb").at(0));
  CATCH_CHECK(torch::equal(e0, e2));  // the copy starts equal
  // No holder has a gradient: none after the sum either (AdamW then leaves the weight alone).
  CATCH_CHECK_FALSE(actorpipe::tied_gradient_copies(c0, "tok_emb").at(0).defined());
  sync_tied(c0, c2);
  CATCH_CHECK_FALSE(e0.grad().defined());
  CATCH_CHECK_FALSE(e2.grad().defined());
  e2.mutable_grad() = at::full_like(e2, 3.0);
  sync_tied(c0, c2);
  CATCH_CHECK(torch::equal(e0.grad(), at::full_like(e0, 3.0)));
  CATCH_CHECK(torch::equal(e2.grad(), at::full_like(e2, 3.0)));
  e2.mutable_grad().add_(1.0);  // separate storage: the other is untouched
  CATCH_CHECK(torch::equal(e0.grad(), at::full_like(e0, 3.0)));
  CATCH_CHECK_THROWS_WITH(actorpipe::set_tied_gradient_sums(c0, "tok_emb", {{box(at::zeros({3}))}}),
                          Catch::Contains("tok_emb") && Catch::Contains("[3]"));
  chunk_runner middle(cfg, spec(1, 1, 2, false, false));
  CATCH_CHECK_THROWS_WITH(actorpipe::tied_gradient_copies(middle, "tok_emb"), Catch::Contains("nothing tied"));
}

CATCH_TEST_CASE("layer_chunk errors name the offending value", "[model][layer_chunk]") {
  const gpt_config cfg = tiny();
  auto layers = [](int begin, int end) {
    chunk_spec s;
    s.layer_begin = begin;
    s.layer_end = end;
    s.first = s.last = true;
    return s;
  };
  CATCH_CHECK_THROWS_AS(actorpipe::layer_chunk(gpt(cfg), layers(0, 7)), std::invalid_argument);
  CATCH_CHECK_THROWS_WITH(actorpipe::layer_chunk(gpt(cfg), layers(0, 7)), Catch::Contains("[0, 7)") && Catch::Contains("6 layers"));
  CATCH_CHECK_THROWS_WITH(actorpipe::layer_chunk(gpt(cfg), layers(-1, 2)), Catch::Contains("[-1, 2)"));
  CATCH_CHECK_THROWS_WITH(actorpipe::layer_chunk(gpt(cfg), layers(2, 2)), Catch::Contains("[2, 2)") && Catch::Contains("empty"));
  gpt_config odd = cfg;
  odd.heads = 3;
  CATCH_CHECK_THROWS_WITH(chunk_runner(odd, spec(0, 0, 3, true, true)), Catch::Contains("hidden=16, heads=3"));

  chunk_runner first(cfg, spec(0, 0, 1, true, false));
  CATCH_CHECK_THROWS_WITH(first.forward(0, box(at::zeros({2, 8, 16})), tensor_box(), 1.0),
                          Catch::Contains("int64 token ids") && Catch::Contains("[2, 8, 16]"));
  CATCH_CHECK_THROWS_WITH(first.forward(0, box(tokens(2, 8, 1).to(at::kInt)), tensor_box(), 1.0),
                          Catch::Contains("int64 token ids"));
  CATCH_CHECK_THROWS_WITH(first.forward(0, box(tokens(1, 9, 1)), tensor_box(), 1.0),
                          Catch::Contains("sequence length 9 exceeds the model's seq_len=8"));
  at::Tensor bad = tokens(2, 8, 1);
  bad[1][3] = 32;
  CATCH_CHECK_THROWS_WITH(first.forward(0, box(bad), tensor_box(), 1.0),
                          Catch::Contains("token id 32") && Catch::Contains("vocab=32"));
  bad[1][3] = -1;
  CATCH_CHECK_THROWS_WITH(first.forward(0, box(bad), tensor_box(), 1.0), Catch::Contains("token id -1"));
  CATCH_CHECK(first.live_stashes() == 0);  // rejected inputs leave nothing behind

  first.forward(4, box(tokens(2, 8, 1)), tensor_box(), 1.0);
  CATCH_CHECK_THROWS_WITH(first.forward(4, box(tokens(2, 8, 1)), tensor_box(), 1.0),
                          Catch::Contains("microbatch 4") && Catch::Contains("already stashed"));
  CATCH_CHECK_THROWS_WITH(first.backward(4, box(at::ones({2, 7, 16})), false),
                          Catch::Contains("grad_output must be [2, 8, 16]"));
  CATCH_CHECK(first.live_stashes() == 1);  // a rejected backward keeps the stash
  CATCH_CHECK_THROWS_WITH(first.backward(5, box(at::ones({2, 8, 16})), false),
                          Catch::Contains("microbatch 5") && Catch::Contains("nothing stashed"));
  CATCH_CHECK_THROWS_WITH(first.weight_grad(4), Catch::Contains("microbatch 4") && Catch::Contains("nothing deferred"));
  first.backward(4, box(at::ones({2, 8, 16})), false);
  CATCH_CHECK_THROWS_WITH(first.weight_grad(4), Catch::Contains("nothing deferred"));

  chunk_runner middle(cfg, spec(1, 1, 2, false, false));
  CATCH_CHECK_THROWS_WITH(middle.forward(0, box(tokens(2, 8, 1)), tensor_box(), 1.0),
                          Catch::Contains("floating-point activation") && Catch::Contains("[2, 8]"));
  CATCH_CHECK_THROWS_WITH(middle.forward(0, box(at::zeros({2, 8, 15})), tensor_box(), 1.0),
                          Catch::Contains("layer 'blocks.1'"));

  chunk_runner last(cfg, spec(2, 2, 3, false, true));
  CATCH_CHECK_THROWS_WITH(last.forward(0, box(at::zeros({2, 8, 16})), box(tokens(2, 7, 1)), 1.0),
                          Catch::Contains("targets"));
  CATCH_CHECK_THROWS_WITH(last.forward(0, box(at::zeros({2, 8, 16})), tensor_box(), 1.0), Catch::Contains("targets"));
  at::Tensor bad_targets = tokens(2, 8, 1);
  bad_targets[0][0] = 40;
  CATCH_CHECK_THROWS_WITH(last.forward(0, box(at::zeros({2, 8, 16})), box(bad_targets), 1.0),
                          Catch::Contains("token id 40"));
}
