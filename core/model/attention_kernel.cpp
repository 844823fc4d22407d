// Causal self-attention loops: see attention_kernel.hpp. Built with -O3 -ffp-contract=fast
// (core/CMakeLists.txt): every `acc + a * b` below becomes one fused multiply-add in both
// served builds (AVX-512 and AVX2 + FMA), so they round alike.
#include "core/model/attention_kernel.hpp"

// The helpers below pass 64-byte vectors by value, always inlined: no call ABI involved.
#pragma GCC diagnostic ignored "-Wpsabi"

#include <cstring>
#include <limits>
#include <vector>

#include "core/model/exp_kernel.hpp"
#include "core/simd_clones.hpp"

namespace actorpipe {
namespace {

// 16 floats: one AVX-512 register, two AVX2 ones. Each lane is one output element, so the
// arithmetic per element does not depend on the vector width.
typedef float v16 __attribute__((vector_size(64)));
typedef std::int32_t i16 __attribute__((vector_size(64)));
constexpr std::int64_t lanes = 16;

#define ACTORPIPE_INLINE inline __attribute__((always_inline))

ACTORPIPE_INLINE v16 load(const float* p) {
  v16 v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
ACTORPIPE_INLINE void store(float* p, v16 v) { std::memcpy(p, &v, sizeof v); }
// A scalar operand of a vector operation is broadcast to every lane (GCC); hot loops use that
// directly, these name it elsewhere.
ACTORPIPE_INLINE v16 splat(float x) { return v16{} + x; }
ACTORPIPE_INLINE i16 isplat(std::int32_t x) { return i16{} + x; }

// Lanes added in one fixed order.
ACTORPIPE_INLINE float sum_lanes(v16 v) {
  float a[lanes];
  std::memcpy(a, &v, sizeof a);
  float s8[8], s4[4];
  for (int l = 0; l < 8; ++l) s8[l] = a[l] + a[l + 8];
  for (int l = 0; l < 4; ++l) s4[l] = s8[l] + s8[l + 4];
  return (s4[0] + s4[2]) + (s4[1] + s4[3]);
}
ACTORPIPE_INLINE float max_lanes(v16 v) {
  float a[lanes];
  std::memcpy(a, &v, sizeof a);
  float m = a[0];
  for (int l = 1; l < lanes; ++l) m = a[l] > m ? a[l] : m;
  return m;
}

// e^x for x <= 0 lane-wise (-inf gives 0): exp_kernel.hpp's.
ACTORPIPE_INLINE v16 exp_nonpositive(v16 x) {
  return actorpipe::exp_nonpositive(x, [](v16 n) __attribute__((always_inline)) {
    const i16 bits = (__builtin_convertvector(n, i16) + isplat(127)) << 23;
    v16 f;
    std::memcpy(&f, &bits, sizeof f);
    return f;
  });
}

// C[i0 + r][j] = sum_k A[(i0 + r) * a_stride + k] * Bt[k * ld + j], k < depth in order, for
// r < R and j < j_end (a multiple of 16): the scores (q k^T) and dP (dO v^T) row tiles.
template <int R>
ACTORPIPE_INLINE void product_rows(const float* A, std::int64_t a_stride, const float* Bt, std::int64_t ld,
                                   std::int64_t depth, std::int64_t i0, std::int64_t j_end, float* C) {
  std::int64_t j = 0;
  for (; j + 2 * lanes <= j_end; j += 2 * lanes) {
    v16 a0[R], a1[R];
    for (int r = 0; r < R; ++r) a0[r] = a1[r] = splat(0.0f);
    for (std::int64_t k = 0; k < depth; ++k) {
      const v16 b0 = load(Bt + k * ld + j), b1 = load(Bt + k * ld + j + lanes);
      for (int r = 0; r < R; ++r) {
        const float a = A[(i0 + r) * a_stride + k];
        a0[r] = a0[r] + a * b0;
        a1[r] = a1[r] + a * b1;
      }
    }
    for (int r = 0; r < R; ++r) {
      store(C + (i0 + r) * ld + j, a0[r]);
      store(C + (i0 + r) * ld + j + lanes, a1[r]);
    }
  }
  for (; j < j_end; j += lanes) {
    v16 a0[R];
    for (int r = 0; r < R; ++r) a0[r] = splat(0.0f);
    for (std::int64_t k = 0; k < depth; ++k) {
      const v16 b0 = load(Bt + k * ld + j);
      for (int r = 0; r < R; ++r) a0[r] = a0[r] + A[(i0 + r) * a_stride + k] * b0;
    }
    for (int r = 0; r < R; ++r) store(C + (i0 + r) * ld + j, a0[r]);
  }
}

// C[r * c_stride + c] = sum_t W[r * w_r + t * w_t] * B[t * b_stride + c], t from t_begin to
// t_end in order, for r < R and c < width (a multiple of 16): a weighted sum of rows (p v,
// dS k, dS^T q, p^T dO). Weights outside the causal triangle are zeros, which add nothing.
template <int R, int NV>
ACTORPIPE_INLINE void weighted_rows_block(const float* W, std::int64_t w_r, std::int64_t w_t, const float* B,
                                          std::int64_t b_stride, std::int64_t t_begin, std::int64_t t_end, float* C,
                                          std::int64_t c_stride) {
  v16 acc[R][NV];
  for (int r = 0; r < R; ++r)
    for (int v = 0; v < NV; ++v) acc[r][v] = splat(0.0f);
  for (std::int64_t t = t_begin; t < t_end; ++t) {
    float w[R];
    for (int r = 0; r < R; ++r) w[r] = W[r * w_r + t * w_t];
    for (int v = 0; v < NV; ++v) {
      const v16 b = load(B + t * b_stride + v * lanes);
      for (int r = 0; r < R; ++r) acc[r][v] = acc[r][v] + w[r] * b;
    }
  }
  for (int r = 0; r < R; ++r)
    for (int v = 0; v < NV; ++v) store(C + r * c_stride + v * lanes, acc[r][v]);
}

template <int R>
ACTORPIPE_INLINE void weighted_rows(const float* W, std::int64_t w_r, std::int64_t w_t, const float* B,
                                    std::int64_t b_stride, std::int64_t t_begin, std::int64_t t_end, float* C,
                                    std::int64_t c_stride, std::int64_t width) {
  std::int64_t c = 0;
  for (; c + 4 * lanes <= width; c += 4 * lanes)
    weighted_rows_block<R, 4>(W, w_r, w_t, B + c, b_stride, t_begin, t_end, C + c, c_stride);
  for (; c < width; c += lanes) weighted_rows_block<R, 1>(W, w_r, w_t, B + c, b_stride, t_begin, t_end, C + c, c_stride);
}

// Runs f.template tile<R>(i0) over row tiles of 4 (and the last, shorter one).
template <class F>
ACTORPIPE_INLINE void over_row_tiles(std::int64_t rows, const F& f) {
  std::int64_t i0 = 0;
  for (; i0 + 4 <= rows; i0 += 4) f.template tile<4>(i0);
  switch (rows - i0) {
    case 3: f.template tile<3>(i0); break;
    case 2: f.template tile<2>(i0); break;
    case 1: f.template tile<1>(i0); break;
    default: break;
  }
}

std::int64_t round_up(std::int64_t n) { return (n + lanes - 1) / lanes * lanes; }

struct pair_view {
  const float* q;  // row i at q + i * row; k at q + H, v at q + 2H
  std::int64_t S, Sp, d, H, row;
  std::int64_t io;  // where this pair's head starts in out and grad_out ([B, S, H])
};

pair_view view_of(const float* qkv, const attention_dims& dims, std::int64_t pair) {
  const std::int64_t b = pair / dims.heads, head = pair % dims.heads;
  const std::int64_t H = dims.heads * dims.head_dim;
  return {qkv + b * dims.seq * 3 * H + head * dims.head_dim, dims.seq, round_up(dims.seq), dims.head_dim, H, 3 * H,
          b * dims.seq * H + head * dims.head_dim};
}

// Bt[c * Sp + j] = rows[j * row + c] for j < S, 0 up to Sp.
void transpose_rows(const float* rows, std::int64_t row, const pair_view& p, float* Bt) {
  for (std::int64_t j = 0; j < p.S; ++j) {
    const float* in = rows + j * row;
    for (std::int64_t c = 0; c < p.d; ++c) Bt[c * p.Sp + j] = in[c];
  }
  for (std::int64_t c = 0; c < p.d; ++c)
    for (std::int64_t j = p.S; j < p.Sp; ++j) Bt[c * p.Sp + j] = 0.0f;
}

// One (sequence, head) forward, by row tiles: scores, the row softmax in place (zeros after
// the diagonal), then the output rows.
struct forward_tiles {
  const pair_view& p;
  const float* v;
  float* P;
  float* o;
  float scale;
  template <int R>
  ACTORPIPE_INLINE void tile(std::int64_t i0) const {
    product_rows<R>(p.q, p.row, kt, p.Sp, p.d, i0, round_up(i0 + R), P);  // raw scores
    for (int r = 0; r < R; ++r) {
      const std::int64_t i = i0 + r;
      float* row = P + i * p.Sp;
      const std::int64_t blocks = i / lanes + 1;
      // The scores after the diagonal in row i's last block: -inf, which e^x makes 0.
      for (std::int64_t j = i + 1; j < blocks * lanes; ++j) row[j] = -std::numeric_limits<float>::infinity();
      v16 mv = load(row) * scale;
      for (std::int64_t bk = 1; bk < blocks; ++bk) {
        const v16 x = load(row + bk * lanes) * scale;
        mv = x > mv ? x : mv;
      }
      const float m = max_lanes(mv);
      v16 sv = splat(0.0f);
      for (std::int64_t bk = 0; bk < blocks; ++bk) {
        const v16 e = exp_nonpositive(load(row + bk * lanes) * scale - m);
        store(row + bk * lanes, e);
        sv = sv + e;
      }
      const float inv = 1.0f / sum_lanes(sv);
      for (std::int64_t bk = 0; bk < blocks; ++bk) store(row + bk * lanes, load(row + bk * lanes) * inv);
      for (std::int64_t bk = blocks; bk * lanes < p.Sp; ++bk) store(row + bk * lanes, splat(0.0f));
    }
    weighted_rows<R>(P + i0 * p.Sp, p.Sp, 1, v, p.row, 0, i0 + R, o + i0 * p.H, p.H, p.d);
  }
  const float* kt;
};

// Backward by query rows: dP = dO v^T, dS = P (dP - rowsum(P dP)) scale (zeros after the
// diagonal), dq rows = dS rows . k.
struct backward_query_tiles {
  const pair_view& p;
  const float* k;
  const float* P;
  const float* dO;
  const float* vt;
  float* dS;
  float* dq;
  float scale;
  template <int R>
  ACTORPIPE_INLINE void tile(std::int64_t i0) const {
    product_rows<R>(dO, p.H, vt, p.Sp, p.d, i0, round_up(i0 + R), dS);
    for (int r = 0; r < R; ++r) {
      const std::int64_t i = i0 + r;
      float* row = dS + i * p.Sp;
      const float* pr = P + i * p.Sp;  // zeros after the diagonal
      const std::int64_t blocks = i / lanes + 1;
      for (std::int64_t j = i + 1; j < blocks * lanes; ++j) row[j] = 0.0f;
      v16 acc = splat(0.0f);
      for (std::int64_t bk = 0; bk < blocks; ++bk) acc = acc + load(pr + bk * lanes) * load(row + bk * lanes);
      const float D = sum_lanes(acc);
      for (std::int64_t bk = 0; bk < blocks; ++bk)
        store(row + bk * lanes, (load(pr + bk * lanes) * (load(row + bk * lanes) - D)) * scale);
      for (std::int64_t bk = blocks; bk * lanes < p.Sp; ++bk) store(row + bk * lanes, splat(0.0f));
    }
    weighted_rows<R>(dS + i0 * p.Sp, p.Sp, 1, k, p.row, 0, i0 + R, dq + i0 * p.row, p.row, p.d);
  }
};

// Backward by key rows j: dk_j = sum_i dS[i][j] q_i, dv_j = sum_i P[i][j] dO_i, over i >= j.
struct backward_key_tiles {
  const pair_view& p;
  const float* P;
  const float* dO;
  const float* dS;
  float* dk;
  float* dv;
  template <int R>
  ACTORPIPE_INLINE void tile(std::int64_t j0) const {
    weighted_rows<R>(dS + j0, 1, p.Sp, p.q, p.row, j0, p.S, dk + j0 * p.row, p.row, p.d);
    weighted_rows<R>(P + j0, 1, p.Sp, dO, p.H, j0, p.S, dv + j0 * p.row, p.row, p.d);
  }
};

ACTORPIPE_FMA_CLONES
void forward_pair(const float* qkv, float* out, float* probs, const attention_dims& dims, float scale,
                  std::int64_t pair, float* kt) {
  const pair_view p = view_of(qkv, dims, pair);
  transpose_rows(p.q + p.H, p.row, p, kt);
  const forward_tiles f{p, p.q + 2 * p.H, probs + pair * p.S * p.Sp, out + p.io, scale, kt};
  over_row_tiles(p.S, f);
}

ACTORPIPE_FMA_CLONES
void backward_pair(const float* qkv, const float* probs, const float* grad_out, float* grad_qkv,
                   const attention_dims& dims, float scale, std::int64_t pair, float* vt, float* dS) {
  const pair_view p = view_of(qkv, dims, pair);
  const float* P = probs + pair * p.S * p.Sp;
  float* dq = grad_qkv + (p.q - qkv);
  const float* dO = grad_out + p.io;
  transpose_rows(p.q + 2 * p.H, p.row, p, vt);
  over_row_tiles(p.S, backward_query_tiles{p, p.q + p.H, P, dO, vt, dS, dq, scale});
  over_row_tiles(p.S, backward_key_tiles{p, P, dO, dS, dq + p.H, dq + 2 * p.H});
}

}  // namespace

std::int64_t attention_padded_seq(std::int64_t seq) { return round_up(seq); }

bool causal_attention_kernel_serves(const attention_dims& dims) {
#if defined(__GNUC__) && defined(__x86_64__) && !defined(__clang__)
  static const bool cpu = __builtin_cpu_supports("fma");
#else
  static const bool cpu = false;
#endif
  return cpu && dims.batch > 0 && dims.seq > 0 && dims.heads > 0 && dims.head_dim > 0 && dims.head_dim % lanes == 0;
}

void causal_attention_forward(const float* qkv, float* out, float* probs, const attention_dims& dims, float scale,
                              std::int64_t first, std::int64_t end) {
  thread_local std::vector<float> kt;
  kt.resize(static_cast<std::size_t>(dims.head_dim * round_up(dims.seq)));
  for (std::int64_t pair = first; pair < end; ++pair) forward_pair(qkv, out, probs, dims, scale, pair, kt.data());
}

void causal_attention_backward(const float* qkv, const float* probs, const float* grad_out, float* grad_qkv,
                               const attention_dims& dims, float scale, std::int64_t first, std::int64_t end) {
  thread_local std::vector<float> vt, dS;
  vt.resize(static_cast<std::size_t>(dims.head_dim * round_up(dims.seq)));
  dS.resize(static_cast<std::size_t>(dims.seq * round_up(dims.seq)));
  for (std::int64_t pair = first; pair < end; ++pair)
    backward_pair(qkv, probs, grad_out, grad_qkv, dims, scale, pair, vt.data(), dS.data());
}

}  // namespace actorpipe
