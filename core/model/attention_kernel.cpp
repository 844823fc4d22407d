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

namespace actorpipe {
namespace {

#define ACTORPIPE_INLINE inline __attribute__((always_inline))

// The loops work on 16 floats at a time, each lane one output element, so the arithmetic per
// element does not depend on the vector width; only the two cross-lane reductions (sum_of,
// max_of) combine lanes, in one fixed order. Two ways to hold 16 floats, one per build:
// wide16, one 64-byte GCC vector (one AVX-512 register); halves8, two 32-byte ones (two AVX2
// registers). GCC lowers a 64-byte vector on AVX2 through the stack (~1.5 GFLOP/s here), so
// the AVX2 build spells the halves out, and holds fewer accumulators (16 registers, not 32).
typedef float v16 __attribute__((vector_size(64)));
typedef std::int32_t i16 __attribute__((vector_size(64)));
typedef float v8 __attribute__((vector_size(32)));
typedef std::int32_t i8 __attribute__((vector_size(32)));
constexpr std::int64_t lanes = 16;

// Lanes added in one fixed order.
ACTORPIPE_INLINE float sum_of(const float (&a)[lanes]) {
  float s8[8], s4[4];
  for (int l = 0; l < 8; ++l) s8[l] = a[l] + a[l + 8];
  for (int l = 0; l < 4; ++l) s4[l] = s8[l] + s8[l + 4];
  return (s4[0] + s4[2]) + (s4[1] + s4[3]);
}
ACTORPIPE_INLINE float max_of(const float (&a)[lanes]) {
  float m = a[0];
  for (int l = 1; l < lanes; ++l) m = a[l] > m ? a[l] : m;
  return m;
}

// e^x for x <= 0 lane-wise (-inf gives 0): exp_kernel.hpp's, on F floats and I int32s.
template <class F, class I>
ACTORPIPE_INLINE F exp_lanes(F x) {
  return actorpipe::exp_nonpositive(x, [](F n) __attribute__((always_inline)) {
    const I bits = (__builtin_convertvector(n, I) + (I{} + 127)) << 23;
    F f;
    std::memcpy(&f, &bits, sizeof f);
    return f;
  });
}

// A scalar operand of a vector operation is broadcast to every lane (GCC); hot loops use that
// directly.
struct wide16 {
  using V = v16;
  static constexpr int product_cols = 2;   // 16-lane column blocks per product_rows tile
  static constexpr int weighted_cols = 4;  // and per weighted_rows_block
  static ACTORPIPE_INLINE V load(const float* p) {
    V v;
    std::memcpy(&v, p, sizeof v);
    return v;
  }
  static ACTORPIPE_INLINE void store(float* p, V v) { std::memcpy(p, &v, sizeof v); }
  static ACTORPIPE_INLINE V splat(float x) { return V{} + x; }
  static ACTORPIPE_INLINE V max(V a, V b) { return a > b ? a : b; }
  static ACTORPIPE_INLINE V exp(V x) { return exp_lanes<v16, i16>(x); }
  static ACTORPIPE_INLINE void to_lanes(V v, float (&a)[lanes]) { std::memcpy(a, &v, sizeof a); }
};

// Lanes 0-7 in lo, 8-15 in hi; the operators the loops use, half by half.
struct v8x2 {
  v8 lo, hi;
};
ACTORPIPE_INLINE v8x2 operator+(v8x2 a, v8x2 b) { return {a.lo + b.lo, a.hi + b.hi}; }
ACTORPIPE_INLINE v8x2 operator-(v8x2 a, v8x2 b) { return {a.lo - b.lo, a.hi - b.hi}; }
ACTORPIPE_INLINE v8x2 operator*(v8x2 a, v8x2 b) { return {a.lo * b.lo, a.hi * b.hi}; }
ACTORPIPE_INLINE v8x2 operator*(float a, v8x2 b) { return {a * b.lo, a * b.hi}; }
ACTORPIPE_INLINE v8x2 operator*(v8x2 a, float b) { return {a.lo * b, a.hi * b}; }
ACTORPIPE_INLINE v8x2 operator-(v8x2 a, float b) { return {a.lo - b, a.hi - b}; }

struct halves8 {
  using V = v8x2;
  static constexpr int product_cols = 1;
  static constexpr int weighted_cols = 1;
  static ACTORPIPE_INLINE V load(const float* p) {
    V v;
    std::memcpy(&v.lo, p, sizeof v.lo);
    std::memcpy(&v.hi, p + 8, sizeof v.hi);
    return v;
  }
  static ACTORPIPE_INLINE void store(float* p, V v) {
    std::memcpy(p, &v.lo, sizeof v.lo);
    std::memcpy(p + 8, &v.hi, sizeof v.hi);
  }
  static ACTORPIPE_INLINE V splat(float x) { return {v8{} + x, v8{} + x}; }
  static ACTORPIPE_INLINE V max(V a, V b) { return {a.lo > b.lo ? a.lo : b.lo, a.hi > b.hi ? a.hi : b.hi}; }
  static ACTORPIPE_INLINE V exp(V x) { return {exp_lanes<v8, i8>(x.lo), exp_lanes<v8, i8>(x.hi)}; }
  static ACTORPIPE_INLINE void to_lanes(V v, float (&a)[lanes]) {
    std::memcpy(a, &v.lo, sizeof v.lo);
    std::memcpy(a + 8, &v.hi, sizeof v.hi);
  }
};

// The cross-lane reductions, on either way of holding the lanes.
template <class X>
ACTORPIPE_INLINE float sum_lanes(typename X::V v) {
  float a[lanes];
  X::to_lanes(v, a);
  return sum_of(a);
}
template <class X>
ACTORPIPE_INLINE float max_lanes(typename X::V v) {
  float a[lanes];
  X::to_lanes(v, a);
  return max_of(a);
}

// C[i0 + r][j] = sum_k A[(i0 + r) * a_stride + k] * Bt[k * ld + j], k < depth in order, for
// r < R and j < j_end (a multiple of 16): the scores (q k^T) and dP (dO v^T) row tiles, NJ
// 16-lane blocks of j at a time.
template <class X, int R, int NJ>
ACTORPIPE_INLINE void product_rows_block(const float* A, std::int64_t a_stride, const float* Bt, std::int64_t ld,
                                         std::int64_t depth, std::int64_t i0, std::int64_t j, float* C) {
  using V = typename X::V;
  V acc[R][NJ];
  for (int r = 0; r < R; ++r)
    for (int n = 0; n < NJ; ++n) acc[r][n] = X::splat(0.0f);
  for (std::int64_t k = 0; k < depth; ++k) {
    V b[NJ];
    for (int n = 0; n < NJ; ++n) b[n] = X::load(Bt + k * ld + j + n * lanes);
    for (int r = 0; r < R; ++r) {
      const float a = A[(i0 + r) * a_stride + k];
      for (int n = 0; n < NJ; ++n) acc[r][n] = acc[r][n] + a * b[n];
    }
  }
  for (int r = 0; r < R; ++r)
    for (int n = 0; n < NJ; ++n) X::store(C + (i0 + r) * ld + j + n * lanes, acc[r][n]);
}

template <class X, int R>
ACTORPIPE_INLINE void product_rows(const float* A, std::int64_t a_stride, const float* Bt, std::int64_t ld,
                                   std::int64_t depth, std::int64_t i0, std::int64_t j_end, float* C) {
  constexpr int NJ = X::product_cols;
  std::int64_t j = 0;
  for (; j + NJ * lanes <= j_end; j += NJ * lanes) product_rows_block<X, R, NJ>(A, a_stride, Bt, ld, depth, i0, j, C);
  for (; j < j_end; j += lanes) product_rows_block<X, R, 1>(A, a_stride, Bt, ld, depth, i0, j, C);
}

// C[r * c_stride + c] = sum_t W[r * w_r + t * w_t] * B[t * b_stride + c], t from t_begin to
// t_end in order, for r < R and c < width (a multiple of 16): a weighted sum of rows (p v,
// dS k, dS^T q, p^T dO). Weights outside the causal triangle are zeros, which add nothing.
template <class X, int R, int NV>
ACTORPIPE_INLINE void weighted_rows_block(const float* W, std::int64_t w_r, std::int64_t w_t, const float* B,
                                          std::int64_t b_stride, std::int64_t t_begin, std::int64_t t_end, float* C,
                                          std::int64_t c_stride) {
  using V = typename X::V;
  V acc[R][NV];
  for (int r = 0; r < R; ++r)
    for (int v = 0; v < NV; ++v) acc[r][v] = X::splat(0.0f);
  for (std::int64_t t = t_begin; t < t_end; ++t) {
    float w[R];
    for (int r = 0; r < R; ++r) w[r] = W[r * w_r + t * w_t];
    for (int v = 0; v < NV; ++v) {
      const V b = X::load(B + t * b_stride + v * lanes);
      for (int r = 0; r < R; ++r) acc[r][v] = acc[r][v] + w[r] * b;
    }
  }
  for (int r = 0; r < R; ++r)
    for (int v = 0; v < NV; ++v) X::store(C + r * c_stride + v * lanes, acc[r][v]);
}

template <class X, int R>
ACTORPIPE_INLINE void weighted_rows(const float* W, std::int64_t w_r, std::int64_t w_t, const float* B,
                                    std::int64_t b_stride, std::int64_t t_begin, std::int64_t t_end, float* C,
                                    std::int64_t c_stride, std::int64_t width) {
  constexpr int NV = X::weighted_cols;
  std::int64_t c = 0;
  for (; c + NV * lanes <= width; c += NV * lanes)
    weighted_rows_block<X, R, NV>(W, w_r, w_t, B + c, b_stride, t_begin, t_end, C + c, c_stride);
  for (; c < width; c += lanes) weighted_rows_block<X, R, 1>(W, w_r, w_t, B + c, b_stride, t_begin, t_end, C + c, c_stride);
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
template <class X>
struct forward_tiles {
  const pair_view& p;
  const float* v;
  float* P;
  float* o;
  float scale;
  const float* kt;
  template <int R>
  ACTORPIPE_INLINE void tile(std::int64_t i0) const {
    using V = typename X::V;
    product_rows<X, R>(p.q, p.row, kt, p.Sp, p.d, i0, round_up(i0 + R), P);  // raw scores
    for (int r = 0; r < R; ++r) {
      const std::int64_t i = i0 + r;
      float* row = P + i * p.Sp;
      const std::int64_t blocks = i / lanes + 1;
      // The scores after the diagonal in row i's last block: -inf, which e^x makes 0.
      for (std::int64_t j = i + 1; j < blocks * lanes; ++j) row[j] = -std::numeric_limits<float>::infinity();
      V mv = X::load(row) * scale;
      for (std::int64_t bk = 1; bk < blocks; ++bk) mv = X::max(X::load(row + bk * lanes) * scale, mv);
      const float m = max_lanes<X>(mv);
      V sv = X::splat(0.0f);
      for (std::int64_t bk = 0; bk < blocks; ++bk) {
        const V e = X::exp(X::load(row + bk * lanes) * scale - m);
        X::store(row + bk * lanes, e);
        sv = sv + e;
      }
      const float inv = 1.0f / sum_lanes<X>(sv);
      for (std::int64_t bk = 0; bk < blocks; ++bk) X::store(row + bk * lanes, X::load(row + bk * lanes) * inv);
      for (std::int64_t bk = blocks; bk * lanes < p.Sp; ++bk) X::store(row + bk * lanes, X::splat(0.0f));
    }
    weighted_rows<X, R>(P + i0 * p.Sp, p.Sp, 1, v, p.row, 0, i0 + R, o + i0 * p.H, p.H, p.d);
  }
};

// Backward by query rows: dP = dO v^T, dS = P (dP - rowsum(P dP)) scale (zeros after the
// diagonal), dq rows = dS rows . k.
template <class X>
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
    using V = typename X::V;
    product_rows<X, R>(dO, p.H, vt, p.Sp, p.d, i0, round_up(i0 + R), dS);
    for (int r = 0; r < R; ++r) {
      const std::int64_t i = i0 + r;
      float* row = dS + i * p.Sp;
      const float* pr = P + i * p.Sp;  // zeros after the diagonal
      const std::int64_t blocks = i / lanes + 1;
      for (std::int64_t j = i + 1; j < blocks * lanes; ++j) row[j] = 0.0f;
      V acc = X::splat(0.0f);
      for (std::int64_t bk = 0; bk < blocks; ++bk) acc = acc + X::load(pr + bk * lanes) * X::load(row + bk * lanes);
      const float D = sum_lanes<X>(acc);
      for (std::int64_t bk = 0; bk < blocks; ++bk)
        X::store(row + bk * lanes, (X::load(pr + bk * lanes) * (X::load(row + bk * lanes) - D)) * scale);
      for (std::int64_t bk = blocks; bk * lanes < p.Sp; ++bk) X::store(row + bk * lanes, X::splat(0.0f));
    }
    weighted_rows<X, R>(dS + i0 * p.Sp, p.Sp, 1, k, p.row, 0, i0 + R, dq + i0 * p.row, p.row, p.d);
  }
};

// Backward by key rows j: dk_j = sum_i dS[i][j] q_i, dv_j = sum_i P[i][j] dO_i, over i >= j.
template <class X>
struct backward_key_tiles {
  const pair_view& p;
  const float* P;
  const float* dO;
  const float* dS;
  float* dk;
  float* dv;
  template <int R>
  ACTORPIPE_INLINE void tile(std::int64_t j0) const {
    weighted_rows<X, R>(dS + j0, 1, p.Sp, p.q, p.row, j0, p.S, dk + j0 * p.row, p.row, p.d);
    weighted_rows<X, R>(P + j0, 1, p.Sp, dO, p.H, j0, p.S, dv + j0 * p.row, p.row, p.d);
  }
};

template <class X>
ACTORPIPE_INLINE void forward_pair(const float* qkv, float* out, float* probs, const attention_dims& dims, float scale,
                                   std::int64_t pair, float* kt) {
  const pair_view p = view_of(qkv, dims, pair);
  transpose_rows(p.q + p.H, p.row, p, kt);
  const forward_tiles<X> f{p, p.q + 2 * p.H, probs + pair * p.S * p.Sp, out + p.io, scale, kt};
  over_row_tiles(p.S, f);
}

template <class X>
ACTORPIPE_INLINE void backward_pair(const float* qkv, const float* probs, const float* grad_out, float* grad_qkv,
                                    const attention_dims& dims, float scale, std::int64_t pair, float* vt, float* dS) {
  const pair_view p = view_of(qkv, dims, pair);
  const float* P = probs + pair * p.S * p.Sp;
  float* dq = grad_qkv + (p.q - qkv);
  const float* dO = grad_out + p.io;
  transpose_rows(p.q + 2 * p.H, p.row, p, vt);
  over_row_tiles(p.S, backward_query_tiles<X>{p, p.q + p.H, P, dO, vt, dS, dq, scale});
  over_row_tiles(p.S, backward_key_tiles<X>{p, P, dO, dS, dq + p.H, dq + 2 * p.H});
}

// The pairs [first, end), forward and backward, in one build.
#define ACTORPIPE_ATTENTION_BUILD(NAME, X)                                                                          \
  void NAME##_forward(const float* qkv, float* out, float* probs, const attention_dims& dims, float scale,           \
                      std::int64_t first, std::int64_t end, float* kt) {                                             \
    for (std::int64_t pair = first; pair < end; ++pair) forward_pair<X>(qkv, out, probs, dims, scale, pair, kt);     \
  }                                                                                                                  \
  void NAME##_backward(const float* qkv, const float* probs, const float* grad_out, float* grad_qkv,                 \
                       const attention_dims& dims, float scale, std::int64_t first, std::int64_t end, float* vt,     \
                       float* dS) {                                                                                  \
    for (std::int64_t pair = first; pair < end; ++pair)                                                              \
      backward_pair<X>(qkv, probs, grad_out, grad_qkv, dims, scale, pair, vt, dS);                                   \
  }

