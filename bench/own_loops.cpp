// Benchmark: actorpipe's own loops against LibTorch's ops for the same work, on one thread, on
// the GPT's shapes: the causal attention of one block (qkv [B, S, 3H] -> [B, S, H]) and the
// GELU of its MLP ([B * S, 4H]), forward then backward through autograd, as the model runs
// them. Each repetition runs both sides back to back (in turn first), each ratio is taken
// within the repetition, then the median: above 1 means ours is faster. The first line names
// the build of the loops this CPU runs (AVX2 CPUs once ran a build of the attention loops at a
// quarter of LibTorch's speed, with the right bits: only a speed check shows that).
//
//   bench/own_loops [--hidden 256 --seq-len 128 --microbatch-size 4] [--repeat 21]
#include <chrono>
#include <cstdio>
#include <functional>
#include <vector>

#include "bench/gpt_bench.hpp"
#include "core/median.hpp"
#include "core/model/attention_kernel.hpp"
#include "core/model/gpt_modules.hpp"

using namespace actorpipe;

namespace {

using bench::clock_type;
using bench::seconds_since;

struct pass_time {
  double forward = 0, backward = 0;
};

// One forward of f on a fresh leaf copy of x, then backward with grad: seconds of each.
pass_time time_pass(const std::function<at::Tensor(const at::Tensor&)>& f, const at::Tensor& x, const at::Tensor& grad) {
  const at::Tensor leaf = x.detach().clone().requires_grad_(true);
  pass_time t;
  auto t0 = clock_type::now();
  const at::Tensor y = f(leaf);
  t.forward = seconds_since(t0);
  t0 = clock_type::now();
  y.backward(grad);
  t.backward = seconds_since(t0);
  return t;
}

struct comparison {
  const char* name;
  std::function<at::Tensor(const at::Tensor&)> ours, libtorch;
  at::Tensor input, grad;
  std::vector<double> ours_f{}, ours_b{}, theirs_f{}, theirs_b{}, ratio_f{}, ratio_b{}, ratio_all{};
};

int bench_main(int argc, char** argv) {
  ensure_best_blas_kernels(argv);
  train_options o = bench::gpt_bench_options();
  int repeat = 21;
  bench::bench_flags accepts{false, false, &repeat};
  accepts.layers = false;  // one block's attention and GELU: --layers was taken and did nothing
  if (!bench::parse_gpt_bench_flags(argc, argv, o, "own_loops", accepts)) return 2;
  const int heads = o.model.heads, hidden = o.model.hidden;
  if (hidden % heads != 0) {
    std::fprintf(stderr, "own_loops: --hidden %d is not a multiple of the %d heads\n", hidden, heads);
    return 2;
  }
  set_compute_threads(1);
  torch::manual_seed(1);
  bench::print_what_it_runs_on();
  const std::int64_t B = o.microbatch_size, S = o.model.seq_len;
  std::printf("one block of a GPT (hidden %d, %d heads of %d, sequence %lld, microbatch %lld); one thread; %d "
              "repetitions after one warm-up, forward then backward through autograd\n",
              hidden, heads, hidden / heads, static_cast<long long>(S), static_cast<long long>(B), repeat);
  if (!causal_attention_kernel_serves({B, S, heads, hidden / heads}))
    std::printf("(the attention loops do not serve this CPU or head size: both attention columns run LibTorch's ops)\n");

  std::vector<comparison> cases;
  cases.push_back({"causal attention", [heads](const at::Tensor& x) { return causal_attention(x, heads); },
                   [heads](const at::Tensor& x) { return causal_attention_libtorch(x, heads); },
                   torch::randn({B, S, 3 * hidden}), torch::randn({B, S, hidden})});
  cases.push_back({"GELU (tanh)", [](const at::Tensor& x) { return gelu_tanh(x); },
                   [](const at::Tensor& x) { return at::gelu(x, "tanh"); }, torch::randn({B * S, 4 * hidden}),
                   torch::randn({B * S, 4 * hidden})});

  for (int k = 0; k <= repeat; ++k) {
    for (auto& c : cases) {
      pass_time ours, theirs;
      if (k % 2) {
        theirs = time_pass(c.libtorch, c.input, c.grad);
        ours = time_pass(c.ours, c.input, c.grad);
      } else {
        ours = time_pass(c.ours, c.input, c.grad);
        theirs = time_pass(c.libtorch, c.input, c.grad);
      }
      if (k == 0) continue;  // first-touch allocations
      c.ours_f.push_back(ours.forward);
      c.ours_b.push_back(ours.backward);
      c.theirs_f.push_back(theirs.forward);
      c.theirs_b.push_back(theirs.backward);
      c.ratio_f.push_back(theirs.forward / ours.forward);
      c.ratio_b.push_back(theirs.backward / ours.backward);
      c.ratio_all.push_back((theirs.forward + theirs.backward) / (ours.forward + ours.backward));
    }
  }
  std::printf("\nms (median); speed-up = LibTorch's time / ours, within each repetition, then the median:\n\n");
  std::printf("| loops | ours F | ours B | LibTorch F | LibTorch B | speed-up F | speed-up B | speed-up F + B |\n");
  std::printf("|---|---|---|---|---|---|---|---|\n");
  for (const auto& c : cases)
    std::printf("| %s | %.2f | %.2f | %.2f | %.2f | %.2fx | %.2fx | %.2fx |\n", c.name, 1e3 * median(c.ours_f),
                1e3 * median(c.ours_b), 1e3 * median(c.theirs_f), 1e3 * median(c.theirs_b), median(c.ratio_f),
                median(c.ratio_b), median(c.ratio_all));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return bench::run_reporting_errors("own_loops", [&] { return bench_main(argc, argv); });
}
