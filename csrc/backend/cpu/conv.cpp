// CPU sparse convolution, per kernel offset, in tiles spread over both cores: gather ->
// GEMM (linked BLAS) -> scatter-add, or lattice's register-tiled kernel (gemm.h), which
// reads the gathered rows and adds into the scattered ones directly, W packed once per
// call (over a large output whose edges come in output-row order: all offsets per block
// of output rows, blocks over the cores). Edges of one offset never share an output row
// in a kernel relation, so tiles of one offset scatter without atomics.
// Every row index is range-checked first; a relation nobody vouched for (EdgeFacts in
// primitives.h) is also checked for that property, and scattered serially, in edge
// order, where it does not hold.
#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <memory>

#include "backend/cpu/blas.h"
#include "backend/cpu/dtype_convert.h"
#include "backend/cpu/dispatch.h"
#include "backend/cpu/features.h"
#include "backend/cpu/gemm.h"
#include "core/checks.h"
#include "core/settings.h"
#include "primitives.h"

namespace lattice {

namespace {

// Edges per tile: the gathered tile stays in L2 (LATTICE_CONV_TILE_FLOATS, lattice/settings.py).
inline int64_t tile_rows(int c_in, int c_out) {
  int64_t t = std::max<int64_t>(1024, settings().conv_tile_floats) / std::max(1, std::max(c_in, c_out));
  return std::clamp<int64_t>(t, 64, 1024);
}

// dst[j] = src[rows[j]] for m rows of c floats.
inline void gather_rows(const float* __restrict src, const int32_t* __restrict rows, int64_t m, int c,
                        float* __restrict dst) {
  for (int64_t j = 0; j < m; ++j) {
    const float* __restrict s = src + static_cast<int64_t>(rows[j]) * c;
    float* __restrict d = dst + j * c;
    for (int i = 0; i < c; ++i) d[i] = s[i];
  }
}

// dst[rows[j]] += src[j] (dst rows ldd apart); rows are distinct within one call (one kernel offset).
inline void scatter_add_rows(const float* __restrict src, const int32_t* __restrict rows, int64_t m, int c,
                             float* __restrict dst, int64_t ldd) {
  for (int64_t j = 0; j < m; ++j) {
    float* __restrict d = dst + static_cast<int64_t>(rows[j]) * ldd;
    const float* __restrict s = src + j * c;
    for (int i = 0; i < c; ++i) d[i] += s[i];
  }
}


// Whether offset k's edges are exactly (r, r) for r = 0 .. n - 1.
bool identity_edges(const int32_t* in, const int32_t* out, const std::vector<int64_t>& bounds, int k, int64_t n) {
  const int64_t b = bounds[k];
  if (bounds[k + 1] - b != n) return false;
  std::atomic<bool> ok{true};
  parallel_for(n, [&](int64_t s, int64_t e) {
    bool good = true;
    for (int64_t r = s; r < e; ++r) good &= (in[b + r] == r) & (out[b + r] == r);
    if (!good) ok.store(false, std::memory_order_relaxed);
  }, 1 << 16);
  return ok.load();
}

// The weight (K, P, Q) as the products read it, in place: element (k, i, j) at
// p + k * sk + i * si + j * sj. MLX maps a layer's dense (C_out, Kx, Ky, Kz, C_in) weight to
// (K, C_in, C_out) as a transposed view; reading it through its strides spares a copy of
// every weight on every call (46 MB per MinkUNet14 forward, 38 % of a 200-voxel one). A view
// whose inner strides are not (row, 1) or (1, column) with room for the other axis is copied.
struct WeightView {
  const float* p;
  int64_t sk, si, sj;
};

WeightView weight_view(const mx::array& w, std::vector<float>& copy) {
  const int64_t P = w.shape(1), Q = w.shape(2);
  const auto& st = w.strides();
  if ((st[2] == 1 && st[1] >= Q) || (st[1] == 1 && st[2] >= P)) return {w.data<float>(), st[0], st[1], st[2]};
  return {dense_f32(w, copy), P * Q, Q, 1};
}

// Edges per task of lattice's kernel: a multiple of its row tile, and at least about 2^16
// multiply-adds (smaller tasks cost more to hand out than they take).
inline int64_t kernel_chunk(const gemm::TileKernel& t, int c_in, int c_out) {
  const int64_t least = (int64_t{1} << 16) / std::max<int64_t>(1, static_cast<int64_t>(c_in) * c_out);
  const int64_t tiles = std::max<int64_t>(24, (least + t.rows - 1) / t.rows);
  return tiles * t.rows;
}

// Rows of Y per output-row block: about 256 KiB of them (L2 is 1 MiB a core on the machines
// measured), at least 256.
inline int64_t block_rows(int c_out) { return std::max<int64_t>(256, (int64_t{1} << 16) / std::max(1, c_out)); }

// Whether the offsets' edges run through Y in output-row blocks, and over how many rows:
// where Y is larger than about 2 MiB and every offset's edges (but `skip`'s) come in
// ascending output row (then a block's edges of an offset are one run, found by binary
// search); 0 otherwise. Results are the same bits either way: each row still sums its
// offsets in order, one edge per offset.
int64_t out_block_rows(const int32_t* OR, const std::vector<int64_t>& bounds, int skip, int c_out) {
  const int K = static_cast<int>(bounds.size()) - 1;
  int32_t top = -1;
  for (int k = 0; k < K; ++k)
    if (k != skip && bounds[k + 1] > bounds[k]) top = std::max(top, OR[bounds[k + 1] - 1]);
  const int64_t n = static_cast<int64_t>(top) + 1;
  if (n * c_out * 4 <= (int64_t{2} << 20)) return 0;
  std::atomic<bool> sorted{true};
  parallel_chunks(K, K, [&](int64_t k, int64_t, int64_t) {
    if (k == skip) return;
    bool ok = true;
    for (int64_t e = bounds[k] + 1; e < bounds[k + 1]; ++e) ok &= OR[e - 1] <= OR[e];
    if (!ok) sorted.store(false, std::memory_order_relaxed);
  });
  return sorted.load() ? n : 0;
}

// A fused epilogue's operands (Epilogue in primitives.h): act(Y * S + H [+ R]) on Y's first
// c_out columns, then A's rows copied into the `append` columns after them; S null: none.
struct RowEpilogue {
  const float* S = nullptr;
  const float* H = nullptr;
  const float* R = nullptr;  // (n_out, c_out)
  const float* A = nullptr;  // (n_out, append)
  int append = 0;
  bool relu = false;
  // Rows [b, e) of Y (c_out channels, rows c_out + append apart), in place: AffineAct's row
  // pass itself, then A's rows after them.
  void operator()(float* Y, int64_t b, int64_t e, int c_out) const {
    if (S == nullptr || e <= b) return;
    const int64_t ldy = c_out + append;
    affine_rows(Y, S, H, R, Y, b, e, c_out, ldy, relu);
    for (int64_t r = b; append > 0 && r < e; ++r)
      std::memcpy(Y + r * ldy + c_out, A + r * append, sizeof(float) * append);
  }
};

// The offsets but `skip` through lattice's kernel, in the register tile of its shape for
// c_out: each offset's W packed once (all offsets packed in parallel first), then its edges
// in chunks over the cores (in order, on one thread, where `distinct` does not hold). Offset
// `first` (-1: none), whose edges write every row of Y once, runs before the others and
// stores its products: Y need not be zeroed; the others add theirs. In output-row blocks the
// epilogue runs on each block as its last offset is done (the block still in cache); returns
// how many of Y's first rows it has been applied to (0 outside blocks).
int64_t conv_offsets_kernel(const gemm::KernelInfo& ki, const float* X, int64_t n_in, const WeightView& W,
                            int64_t s_row, int64_t s_col, const int32_t* IR, const int32_t* OR,
                            const std::vector<int64_t>& bounds, int skip, int first, int c_in, int c_out, float* Y,
                            int64_t ldy, bool distinct, const RowEpilogue& epilogue) {
  const int K = static_cast<int>(bounds.size()) - 1;
  const gemm::TileKernel& t = ki.for_columns(c_out);
  const int64_t psz = ki.packed_size(t, c_in, c_out);
  // Every float of it is written by pack(): not zeroed first (10 MB per call on a wide layer).
  std::unique_ptr<float[]> packed(new float[static_cast<size_t>(K) * psz]);
  const auto pack = [&](int64_t k, int64_t, int64_t) {
    if (k != skip && bounds[k + 1] > bounds[k])
      ki.pack(t, W.p + k * W.sk, s_row, s_col, c_in, c_out, packed.get() + k * psz);
  };
  maybe_parallel_chunks(K * psz >= (1 << 16), K, K, pack);
  // A rounding kernel reads X rounded once (half the bytes of each gathered row).
  std::unique_ptr<float[]> rounded;
  int64_t ldx = c_in;
  if (ki.bf16) {
    ldx = (c_in + 1) / 2;
    rounded.reset(new float[static_cast<size_t>(n_in) * ldx]);
    float* R = rounded.get();
    parallel_for(
        n_in, [&](int64_t b, int64_t e) { ki.round_rows(X + b * c_in, c_in, e - b, c_in, R + b * ldx); },
        std::max<int64_t>(1, (int64_t{1} << 15) / std::max(1, c_in)));
    X = rounded.get();
  }
  const int64_t chunk = kernel_chunk(t, c_in, c_out);
  const int64_t n_out_rows = out_block_rows(OR, bounds, skip, c_out);
  if (n_out_rows > 0) {
    // Output-row blocks: every offset's edges into one block of Y's rows before the next
    // block, so the block's rows stay in L2 across the offsets' read-modify-writes.
    const int64_t n_out = n_out_rows, rows = block_rows(c_out), blocks = (n_out + rows - 1) / rows;
    parallel_chunks(blocks, blocks, [&](int64_t blk, int64_t, int64_t) {
      const int32_t r0 = static_cast<int32_t>(blk * rows), r1 = static_cast<int32_t>(std::min(n_out, (blk + 1) * rows));
      const auto part = [&](int k, bool accumulate) {
        const int32_t* lo = std::lower_bound(OR + bounds[k], OR + bounds[k + 1], r0);
        const int32_t* hi = std::lower_bound(lo, OR + bounds[k + 1], r1);
        if (hi > lo)
          t.gather_gemm_scatter(X, ldx, IR + (lo - OR), lo, hi - lo, packed.get() + k * psz, c_in, c_out, Y, ldy,
                                accumulate);
      };
      if (first >= 0) part(first, false);
      for (int k = 0; k < K; ++k)
        if (k != skip && k != first && bounds[k + 1] > bounds[k]) part(k, true);
      epilogue(Y, r0, r1, c_out);
    });
    return n_out;
  }
  const auto run = [&](int k, bool accumulate) {
    const int64_t e0 = bounds[k], n = bounds[k + 1] - bounds[k];
    const float* wp = packed.get() + k * psz;
    maybe_parallel_chunks(distinct || !accumulate, n, (n + chunk - 1) / chunk, [&](int64_t, int64_t b, int64_t e) {
      t.gather_gemm_scatter(X, ldx, IR + e0 + b, OR + e0 + b, e - b, wp, c_in, c_out, Y, ldy, accumulate);
    });
  };
  if (first >= 0) run(first, false);
  for (int k = 0; k < K; ++k)
    if (k != skip && k != first && bounds[k + 1] > bounds[k]) run(k, true);
  return 0;
}

void conv_forward(const mx::array& x, const mx::array& w, const mx::array& in_rows, const mx::array& out_rows,
                  mx::array& out, const std::vector<int64_t>& bounds, bool transpose_w, int identity_k,
                  EdgeFacts facts, gemm::Kernel kernel, const RowEpilogue& epilogue) {
  const int K = static_cast<int>(bounds.size()) - 1;
  const int P = w.shape(1), Q = w.shape(2);
  const int c_in = transpose_w ? Q : P;
  const int c_out = transpose_w ? P : Q;
  const int64_t n_out = out.shape(0);
  const int64_t ldy = out.shape(1);  // c_out, or more where the epilogue appends columns
  std::vector<float> xs, ys;
  const float* X = as_f32(x, xs);
  std::vector<float> wcopy;
  const WeightView W = weight_view(w, wcopy);
  float* Y;
  if (out.dtype() == mx::float32) {
    Y = out.data<float>();
  } else {
    ys.resize(static_cast<size_t>(n_out) * ldy);
    Y = ys.data();
  }
  const int32_t* IR = in_rows.data<int32_t>();
  const int32_t* OR = out_rows.data<int32_t>();
  const int64_t E = bounds.back();
  if (!facts.checked) {
    check_rows(IR, E, x.shape(0), "sparse_conv", "in_rows", "the features");
    check_rows(OR, E, n_out, "sparse_conv", "out_rows", "the output");
  }
  const bool distinct = facts.distinct || rows_distinct_per_offset(OR, bounds, n_out);
  // W_k as the product's (c_in x c_out) matrix: element (i, j) at Wk + i * s_row + j * s_col;
  // for the BLAS, one of those strides is 1 (weight_view), the other its leading dimension.
  const int64_t s_row = transpose_w ? W.sj : W.si, s_col = transpose_w ? W.si : W.sj;
  const bool blas_trans = s_col != 1;
  const int blas_ld = static_cast<int>(std::max<int64_t>(1, blas_trans ? s_col : s_row));

  // Whether offset identity_k is the identity (edges (r, r) for every row): it then writes
  // every output row once, as one GEMM that initialises Y — a float32 GEMM through the linked
  // BLAS, or where the kernel rounds, the kernel's first offset storing its products (so that
  // every product of the call is of bfloat16 operands, the centre's too).
  const bool rounds = kernel != gemm::Kernel::blas && gemm::info(kernel).bf16;
  const bool covers = identity_k >= 0 && bounds[identity_k + 1] - bounds[identity_k] == n_out &&
                      x.shape(0) == n_out && (facts.distinct || identity_edges(IR, OR, bounds, identity_k, n_out));
  const int first = covers && rounds && c_in > 0 && c_out > 0 ? identity_k : -1;
  bool initialised = first >= 0;
  if (covers && first < 0) {
    // The identity offset is a plain GEMM that also initialises Y (BLAS on all cores).
    if (n_out > 0 && c_out > 0) {
      if (c_in == 0) std::memset(Y, 0, sizeof(float) * n_out * ldy);
      else blas::sgemm_parallel(false, blas_trans, n_out, c_out, c_in, 1.0f, X, c_in, W.p + identity_k * W.sk, blas_ld,
                                0.0f, Y, static_cast<int>(ldy));
    }
    initialised = true;
  }
  if (!initialised) {
    parallel_for(n_out * ldy, [&](int64_t b, int64_t e) { std::memset(Y + b, 0, sizeof(float) * (e - b)); }, 1 << 16);
  }
  int64_t done = 0;  // Y's first rows the epilogue has been applied to
  if (c_in > 0 && c_out > 0 && kernel != gemm::Kernel::blas) {
    done = conv_offsets_kernel(gemm::info(kernel), X, x.shape(0), W, s_row, s_col, IR, OR, bounds,
                               initialised && first < 0 ? identity_k : -1, first, c_in, c_out, Y, ldy, distinct,
                               epilogue);
  } else if (c_in > 0 && c_out > 0) {
    const int64_t T = tile_rows(c_in, c_out);
    for (int k = 0; k < K; ++k) {
      if (k == identity_k && initialised) continue;
      const int64_t e0 = bounds[k], n = bounds[k + 1] - bounds[k];
      if (n == 0) continue;
      const float* Wk = W.p + k * W.sk;
      maybe_parallel_chunks(distinct, n, (n + T - 1) / T, [&](int64_t, int64_t b, int64_t e) {
        thread_local std::vector<float> g, p;
        const int64_t m = e - b;
        g.resize(static_cast<size_t>(m) * c_in);
        p.resize(static_cast<size_t>(m) * c_out);
        const int32_t* ir = IR + e0 + b;
        const int32_t* orow = OR + e0 + b;
        gather_rows(X, ir, m, c_in, g.data());
        blas::sgemm(false, blas_trans, static_cast<int>(m), c_out, c_in, 1.0f, g.data(), c_in, Wk, blas_ld, 0.0f,
                    p.data(), c_out);
        scatter_add_rows(p.data(), orow, m, c_out, Y, ldy);
      });
    }
  }
  if (epilogue.S != nullptr && done < n_out)  // the rows no output-row block covered, one pass
    parallel_for(n_out - done, [&](int64_t b, int64_t e) { epilogue(Y, done + b, done + e, c_out); },
                 std::max<int64_t>(1, 16384 / std::max(1, c_out)));
  if (out.dtype() != mx::float32) store_from_f32(Y, out);
}

// The weight gradient through lattice's kernel (the register tile of its shape for cb): each
// offset's edges in parts of a size fixed by the relation alone (so the sums do not depend
// on the thread count); the first part of an offset writes G[k], the others their own
// buffers, added to G[k] in part order after.
void weight_grad_kernel(const gemm::KernelInfo& ki, const float* A, int ca, const float* B, int cb, const int32_t* RA,
                        const int32_t* RB, const std::vector<int64_t>& bounds, float* G) {
  const int K = static_cast<int>(bounds.size()) - 1;
  const int64_t gk = static_cast<int64_t>(ca) * cb;
  const int64_t part = std::max<int64_t>(16384, (bounds.back() + 31) / 32);
  struct Item { int k; int64_t b, e; int64_t buffer; };  // buffer -1: G[k] itself
  std::vector<Item> items;
  int64_t buffers = 0;
  for (int k = 0; k < K; ++k) {
    if (bounds[k + 1] == bounds[k]) std::memset(G + k * gk, 0, sizeof(float) * gk);
    for (int64_t s = bounds[k]; s < bounds[k + 1]; s += part)
      items.push_back({k, s, std::min(bounds[k + 1], s + part), s == bounds[k] ? -1 : buffers++});
  }
  std::unique_ptr<float[]> partial(new float[static_cast<size_t>(buffers) * gk]);  // each written whole
  const gemm::TileKernel& t = ki.for_columns(cb);
  const int64_t scratch = t.at_b_scratch(ca, cb);
  const auto n_items = static_cast<int64_t>(items.size());
  parallel_chunks(n_items, n_items, [&](int64_t i, int64_t, int64_t) {
    thread_local std::vector<float> work;
    if (work.size() < static_cast<size_t>(scratch)) work.resize(static_cast<size_t>(scratch));
    const Item& it = items[i];
    float* g = it.buffer < 0 ? G + it.k * gk : partial.get() + it.buffer * gk;
    t.gather_at_b(A, ca, RA + it.b, B, cb, RB + it.b, it.e - it.b, ca, cb, g, false, work.data());
  });
  if (buffers == 0) return;
  parallel_chunks(K, K, [&](int64_t k, int64_t, int64_t) {
    float* g = G + k * gk;
    for (const Item& it : items) {
      if (it.k != k || it.buffer < 0) continue;
      const float* p = partial.get() + it.buffer * gk;
      for (int64_t j = 0; j < gk; ++j) g[j] += p[j];
    }
  });
}

void conv_weight_grad(const mx::array& a, const mx::array& b, const mx::array& rows_a, const mx::array& rows_b,
                      mx::array& out, const std::vector<int64_t>& bounds, bool checked, gemm::Kernel kernel) {
  const int K = static_cast<int>(bounds.size()) - 1;
  const int ca = a.shape(1), cb = b.shape(1);
  std::vector<float> as, bs;
  const float* A = as_f32(a, as);
  const float* B = as_f32(b, bs);
  const int32_t* RA = rows_a.data<int32_t>();
  const int32_t* RB = rows_b.data<int32_t>();
  if (!checked) {
    check_rows(RA, bounds.back(), a.shape(0), "sparse_conv_weight_grad", "rows_a", "a");
    check_rows(RB, bounds.back(), b.shape(0), "sparse_conv_weight_grad", "rows_b", "b");
  }
  float* G = out.data<float>();
  const int64_t gk = static_cast<int64_t>(ca) * cb;
  if (ca > 0 && cb > 0 && kernel != gemm::Kernel::blas) {
    weight_grad_kernel(gemm::info(kernel), A, ca, B, cb, RA, RB, bounds, G);
    return;
  }
  std::memset(G, 0, sizeof(float) * K * gk);
  if (ca == 0 || cb == 0) return;
  const int64_t T = tile_rows(ca, cb);
  // Work items: (offset, part) pairs with their own partial sums, reduced per offset.
  struct Item { int k; int64_t b, e; };
  std::vector<Item> items;
  const int64_t part = T * 16;
  for (int k = 0; k < K; ++k)
    for (int64_t s = bounds[k]; s < bounds[k + 1]; s += part) items.push_back({k, s, std::min(bounds[k + 1], s + part)});
  std::vector<float> partial(items.size() * gk);
  parallel_chunks(static_cast<int64_t>(items.size()), static_cast<int64_t>(items.size()), [&](int64_t i, int64_t, int64_t) {
    thread_local std::vector<float> ga, gb;
    const Item& it = items[i];
    float* acc = partial.data() + i * gk;
    for (int64_t s = it.b; s < it.e; s += T) {
      const int64_t m = std::min(T, it.e - s);
      ga.resize(static_cast<size_t>(m) * ca);
      gb.resize(static_cast<size_t>(m) * cb);
      gather_rows(A, RA + s, m, ca, ga.data());
      gather_rows(B, RB + s, m, cb, gb.data());
      blas::sgemm(true, false, ca, cb, static_cast<int>(m), 1.0f, ga.data(), ca, gb.data(), cb, s == it.b ? 0.0f : 1.0f,
                  acc, cb);
    }
  });
  for (size_t i = 0; i < items.size(); ++i) {
    float* g = G + items[i].k * gk;
    const float* p = partial.data() + i * gk;
    for (int64_t j = 0; j < gk; ++j) g[j] += p[j];
  }
}


}  // namespace

void SparseConv::eval_cpu(const std::vector<mx::array>& inputs, std::vector<mx::array>& outputs) {
  dispatch_cpu(stream(), inputs, outputs[0],
           [bounds = bounds_, tw = transpose_w_, idk = identity_k_, facts = facts_, kernel = kernel_,
            epi = epilogue_](std::vector<mx::array>& in, mx::array& out) {
             RowEpilogue epilogue;
             if (epi.affine) {
               epilogue.S = in[4].data<float>();
               epilogue.H = in[5].data<float>();
               epilogue.R = epi.residual ? in[6].data<float>() : nullptr;
               epilogue.A = epi.append > 0 ? in[epi.residual ? 7 : 6].data<float>() : nullptr;
               epilogue.append = epi.append;
               epilogue.relu = epi.relu;
             }
             conv_forward(in[0], in[1], in[2], in[3], out, *bounds, tw, idk, facts, kernel, epilogue);
           });
}

void SparseConvWeightGrad::eval_cpu(const std::vector<mx::array>& inputs, std::vector<mx::array>& outputs) {
  dispatch_cpu(stream(), inputs, outputs[0],
               [bounds = bounds_, checked = facts_.checked, kernel = kernel_](std::vector<mx::array>& in, mx::array& out) {
                 conv_weight_grad(in[0], in[1], in[2], in[3], out, *bounds, checked, kernel);
               });
}

void BlasGemm::eval_cpu(const std::vector<mx::array>& inputs, std::vector<mx::array>& outputs) {
  dispatch_cpu(stream(), inputs, outputs[0], [ta = trans_a_, tb = trans_b_](std::vector<mx::array>& in, mx::array& out) {
    const mx::array& a = in[0];
    const mx::array& b = in[1];
    const int m = out.shape(0), n = out.shape(1);
    const int k = ta ? a.shape(0) : a.shape(1);
    std::vector<float> as, bs, cs;
    const BlasOperand A = blas_operand(a, ta, as), B = blas_operand(b, tb, bs);  // views read in place
    float* C;
    if (out.dtype() == mx::float32) C = out.data<float>();
    else {
      cs.resize(static_cast<size_t>(m) * n);
      C = cs.data();
    }
    if (m > 0 && n > 0) {
      if (k == 0) std::memset(C, 0, sizeof(float) * m * n);
      else blas::sgemm_parallel(A.trans, B.trans, m, n, k, 1.0f, A.data, A.ld, B.data, B.ld, 0.0f, C, n);
    }
    if (out.dtype() != mx::float32) store_from_f32(C, out);
  });
}

}  // namespace lattice