using forward_fn = void (*)(const float*, float*, float*, const attention_dims&, float, std::int64_t, std::int64_t,
                            float*);
using backward_fn = void (*)(const float*, const float*, const float*, float*, const attention_dims&, float,
                             std::int64_t, std::int64_t, float*, float*);
struct build {
  forward_fn forward;
  backward_fn backward;
  const char* isa;
};

// A plain build for the target's baseline: never chosen where the loops serve, it keeps a call
// the callers should not make (they check causal_attention_kernel_serves first) from jumping
// to nowhere.
ACTORPIPE_ATTENTION_BUILD(plain, wide16)

#if defined(__GNUC__) && defined(__x86_64__) && !defined(__clang__)
// Each build is compiled for its instruction set (the loops above are inlined into it); the
// first call picks the one this CPU runs.
#pragma GCC push_options
#pragma GCC target("avx512f")
ACTORPIPE_ATTENTION_BUILD(avx512, wide16)
#pragma GCC pop_options
#pragma GCC push_options
#pragma GCC target("avx2,fma")
ACTORPIPE_ATTENTION_BUILD(avx2, halves8)
#pragma GCC pop_options

build this_cpus_build() {
  if (__builtin_cpu_supports("avx512f")) return {avx512_forward, avx512_backward, "AVX-512"};
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return {avx2_forward, avx2_backward, "AVX2+FMA"};
  return {plain_forward, plain_backward, nullptr};
}
#else
build this_cpus_build() { return {plain_forward, plain_backward, nullptr}; }
#endif

