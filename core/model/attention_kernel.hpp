// Causal self-attention, forward and backward, on actorpipe's own loops over float arrays:
// softmax(scale * q k^T, masked above the diagonal) v for every (sequence, head), reading q, k
// and v straight out of the fused qkv projection ([B, S, 3, heads, d]) and writing the output
// as [B, S, heads * d], so no permute or transpose copies run; blocks above the diagonal are
// skipped (about half the products). LibTorch 1.x has no fused attention: its batched GEMMs on
// 128 x 64 heads, the copies around them and the masked softmax take ~2.8x the time of this
// (one block of the GPT, F + B; LibTorch 2's fused kernel ~2.2x).
// No torch here: the model wraps it in an autograd Function.
//
// Every product is summed in a fixed order with fused multiply-add, one output element per
// vector lane, so the AVX-512 and AVX2 + FMA builds give the same bits; CPUs with neither (and
// head sizes that are not a multiple of 16) are not served (causal_attention_kernel_serves).
#pragma once

#include <cstdint>

namespace actorpipe {

struct attention_dims {
  std::int64_t batch = 0, seq = 0, heads = 0, head_dim = 0;
};

// The saved probabilities' row length: seq rounded up to 16 (zeros beyond each row's end).
std::int64_t attention_padded_seq(std::int64_t seq);

// Whether the loops run here: a CPU with AVX-512 or with AVX2 and FMA, head_dim a positive
// multiple of 16.
bool causal_attention_kernel_serves(const attention_dims& dims);

// The build of the loops this CPU runs: "AVX-512", "AVX2+FMA", or nullptr (none serves).
const char* causal_attention_kernel_isa();

// For the (sequence, head) pairs [first, end) of B * heads (pair = b * heads + head):
// out[b, i, head * d + c] and probs[pair, i, j] (the softmax, j < attention_padded_seq).
void causal_attention_forward(const float* qkv, float* out, float* probs, const attention_dims& dims, float scale,
                              std::int64_t first, std::int64_t end);

// The gradient of the same pairs' q, k and v parts of grad_qkv ([B, S, 3, heads, d]) from
// grad_out ([B, S, heads * d]) and the forward's probs.
void causal_attention_backward(const float* qkv, const float* probs, const float* grad_out, float* grad_qkv,
                               const attention_dims& dims, float scale, std::int64_t first, std::int64_t end);

}  // namespace actorpipe
