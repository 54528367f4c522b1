// CPU row-wise feature passes.
//
// AffineAct: out = act(x * scale + shift [+ residual]) in one read of the operands and one
// write, rows spread over the cores (each element is computed alone, so the result does
// not depend on the thread count). This is what an eval-mode BatchNorm, the residual add
// after it and the ReLU cost together: MLX's CPU ops take one pass each.
//
// BatchNormAct / BatchNormActGrad: the training-mode BatchNorm with the add and the ReLU,
// forward in two passes (the per-channel statistics, then (x - mean) * scale + bias with
// the residual and the ReLU) and backward
// in two (two per-channel sums, then the input gradient). Sums run in float64 over fixed
// blocks of rows, added in block order, so they do not depend on the thread count either.
// The row loops are compiled for x86-64-v3 too (core/clones.h), and this file without
// floating-point contraction (CMakeLists.txt), so that both compile to the same roundings.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "backend/cpu/dispatch.h"
#include "backend/cpu/dtype_convert.h"
#include "backend/cpu/features.h"
#include "core/clones.h"
#include "core/parallel.h"
#include "primitives.h"

namespace lattice {

namespace {

// Rows [b, e) of C channels (X's and Y's rows ld apart, R's C), float32 throughout. Y may be
// X (the convolution's epilogue works in place): each element is read before it is written,
// so X and Y are not restrict.
template <bool kResidual, bool kRelu>
inline void affine_rows_as(const float* X, const float* __restrict S, const float* __restrict H,
                           const float* __restrict R, float* Y, int64_t b, int64_t e, int64_t C, int64_t ld) {
  for (int64_t r = b; r < e; ++r) {
    const int64_t o = r * ld, q = r * C;
    for (int64_t c = 0; c < C; ++c) {
      float v = X[o + c] * S[c] + H[c];
      if (kResidual) v += R[q + c];
      if (kRelu) v = v < 0.0f ? 0.0f : v;  // max(v, 0); NaN stays NaN as in mx.maximum
      Y[o + c] = v;
    }
  }
}

}  // namespace

LATTICE_X86_CLONES void affine_rows(const float* X, const float* S, const float* H, const float* R, float* Y,
                                    int64_t b, int64_t e, int64_t C, int64_t ld, bool relu) {
  if (R != nullptr) {
    if (relu) affine_rows_as<true, true>(X, S, H, R, Y, b, e, C, ld);
    else affine_rows_as<true, false>(X, S, H, R, Y, b, e, C, ld);
  } else {
    if (relu) affine_rows_as<false, true>(X, S, H, R, Y, b, e, C, ld);
    else affine_rows_as<false, false>(X, S, H, R, Y, b, e, C, ld);
  }
}

namespace {

// BatchNormAct's pass, rows [b, e): act((x - mean) * scale + bias [+ residual]).
template <bool kResidual, bool kRelu>
inline void norm_rows_as(const float* __restrict X, const float* __restrict M, const float* __restrict S,
                         const float* __restrict B, const float* __restrict R, float* __restrict Y, int64_t b,
                         int64_t e, int64_t C) {
  for (int64_t r = b; r < e; ++r) {
    const int64_t o = r * C;
    for (int64_t c = 0; c < C; ++c) {
      float v = (X[o + c] - M[c]) * S[c] + B[c];
      if (kResidual) v += R[o + c];
      if (kRelu) v = v < 0.0f ? 0.0f : v;
      Y[o + c] = v;
    }
  }
}

LATTICE_X86_CLONES void norm_rows(const float* X, const float* M, const float* S, const float* B, const float* R,
                                  float* Y, int64_t b, int64_t e, int64_t C, bool relu) {
  if (R != nullptr) {
    if (relu) norm_rows_as<true, true>(X, M, S, B, R, Y, b, e, C);
    else norm_rows_as<true, false>(X, M, S, B, R, Y, b, e, C);
  } else {
    if (relu) norm_rows_as<false, true>(X, M, S, B, R, Y, b, e, C);
    else norm_rows_as<false, false>(X, M, S, B, R, Y, b, e, C);
  }
}

// Rows per block of the per-channel sums: the blocks, not the threads, fix the order of
// the additions.
constexpr int64_t kSumBlock = 512;

// Per-channel sums over the rows in float64: part(r0, r1, acc) adds rows [r0, r1) into acc
// (W * C doubles, zeroed); returns the W * C totals, blocks added in order.
template <class Part>
std::vector<double> block_sums(int64_t n, int64_t C, int W, Part&& part) {
  const int64_t blocks = (n + kSumBlock - 1) / kSumBlock;
  std::vector<double> acc(static_cast<size_t>(blocks) * W * C, 0.0);
  parallel_chunks(blocks, blocks, [&](int64_t b, int64_t, int64_t) {
    part(b * kSumBlock, std::min(n, (b + 1) * kSumBlock), acc.data() + b * W * C);
  });
  std::vector<double> total(static_cast<size_t>(W) * C, 0.0);
  for (int64_t b = 0; b < blocks; ++b) {
    const double* a = acc.data() + b * W * C;
    for (int64_t j = 0; j < W * C; ++j) total[j] += a[j];
  }
  return total;
}

// s1 += x - k, s2 += (x - k)^2 per channel over rows [r0, r1).
LATTICE_X86_CLONES void stats_rows(const float* __restrict X, const float* __restrict K, int64_t r0, int64_t r1,
                                   int64_t C, double* __restrict s1, double* __restrict s2) {
  for (int64_t r = r0; r < r1; ++r) {
    const float* __restrict x = X + r * C;
    for (int64_t c = 0; c < C; ++c) {
      const double d = static_cast<double>(x[c]) - static_cast<double>(K[c]);
      s1[c] += d;
      s2[c] += d * d;
    }
  }
}

// Mean and biased variance per channel of the n rows of X, summed about the first row
// (a shift that keeps the sum of squares clear of cancellation). No rows: NaN, as the mean
// of nothing is in MLX.
void batch_stats(const float* X, int64_t n, int64_t C, float* mean, float* var) {
  if (n == 0) {
    std::fill(mean, mean + C, std::numeric_limits<float>::quiet_NaN());
    std::fill(var, var + C, std::numeric_limits<float>::quiet_NaN());
    return;
  }
  const float* K = X;
  const auto sums = block_sums(n, C, 2, [&](int64_t r0, int64_t r1, double* acc) {
    stats_rows(X, K, r0, r1, C, acc, acc + C);
  });
  for (int64_t c = 0; c < C; ++c) {
    const double m = sums[c] / static_cast<double>(n);
    mean[c] = static_cast<float>(static_cast<double>(K[c]) + m);
    var[c] = static_cast<float>(std::max(sums[C + c] / static_cast<double>(n) - m * m, 0.0));
  }
}

// sg += gm, sgx += gm * (x - mean) per channel over rows [r0, r1), gm the cotangent where
// the ReLU passed it (out > 0; every row without the ReLU, O null). Each row's gm is formed
// in float32 into `row` first: a select next to float64 sums does not vectorise (one loop
// mixing the two ran 5x slower), a float select and a float64 sum each do.
template <bool kMask>
inline void grad_sums_as(const float* __restrict G, const float* __restrict X, const float* __restrict O,
                         const float* __restrict M, int64_t r0, int64_t r1, int64_t C, double* __restrict sg,
                         double* __restrict sgx, float* __restrict row) {
  for (int64_t r = r0; r < r1; ++r) {
    const int64_t o = r * C;
    for (int64_t c = 0; c < C; ++c) row[c] = (!kMask || O[o + c] > 0.0f) ? G[o + c] : 0.0f;
    for (int64_t c = 0; c < C; ++c) {
      const double gm = static_cast<double>(row[c]);
      sg[c] += gm;
      sgx[c] += gm * (static_cast<double>(X[o + c]) - static_cast<double>(M[c]));
    }
  }
}

LATTICE_X86_CLONES void grad_sums_rows(const float* G, const float* X, const float* O, const float* M, int64_t r0,
                                       int64_t r1, int64_t C, double* sg, double* sgx, float* row) {
  if (O != nullptr) grad_sums_as<true>(G, X, O, M, r0, r1, C, sg, sgx, row);
  else grad_sums_as<false>(G, X, O, M, r0, r1, C, sg, sgx, row);
}

// The input gradient of BatchNormAct, rows [b, e): dx = a * gm + k * (x - mean) + h, and
// dresidual = gm where DR is given.
template <bool kMask, bool kResidual>
inline void grad_rows_as(const float* __restrict G, const float* __restrict X, const float* __restrict O,
                         const float* __restrict M, const float* __restrict A, const float* __restrict Kc,
                         const float* __restrict H, float* __restrict DX, float* __restrict DR, int64_t b, int64_t e,
                         int64_t C) {
  for (int64_t r = b; r < e; ++r) {
    const int64_t o = r * C;
    for (int64_t c = 0; c < C; ++c) {
      const float gm = (!kMask || O[o + c] > 0.0f) ? G[o + c] : 0.0f;
      DX[o + c] = A[c] * gm + Kc[c] * (X[o + c] - M[c]) + H[c];
      if (kResidual) DR[o + c] = gm;
    }
  }
}

LATTICE_X86_CLONES void batch_norm_grad_rows(const float* G, const float* X, const float* O, const float* M,
                                             const float* A, const float* Kc, const float* H, float* DX, float* DR,
                                             int64_t b, int64_t e, int64_t C) {
  if (O != nullptr) {
    if (DR != nullptr) grad_rows_as<true, true>(G, X, O, M, A, Kc, H, DX, DR, b, e, C);
    else grad_rows_as<true, false>(G, X, O, M, A, Kc, H, DX, DR, b, e, C);
  } else {
    if (DR != nullptr) grad_rows_as<false, true>(G, X, O, M, A, Kc, H, DX, DR, b, e, C);
    else grad_rows_as<false, false>(G, X, O, M, A, Kc, H, DX, DR, b, e, C);
  }
}

}  // namespace

void AffineAct::eval_cpu(const std::vector<mx::array>& inputs, std::vector<mx::array>& outputs) {
  dispatch_cpu(stream(), inputs, outputs[0], [res = has_residual_, relu = relu_](std::vector<mx::array>& in,
                                                                                  mx::array& out) {
    const int64_t n = in[0].shape(0), C = in[0].shape(1);
    if (n == 0 || C == 0) return;
    // 16-bit operands are read through float32 copies and the result stored back (as_f32 /
    // store_from_f32, as the convolutions do); float32 ones are read and written in place.
    std::vector<float> xs, rs, ys;
    const float* X = as_f32(in[0], xs);
    const float* R = res ? as_f32(in[3], rs) : nullptr;
    const float* S = in[1].data<float>();
    const float* H = in[2].data<float>();
    float* Y = out.dtype() == mx::float32 ? out.data<float>() : (ys.resize(static_cast<size_t>(n) * C), ys.data());
    parallel_for(n, [&](int64_t b, int64_t e) { affine_rows(X, S, H, R, Y, b, e, C, C, relu); },
                 std::max<int64_t>(1, 16384 / C));
    if (out.dtype() != mx::float32) store_from_f32(Y, out);
  });
}

void BatchNormAct::eval_cpu(const std::vector<mx::array>& inputs, std::vector<mx::array>& outputs) {
  dispatch_cpu_outputs(stream(), inputs, outputs, [res = has_residual_, relu = relu_, eps = eps_](
                                                      std::vector<mx::array>& in, std::vector<mx::array>& out) {
    const int64_t n = in[0].shape(0), C = in[0].shape(1);
    float* mean = out[1].data<float>();
    float* var = out[2].data<float>();
    std::vector<float> xs, rs, ys;
    const float* X = as_f32(in[0], xs);
    batch_stats(X, n, C, mean, var);
    if (n == 0 || C == 0) return;
    // (x - mean) * scale + bias with scale = weight * rsqrt(var + eps): MLX's BatchNorm
    // arithmetic up to rounding, and exactly bias where a channel is constant.
    const float* W = in[1].data<float>();
    const float* B = in[2].data<float>();
    std::vector<float> scale(C);
    for (int64_t c = 0; c < C; ++c) scale[c] = W[c] * (1.0f / std::sqrt(var[c] + eps));
    const float* R = res ? as_f32(in[3], rs) : nullptr;
    float* Y = out[0].dtype() == mx::float32 ? out[0].data<float>()
                                              : (ys.resize(static_cast<size_t>(n) * C), ys.data());
    parallel_for(n, [&](int64_t b, int64_t e) { norm_rows(X, mean, scale.data(), B, R, Y, b, e, C, relu); },
                 std::max<int64_t>(1, 16384 / C));
    if (out[0].dtype() != mx::float32) store_from_f32(Y, out[0]);
  });
}

void BatchNormActGrad::eval_cpu(const std::vector<mx::array>& inputs, std::vector<mx::array>& outputs) {
  dispatch_cpu_outputs(stream(), inputs, outputs, [res = has_residual_, relu = relu_, eps = eps_](
                                                      std::vector<mx::array>& in, std::vector<mx::array>& out) {
    // in: g, x, out, weight, mean, var, g_mean, g_var; out: dx, dweight, dbias[, dresidual]
    const int64_t n = in[1].shape(0), C = in[1].shape(1);
    std::vector<float> gs, xs, os, dxs;
    const float* G = as_f32(in[0], gs);
    const float* X = as_f32(in[1], xs);
    const float* O = relu ? as_f32(in[2], os) : nullptr;
    const float* W = in[3].data<float>();
    const float* M = in[4].data<float>();
    const float* V = in[5].data<float>();
    const float* GM = in[6].data<float>();
    const float* GV = in[7].data<float>();
    float* dw = out[1].data<float>();
    float* db = out[2].data<float>();
    // Sums of the passed cotangent gm and of gm * (x - mean), per channel.
    const auto sums = block_sums(n, C, 2, [&](int64_t r0, int64_t r1, double* acc) {
      thread_local std::vector<float> row;
      if (row.size() < static_cast<size_t>(C)) row.resize(static_cast<size_t>(C));
      grad_sums_rows(G, X, O, M, r0, r1, C, acc, acc + C, row.data());
    });
    // dx = invstd * w * (gm - db / n - (x - mean) * invstd * dw / n) + g_mean / n
    //      + 2 * g_var * (x - mean) / n, as a * gm + k * (x - mean) + h per channel.
    std::vector<float> a(C), k(C), h(C);
    const double nn = static_cast<double>(n);
    for (int64_t c = 0; c < C; ++c) {
      const double invstd = 1.0 / std::sqrt(static_cast<double>(V[c]) + static_cast<double>(eps));
      const double dbias = sums[c], dweight = invstd * sums[C + c];
      db[c] = static_cast<float>(dbias);
      dw[c] = static_cast<float>(dweight);
      const double wi = static_cast<double>(W[c]) * invstd;
      a[c] = static_cast<float>(wi);
      k[c] = static_cast<float>(-wi * invstd * dweight / nn + 2.0 * static_cast<double>(GV[c]) / nn);
      h[c] = static_cast<float>(-wi * dbias / nn + static_cast<double>(GM[c]) / nn);
    }
    if (n == 0 || C == 0) return;
    float* DX = out[0].dtype() == mx::float32 ? out[0].data<float>()
                                               : (dxs.resize(static_cast<size_t>(n) * C), dxs.data());
    float* DR = res ? out[3].data<float>() : nullptr;
    parallel_for(n, [&](int64_t b, int64_t e) {
      batch_norm_grad_rows(G, X, O, M, a.data(), k.data(), h.data(), DX, DR, b, e, C);
    }, std::max<int64_t>(1, 16384 / C));
    if (out[0].dtype() != mx::float32) store_from_f32(DX, out[0]);
  });
}

}  // namespace lattice