const build& chosen() {
  static const build b = this_cpus_build();
  return b;
}

}  // namespace

std::int64_t attention_padded_seq(std::int64_t seq) { return round_up(seq); }

const char* causal_attention_kernel_isa() { return chosen().isa; }

bool causal_attention_kernel_serves(const attention_dims& dims) {
  return chosen().isa && dims.batch > 0 && dims.seq > 0 && dims.heads > 0 && dims.head_dim > 0 &&
         dims.head_dim % lanes == 0;
}

void causal_attention_forward(const float* qkv, float* out, float* probs, const attention_dims& dims, float scale,
                              std::int64_t first, std::int64_t end) {
  thread_local std::vector<float> kt;
  kt.resize(static_cast<std::size_t>(dims.head_dim * round_up(dims.seq)));
  chosen().forward(qkv, out, probs, dims, scale, first, end, kt.data());
}

void causal_attention_backward(const float* qkv, const float* probs, const float* grad_out, float* grad_qkv,
                               const attention_dims& dims, float scale, std::int64_t first, std::int64_t end) {
  thread_local std::vector<float> vt, dS;
  vt.resize(static_cast<std::size_t>(dims.head_dim * round_up(dims.seq)));
  dS.resize(static_cast<std::size_t>(dims.seq * round_up(dims.seq)));
  chosen().backward(qkv, probs, grad_out, grad_qkv, dims, scale, first, end, vt.data(), dS.data());
}

}  // namespace actorpipe
