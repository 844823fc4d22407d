// Tests for the GPT's causal attention on actorpipe's own loops (attention_kernel) through its
// autograd wrapper: outputs and qkv gradients against the same attention in double on
// LibTorch's ops, bits that do not depend on the intra-op thread count, and the shapes the
// loops do not serve falling back to LibTorch's ops.
#include "core/model/attention_kernel.hpp"
#include "core/model/gpt_modules.hpp"

#include <cmath>
#include <limits>

#include <ATen/Parallel.h>

#include <catch2/catch.hpp>

namespace {

using actorpipe::attention_dims;
using actorpipe::causal_attention;

at::Tensor randn(at::IntArrayRef shape, std::uint64_t seed) {
  return at::normal(0.0, 1.0, shape, at::detail::createCPUGenerator(seed));
}

// softmax(q k^T / sqrt(d), masked above the diagonal) v from qkv [B, S, 3H], on LibTorch's ops.
at::Tensor plain_attention(const at::Tensor& qkv, int heads) {
  const auto b = qkv.size(0), s = qkv.size(1), h = qkv.size(2) / 3, d = h / heads;
  auto per_head = [&](const at::Tensor& t) { return t.reshape({b, s, heads, d}).transpose(1, 2); };
  const auto parts = qkv.split(h, -1);
  const at::Tensor scores = per_head(parts[0]).matmul(per_head(parts[1]).transpose(-1, -2)) / std::sqrt(double(d));
  const at::Tensor mask = at::ones({s, s}, at::kBool).triu(1);
  const at::Tensor p = scores.masked_fill(mask, -std::numeric_limits<double>::infinity()).softmax(-1);
  return p.matmul(per_head(parts[2])).transpose(1, 2).reshape({b, s, h});
}

double relative_error(const at::Tensor& got, const at::Tensor& want) {
  return (got.to(at::kDouble) - want).abs().max().item<double>() / want.abs().max().item<double>();
}

}  // namespace

CATCH_TEST_CASE("causal attention on actorpipe's loops: outputs and qkv gradients against LibTorch's ops in double",
                "[model][attention]") {
  struct shape {
    int batch, seq, heads, head_dim;
  };
  for (const shape sh : {shape{2, 37, 3, 16}, shape{4, 128, 4, 64}, shape{1, 1, 2, 32}, shape{3, 16, 1, 48}}) {
    CATCH_CAPTURE(sh.batch, sh.seq, sh.heads, sh.head_dim);
    const attention_dims dims{sh.batch, sh.seq, sh.heads, sh.head_dim};
    CATCH_REQUIRE(actorpipe::causal_attention_kernel_serves(dims));  // every CPU these tests run on has AVX2 + FMA
    const int H = sh.heads * sh.head_dim;
    const at::Tensor x = randn({sh.batch, sh.seq, 3 * H}, 11 + sh.seq);
    const at::Tensor g = randn({sh.batch, sh.seq, H}, 12 + sh.seq);
    at::Tensor qkv = x.clone().requires_grad_(true);
    at::Tensor out = causal_attention(qkv, sh.heads);
    out.backward(g);
    at::Tensor ref_in = x.to(at::kDouble).requires_grad_(true);
    at::Tensor ref = plain_attention(ref_in, sh.heads);
    ref.backward(g.to(at::kDouble));
    CATCH_CHECK(out.sizes() == ref.sizes());
    CATCH_CHECK(relative_error(out, ref) < 2e-6);
    CATCH_CHECK(relative_error(qkv.grad(), ref_in.grad()) < 2e-6);
  }
}

CATCH_TEST_CASE("causal attention on actorpipe's loops gives the same bits on 1 and 2 intra-op threads",
                "[model][attention]") {
  CATCH_CHECK(at::get_num_threads() == 1);  // every model test starts on 1 (one_thread_listener.cpp)
  const at::Tensor x = randn({3, 50, 3 * 128}, 21);
  const at::Tensor g = randn({3, 50, 128}, 22);
  auto run = [&](int threads) {
    const int before = at::get_num_threads();
    at::set_num_threads(threads);
    at::Tensor qkv = x.clone().requires_grad_(true);
    at::Tensor out = causal_attention(qkv, 4);
    out.backward(g);
    at::set_num_threads(before);
    return std::make_pair(out.detach(), qkv.grad());
  };
  const auto one = run(1), two = run(2);
  CATCH_CHECK(torch::equal(one.first, two.first));
  CATCH_CHECK(torch::equal(one.second, two.second));
}

CATCH_TEST_CASE("causal attention the loops do not serve (head size 8, double) runs on LibTorch's ops, same values",
                "[model][attention]") {
  CATCH_CHECK_FALSE(actorpipe::causal_attention_kernel_serves({2, 20, 4, 8}));
  CATCH_CHECK_FALSE(actorpipe::causal_attention_kernel_serves({2, 20, 4, 0}));
  for (const auto type : {at::kFloat, at::kDouble}) {
    const int heads = type == at::kFloat ? 4 : 2;  // head size 8 (float), 16 in double
    const at::Tensor x = randn({2, 20, 96}, 31).to(type);
    at::Tensor qkv = x.clone().requires_grad_(true);
    at::Tensor out = causal_attention(qkv, heads);
    out.sum().backward();
    at::Tensor ref_in = x.to(at::kDouble).requires_grad_(true);
    at::Tensor ref = plain_attention(ref_in, heads);
    ref.sum().backward();
    CATCH_CHECK(relative_error(out, ref) < (type == at::kFloat ? 2e-6 : 1e-12));
    CATCH_CHECK(relative_error(qkv.grad(), ref_in.grad()) < (type == at::kFloat ? 2e-6 : 1e-12));
  }
}

CATCH_TEST_CASE("causal_attention_libtorch (LibTorch's ops alone) gives the same values on a shape the loops serve",
                "[model][attention]") {
  const at::Tensor x = randn({4, 128, 3 * 256}, 41);
  const at::Tensor g = randn({4, 128, 256}, 42);
  at::Tensor qkv = x.clone().requires_grad_(true);
  at::Tensor out = actorpipe::causal_attention_libtorch(qkv, 4);
  out.backward(g);
  at::Tensor ref_in = x.to(at::kDouble).requires_grad_(true);
  at::Tensor ref = plain_attention(ref_in, 4);
  ref.backward(g.to(at::kDouble));
  CATCH_CHECK(relative_error(out, ref) < 2e-6);
  CATCH_CHECK(relative_error(qkv.grad(), ref_in.grad()) < 2e-6);
}
