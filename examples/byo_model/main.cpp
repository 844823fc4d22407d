// Bring your own model: a small convolutional net on synthetic images, given to actorpipe as
// a list of layers, and a dynamic ordering policy of its own, both trained by the actorpipe
// command line this program links (train, simulate, launch):
//   byo_model train --model convnet --schedule backward-first --stages 2 --partition profile
#include <torch/torch.h>

#include <actorpipe/actorpipe.hpp>

#include <iostream>

namespace {

// 16x16 one-channel images: noise plus a bright square in one of the four quadrants; the
// label is the quadrant. A pure function of (seed, step, microbatch), as the runtime needs.
actorpipe::microbatch_tensors images(std::uint64_t seed, int batch, std::uint64_t step, int microbatch) {
  torch::NoGradGuard no_grad;
  auto gen = at::detail::createCPUGenerator(seed * 1000003ULL + step * 7919ULL + static_cast<std::uint64_t>(microbatch));
  at::Tensor x = at::normal(0.0, 0.5, {batch, 1, 16, 16}, gen, at::TensorOptions().dtype(at::kFloat));
  at::Tensor y = at::randint(0, 4, {batch}, gen, at::TensorOptions().dtype(at::kLong));
  for (int i = 0; i < batch; ++i) {
    const auto q = y[i].item<std::int64_t>();
    const auto r = (q / 2) * 8, c = (q % 2) * 8;
    x[i][0].slice(0, r + 2, r + 6).slice(1, c + 2, c + 6) += 1.5;
  }
  return {actorpipe::box(x), actorpipe::box(y)};
}

actorpipe::model_definition convnet(const actorpipe::train_options& options) {
  namespace nn = torch::nn;
  using actorpipe::make_layer;
  actorpipe::model_definition m;
  m.name = "convnet";
  m.seed = options.model.seed;
  m.default_partition = "parameters";
  auto conv = [](int in, int out, bool pool) {
    return [in, out, pool] {
      nn::Sequential s(nn::Conv2d(nn::Conv2dOptions(in, out, 3).padding(1)), nn::ReLU());
      if (pool) s->push_back(nn::MaxPool2d(2));
      return actorpipe::layer_module(s);
    };
  };
  m.layers.push_back(make_layer("conv1", conv(1, 8, false)));
  m.layers.push_back(make_layer("conv2", conv(8, 8, true)));   // 8x8
  m.layers.push_back(make_layer("conv3", conv(8, 16, true)));  // 4x4
  m.layers.push_back(make_layer("fc", [] {
    return actorpipe::layer_module(nn::Sequential(nn::Flatten(), nn::Linear(16 * 4 * 4, 32), nn::ReLU()));
  }));
  m.layers.push_back(make_layer("head", [] { return actorpipe::layer_module(nn::Linear(32, 4)); }));
  m.loss = [](const at::Tensor& logits, const at::Tensor& labels) { return torch::cross_entropy_loss(logits, labels); };
  const std::uint64_t seed = options.data_seed;
  const int batch = options.microbatch_size;
  m.data = [seed, batch](std::uint64_t step, int microbatch) { return images(seed, batch, step, microbatch); };
  m.data_description = "synthetic 16x16 images, 4 classes (the bright quadrant)";
  return m;
}

// A dynamic policy: run any ready backward first (the deepest chunk first: it frees memory
// soonest), else the next forward while the rank's first chunk holds fewer than `budget` live
// activations. Each virtual stage still runs its F and its B in microbatch order, so the
// gradients add up in the same order as under any built-in schedule.
class backward_first final : public actorpipe::rank_policy {
 public:
  backward_first(const actorpipe::placement& place, int microbatches, int rank, int budget)
      : chunks_(place.virtual_stages_of(rank)), M_(microbatches), budget_(budget) {
    reset();
  }
  void reset() override {
    next_f_.assign(chunks_.size(), 0);
    next_b_.assign(chunks_.size(), 0);
    left_ = static_cast<int>(chunks_.size()) * M_ * 2;
  }
  std::optional<actorpipe::action> next(const std::function<bool(const actorpipe::action&)>& ready) override {
    using actorpipe::op_kind;
    for (std::size_t k = chunks_.size(); k-- > 0;) {
      actorpipe::action b{op_kind::backward, chunks_[k], next_b_[k]};
      if (next_b_[k] < M_ && ready(b)) {
        ++next_b_[k];
        return b;
      }
    }
    for (std::size_t k = chunks_.size(); k-- > 0;) {
      actorpipe::action f{op_kind::forward, chunks_[k], next_f_[k]};
      const bool room = k > 0 || next_f_[0] - next_b_[0] < budget_;
      if (next_f_[k] < M_ && room && ready(f)) {
        ++next_f_[k];
        return f;
      }
    }
    return std::nullopt;
  }
  void completed(const actorpipe::action&) override { --left_; }
  bool finished() const override { return left_ == 0; }
  std::string waiting_for() const override {
    return "backward-first: next F" + std::to_string(next_f_[0]) + ", B" + std::to_string(next_b_[0]) + " on its first chunk";
  }
  std::vector<actorpipe::action> all_actions() const override {
    std::vector<actorpipe::action> out;
    for (int v : chunks_)
      for (int m = 0; m < M_; ++m) {
        out.push_back({actorpipe::op_kind::forward, v, m});
        out.push_back({actorpipe::op_kind::backward, v, m});
      }
    return out;
  }

 private:
  std::vector<int> chunks_;  // the rank's virtual stages
  int M_, budget_;
  std::vector<int> next_f_, next_b_;
  int left_ = 0;
};

}  // namespace

int main(int argc, char** argv) {
  actorpipe::report_crashes();  // a crash says so, with its frames, as the actorpipe binary's does
  actorpipe::ensure_best_blas_kernels(argv);  // the best BLAS kernels, before anything else (may restart once)
  actorpipe::register_model("convnet", convnet, "a small convolutional net on synthetic images");
  actorpipe::register_policy(
      "backward-first",
      [](const actorpipe::policy_request& r) {
        // --budget, or as many live activations as 1F1B holds: stages - rank
        const int budget = r.budget > 0 ? r.budget : r.place.ranks - r.rank;
        return std::make_unique<backward_first>(r.place, r.microbatches, r.rank, budget);
      },
      "any ready backward first, then forwards while the rank holds fewer than --budget activations");
  return actorpipe::cli_main(argc, argv, std::cout, std::cerr);
}
