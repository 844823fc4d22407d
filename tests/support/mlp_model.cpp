// The tests' MLP through the model API (what a user writes: modules, a loss, data).
#include "tests/support/mlp_model.hpp"
#include "tests/support/test_models.hpp"

#include "core/model/tensor_box_torch.hpp"

namespace actorpipe::testing {
namespace {

// A layer that runs its linear `repeats` times (same result, more time): known unequal costs.
struct heavy_linear : torch::nn::Module {
  heavy_linear(int width, int repeats) : repeats(repeats) { fc = register_module("fc", torch::nn::Linear(width, width)); }
  at::Tensor forward(at::Tensor x) {
    at::Tensor y = fc(x);
    for (int i = 1; i < repeats; ++i) y = (y + fc(x)) * 0.5;
    return torch::tanh(y);
  }
  torch::nn::Linear fc{nullptr};
  int repeats;
};

struct counting_linear : torch::nn::Module {
  counting_linear(int width, bool through_data, int from_call) : through_data(through_data), from_call(from_call) {
    fc = register_module("fc", torch::nn::Linear(width, width));
    count = register_buffer("count", torch::zeros({}, torch::kLong));
  }
  at::Tensor forward(const at::Tensor& x) {
    if (is_training() && ++calls >= from_call) {
      torch::NoGradGuard no_grad;
      if (through_data) count.data().add_(1);
      else count.add_(1);
    }
    return torch::tanh(fc(x));
  }
  torch::nn::Linear fc{nullptr};
  at::Tensor count;
  bool through_data;
  int from_call, calls = 0;
};

// A width-wide bias with a parameter of no elements beside it (shape [0]).
struct bias_with_empty : torch::nn::Module {
  explicit bias_with_empty(int width) {
    b = register_parameter("b", torch::randn({width}));
    none = register_parameter("none", torch::zeros({0}));
  }
  at::Tensor b, none;
};

// in -> squeeze -> expand -> out, cut by counts:2,2 right after squeeze, whose output is what
// crosses: `cut` "empty" (a [B, 0] tensor), "scalar" (0-d) or "nine-dims" (9 dimensions, more
// than a transport frame holds). expand holds a parameter of no elements.
model_definition odd_cut_model(const train_options& options, const std::string& cut) {
  model_definition d = mlp_model(options);
  d.name = "odd-cut-" + cut;
  const mlp_options m;
  const int f = m.features, w = m.width, batch = options.microbatch_size;
  d.layers.clear();
  d.layers.push_back(make_layer("in", [f, w] {
    return layer_module(torch::nn::Sequential(torch::nn::Linear(f, w), torch::nn::Tanh()));
  }));
  layer_spec squeeze = make_layer("squeeze", [] { return layer_module(torch::nn::Identity()); });
  layer_spec expand = make_layer("expand", [w] { return layer_module(std::make_shared<bias_with_empty>(w)); });
  if (cut == "empty") {
    squeeze.forward = [](layer_module&, const at::Tensor& x) { return x.narrow(1, 0, 0); };
    expand.forward = [batch, w](layer_module& module, const at::Tensor& x) {
      auto& e = module.as<bias_with_empty>();
      return torch::tanh(e.b.expand({batch, w}) + x.sum(1, true)) + e.none.sum();
    };
  } else if (cut == "scalar") {
    squeeze.forward = [](layer_module&, const at::Tensor& x) { return x.pow(2).mean(); };
    expand.forward = [batch, w](layer_module& module, const at::Tensor& x) {
      auto& e = module.as<bias_with_empty>();
      return torch::tanh(e.b.expand({batch, w}) * x) + e.none.sum();
    };
  } else {
    squeeze.forward = [batch, w](layer_module&, const at::Tensor& x) { return x.reshape({batch, w, 1, 1, 1, 1, 1, 1, 1}); };
    expand.forward = [batch, w](layer_module& module, const at::Tensor& x) {
      auto& e = module.as<bias_with_empty>();
      return torch::tanh(x.reshape({batch, w}) + e.b) + e.none.sum();
    };
  }
  d.layers.push_back(std::move(squeeze));
  d.layers.push_back(std::move(expand));
  d.layers.push_back(make_layer("out", [w, f] { return layer_module(torch::nn::Linear(w, f)); }));
  return d;
}

}  // namespace

layer_module counting_linear_module(int width, bool through_data, int from_call) {
  return layer_module(std::make_shared<counting_linear>(width, through_data, from_call));
}

model_definition mlp_model(const train_options& options, const mlp_options& m) {
  model_definition d;
  d.name = "mlp";
  d.seed = options.model.seed;
  d.default_partition = "uniform";
  const int f = m.features, w = m.width;
  auto block = [](int in, int out) {
    return [in, out] {
      return layer_module(torch::nn::Sequential(torch::nn::Linear(in, out), torch::nn::Tanh()));
    };
  };
  if (m.batch_norm)
    d.layers.push_back(make_layer("in", [f, w] {
      return layer_module(torch::nn::Sequential(torch::nn::Linear(f, w), torch::nn::BatchNorm1d(w), torch::nn::Tanh()));
    }));
  else
    d.layers.push_back(make_layer("in", block(f, w)));
  auto hidden = [&](const std::string& name) {
    const int repeats = m.heavy.count(name) ? m.heavy.at(name) : 1;
    return make_layer(name, [w, repeats] { return layer_module(std::make_shared<heavy_linear>(w, repeats)); });
  };
  d.layers.push_back(hidden("h0"));
  layer_spec a = make_layer("tied_a", [w] { return layer_module(torch::nn::Linear(w, w)); });
  layer_spec b = make_layer("tied_b", [w] { return layer_module(torch::nn::Linear(w, w)); });
  if (m.tied) {
    a.tie_key = b.tie_key = "shared";
    // the second use: the same weight, transposed, no bias (as an LM head uses an embedding)
    b.build = nullptr;
    if (m.mismatched_tie) b.build = [w, f] { return layer_module(torch::nn::Linear(w, f)); };
    b.forward = [](layer_module& module, const at::Tensor& x) {
      auto& lin = module.as<torch::nn::LinearImpl>();
      return torch::tanh(x.matmul(lin.weight));
    };
    a.tied_parameters = {"weight"};
  }
  a.forward = [](layer_module& module, const at::Tensor& x) { return torch::tanh(module.forward(x)); };
  d.layers.push_back(std::move(a));
  d.layers.push_back(hidden("h1"));
  d.layers.push_back(hidden("h2"));
  d.layers.push_back(hidden("h3"));
  d.layers.push_back(std::move(b));
  d.layers.push_back(make_layer("out", [w, f] { return layer_module(torch::nn::Linear(w, f)); }));
  d.loss = [](const at::Tensor& out, const at::Tensor& y) { return torch::mse_loss(out, y); };

  // Data: x ~ N(0, 1) from (seed, step, microbatch); y = sin(x A) for a fixed A.
  const std::uint64_t seed = options.data_seed;
  const int batch = options.microbatch_size;
  d.data = [seed, batch, f](std::uint64_t step, int microbatch) {
    torch::NoGradGuard no_grad;
    auto gen = at::detail::createCPUGenerator(seed * 1000003ULL + step * 7919ULL + static_cast<std::uint64_t>(microbatch));
    at::Tensor x = at::normal(0.0, 1.0, {batch, f}, gen, at::TensorOptions().dtype(at::kFloat));
    auto fixed = at::detail::createCPUGenerator(seed + 17);
    at::Tensor a = at::normal(0.0, 1.0 / std::sqrt(double(f)), {f, f}, fixed, at::TensorOptions().dtype(at::kFloat));
    return microbatch_tensors{box(x), box(torch::sin(x.matmul(a)))};
  };
  d.data_description = "synthetic regression y = sin(x A), " + std::to_string(f) + " features";
  return d;
}

void register_test_models() {
  mlp_options bn;
  bn.batch_norm = true;
  register_model("test-mlp-bn", [bn](const train_options& o) { return mlp_model(o, bn); },
                 "the tests' MLP with a BatchNorm in its first layer");
  register_model(
      "test-mlp-no-path",
      [](const train_options& o) {
        model_definition m = mlp_model(o);
        m.layers[3].forward = [](layer_module& module, const at::Tensor& x) { return module.forward(at::zeros_like(x)); };
        return m;
      },
      "the tests' MLP whose h1 ignores its input (nothing before it on the loss's path but a tie)");
  register_model(
      "test-mlp-same-prefix",
      [](const train_options& o) {
        model_definition m = mlp_model(o);
        for (int i : {3, 4}) {  // h1 and h2, on two stages: each process sees no clash of its own
          m.layers[i].has_param_prefix = true;
          m.layers[i].param_prefix = "p.";
        }
        return m;
      },
      "the tests' MLP whose h1 and h2 give their parameters the same names");
  register_model(
      "test-mlp-counting",
      [](const train_options& o) {
        model_definition m = mlp_model(o);
        m.layers[1].build = [] { return counting_linear_module(mlp_options().width); };
        return m;
      },
      "the tests' MLP whose h0 counts its training forwards in a buffer");
  for (const std::string cut : {"empty", "scalar", "nine-dims"})
    register_model(
        "test-cut-" + cut, [cut](const train_options& o) { return odd_cut_model(o, cut); },
        "in, squeeze, expand, out: with counts:2,2 the cut carries a tensor " +
            std::string(cut == "empty" ? "of no elements" : cut == "scalar" ? "of no dimensions" : "of 9 dimensions") +
            "; expand holds a parameter of no elements");
}

}  // namespace actorpipe::testing
