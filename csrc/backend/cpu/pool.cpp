// CPU pooling kernels.
//
// Forward (route segment_reduce): the relation's edges are counting-sorted by output
// row (stable, so the result never depends on the thread count), then every output
// row reduces its contributors in one pass, output rows spread over the cores.
// (Route window_reduce) edges that arrive grouped by output row -- a downsample's
// window map, kernel offsets ascending within a row, which is the order the sort gives
// the same windows' relation -- are detected and reduced without the sort.
// Backward, sum / avg / max:
//   exclusive (route input_exclusive_gather): every input row has at most one edge,
//     so dX[i] is read from the one output row it reached: a pure gather;
//   general (route scatter_general): per kernel offset, scatter-add into dX; edges of
//     one offset never share an input row, so the tiles of one offset need no atomics
//     (checked first where the caller did not vouch for it, EdgeFacts: the offsets are
//     then walked serially, in edge order).
// The max gradient goes to the argmax: per output row and channel, the largest
// contributor, NaN counting as largest, ties to the smallest input row.
// Global pooling sorts rows by batch member the same way and reduces fixed-size
// runs of rows, combined in row order.
#include <algorithm>
#include <atomic>
#include <bit>
#include <cmath>
#include <cstring>

#include "backend/cpu/dtype_convert.h"
#include "backend/cpu/dispatch.h"
#include "core/checks.h"
#include "pool.h"

namespace lattice {

namespace {

constexpr int64_t kRowGrain = 512;     // output rows per parallel chunk (upper bound 64 chunks)
constexpr int64_t kGlobalRun = 4096;   // rows per partial reduction in global pooling

// ---- stable counting sort by key ---------------------------------------------------------

// start[key] .. start[key + 1] is the run of items with that key, in item order. Items
// with keys outside [0, n_keys) or rejected by `valid` are dropped. fill(pos, item, k)
// writes the payload; k is the kernel offset of the item under `bounds` (0 without).
struct Runs {
  std::vector<int64_t> start;
};

template <class Valid, class Fill>
Runs counting_sort(const int32_t* keys, int64_t n, int64_t n_keys, const std::vector<int64_t>* bounds, Valid&& valid,
                   Fill&& fill) {
  Runs r;
  r.start.assign(n_keys + 1, 0);
  if (n == 0 || n_keys == 0) return r;
  const int64_t T = std::clamp<int64_t>(std::min<int64_t>(num_threads(), (n + 8191) / 8192), 1, 8);
  std::vector<int32_t> hist(static_cast<size_t>(T) * n_keys, 0);
  auto ok = [&](int64_t e) {
    const int32_t k = keys[e];
    return k >= 0 && k < n_keys && valid(e);
  };
  parallel_chunks(n, T, [&](int64_t t, int64_t b, int64_t e) {
    int32_t* h = hist.data() + t * n_keys;
    for (int64_t j = b; j < e; ++j)
      if (ok(j)) ++h[keys[j]];
  });
  int64_t* start = r.start.data();
  parallel_for(n_keys, [&](int64_t b, int64_t e) {
    for (int64_t k = b; k < e; ++k) {
      int64_t s = 0;
      for (int64_t t = 0; t < T; ++t) s += hist[t * n_keys + k];
      start[k + 1] = s;
    }
  }, 1 << 14);
  for (int64_t k = 0; k < n_keys; ++k) start[k + 1] += start[k];
  parallel_for(n_keys, [&](int64_t b, int64_t e) {
    for (int64_t k = b; k < e; ++k) {
      int64_t run = start[k];
      for (int64_t t = 0; t < T; ++t) {
        int32_t& h = hist[t * n_keys + k];
        const int32_t c = h;
        h = static_cast<int32_t>(run);
        run += c;
      }
    }
  }, 1 << 14);
  parallel_chunks(n, T, [&](int64_t t, int64_t b, int64_t e) {
    int32_t* h = hist.data() + t * n_keys;
    int32_t k = 0;
    if (bounds) k = static_cast<int32_t>(std::upper_bound(bounds->begin(), bounds->end(), b) - bounds->begin()) - 1;
    for (int64_t j = b; j < e; ++j) {
      if (bounds)
        while (j >= (*bounds)[k + 1]) ++k;
      if (ok(j)) fill(h[keys[j]]++, j, k);
    }
  });
  return r;
}

// ---- the max rule ------------------------------------------------------------------------

// True when (v, r) beats the current best (b, br): NaN is largest, ties go to the smaller row.
inline bool beats(float v, int32_t r, float b, int32_t br) {
  if (br < 0) return true;
  if (std::isnan(v)) return !std::isnan(b) || r < br;
  if (std::isnan(b)) return false;
  return v > b || (v == b && r < br);
}

// y[c] = the largest X[rows[p], c] over n >= 1 rows, NaN counting as largest.
inline void max_rows(const float* X, int C, const int32_t* rows, int64_t n, float* y) {
  std::memcpy(y, X + static_cast<int64_t>(rows[0]) * C, sizeof(float) * C);
  for (int64_t p = 1; p < n; ++p) {
    const float* x = X + static_cast<int64_t>(rows[p]) * C;
    for (int c = 0; c < C; ++c) y[c] = (x[c] > y[c] || x[c] != x[c]) ? x[c] : y[c];
  }
}

// a[c] = the smallest row among rows[0..n) whose value equals y[c] (both NaN counts as equal).
inline void argmax_rows(const float* X, int C, const int32_t* rows, int64_t n, const float* y, int32_t* a) {
  std::fill(a, a + C, INT32_MAX);
  for (int64_t p = 0; p < n; ++p) {
    const int32_t r = rows[p];
    const float* x = X + static_cast<int64_t>(r) * C;
    for (int c = 0; c < C; ++c) {
      const bool hit = (x[c] == y[c]) | ((x[c] != x[c]) & (y[c] != y[c]));
      a[c] = (hit & (r < a[c])) ? r : a[c];
    }
  }
}

// Y[r, c] = V[arg[r, c], c] for rows [b, e) (0 where arg is -1).
inline void select_rows(const float* V, const int32_t* arg, int C, int64_t b, int64_t e, float* Y) {
  for (int64_t r = b; r < e; ++r) {
    const int32_t* a = arg + r * C;
    float* y = Y + r * C;
    for (int c = 0; c < C; ++c) y[c] = a[c] < 0 ? 0.0f : V[static_cast<int64_t>(a[c]) * C + c];
  }
}

// dx[c] = g[c] where row i won channel c (a[c] == i), else 0; branch-free so it vectorises.
// (A bit mask rather than a multiply: 0 * inf would be NaN.)
inline float keep_if(bool keep, float v) {
  return std::bit_cast<float>(std::bit_cast<uint32_t>(v) & (0u - static_cast<uint32_t>(keep)));
}

inline void routed_row(const int32_t* a, const float* g, int32_t i, int C, float* dx) {
  for (int c = 0; c < C; ++c) dx[c] = keep_if(a[c] == i, g[c]);
}

inline void routed_row_add(const int32_t* a, const float* g, int32_t i, int C, float* dx) {
  for (int c = 0; c < C; ++c) dx[c] += keep_if(a[c] == i, g[c]);
}

// ---- relation pooling --------------------------------------------------------------------

// Contributors grouped by output row: row[start[o] .. start[o + 1]) with their weights.
struct PoolCsr {
  Runs runs;
  std::vector<int32_t> row_store;  // the counting-sorted rows (empty when the edges came grouped)
  const int32_t* row = nullptr;    // contributing input rows, grouped by output row
  std::vector<float> w;            // their offset weights (empty for unit weights)
};

// Edges already grouped by output row -- out non-decreasing, every row in range, unit
// weights; a downsample's window map -- are their own CSR: only the run starts are found.
// Returns false (nothing written) when the edges are not grouped that way.
bool grouped_csr(const int32_t* in, const int32_t* out, int64_t E, int64_t n_in, int64_t n_out, Runs& r) {
  std::atomic<bool> ok{true};
  parallel_for(E, [&](int64_t b, int64_t e) {
    bool good = true;
    for (int64_t j = b; j < e && good; ++j)
      good = in[j] >= 0 && in[j] < n_in && out[j] >= 0 && out[j] < n_out && (j == 0 || out[j] >= out[j - 1]);
    if (!good) ok.store(false, std::memory_order_relaxed);
  }, 1 << 15);
  if (!ok.load()) return false;
  r.start.resize(n_out + 1);
  int64_t* start = r.start.data();
  const int64_t first = E > 0 ? out[0] : n_out;
  for (int64_t o = 0; o <= first; ++o) start[o] = 0;
  parallel_for(E, [&](int64_t b, int64_t e) {
    for (int64_t j = std::max<int64_t>(b, 1); j < e; ++j)
      for (int64_t o = out[j - 1] + 1; o <= out[j]; ++o) start[o] = j;
  }, 1 << 15);
  for (int64_t o = (E > 0 ? out[E - 1] + 1 : n_out + 1); o <= n_out; ++o) start[o] = E;
  return true;
}

PoolCsr pool_csr(const int32_t* in, const int32_t* out, int64_t n_in, int64_t n_out,
                 const std::vector<int64_t>& bounds, const std::vector<float>* weights) {
  const int64_t E = bounds.back();
  PoolCsr c;
  if (!weights && grouped_csr(in, out, E, n_in, n_out, c.runs)) {
    c.row = in;
    return c;
  }
  c.row_store.resize(E);
  if (weights) c.w.resize(E);
  int32_t* row = c.row_store.data();
  float* w = weights ? c.w.data() : nullptr;
  c.runs = counting_sort(
      out, E, n_out, weights ? &bounds : nullptr, [&](int64_t e) { return in[e] >= 0 && in[e] < n_in; },
      [&](int64_t pos, int64_t e, int32_t k) {
        row[pos] = in[e];
        if (w) w[pos] = (*weights)[k];
      });
  c.row = row;
  return c;
}

// The contributors of an output row are scattered over X: their rows are prefetched this
// many output rows ahead, so their cache misses overlap the reduction of the rows before.
constexpr int64_t kPrefetchRows = 4;

inline void prefetch_rows(const float* X, int C, const int32_t* row, int64_t s, int64_t t) {
  for (int64_t p = s; p < t; ++p) {
    const char* a = reinterpret_cast<const char*>(X + static_cast<int64_t>(row[p]) * C);
    for (int64_t off = 0; off < static_cast<int64_t>(sizeof(float)) * C; off += 64) __builtin_prefetch(a + off);
  }
}

// Per output row and channel, the winning input row under the max rule (-1 without contributors).
void pool_argmax(const float* X, int C, const PoolCsr& csr, int64_t n_out, int32_t* arg) {
  const int64_t* start = csr.runs.start.data();
  const int32_t* row = csr.row;
  parallel_for(n_out, [&](int64_t b, int64_t e) {
    std::vector<float> best(C);
    for (int64_t o = b; o < e; ++o) {
      int32_t* a = arg + o * C;
      const int64_t n = start[o + 1] - start[o];
      if (n == 0) {
        std::fill(a, a + C, -1);
        continue;
      }
      max_rows(X, C, row + start[o], n, best.data());
      argmax_rows(X, C, row + start[o], n, best.data(), a);
    }
  }, kRowGrain);
}

void pool_forward(const std::vector<mx::array>& in, mx::array& out, const std::vector<int64_t>& bounds,
                  const std::vector<float>* weights, PoolMode mode, EdgeFacts facts) {
  const mx::array& x = in[0];
  const int64_t n_in = x.shape(0), n_out = out.shape(0);
  const int C = x.shape(1);
  if (!facts.checked) {
    check_rows(in[1].data<int32_t>(), bounds.back(), n_in, "sparse_pool", "in_rows", "the features");
    check_rows(in[2].data<int32_t>(), bounds.back(), n_out, "sparse_pool", "out_rows", "the output");
  }
  std::vector<float> xs, vs, ys;
  const float* X = as_f32(x, xs);
  float* Y = out.dtype() == mx::float32 ? out.data<float>() : (ys.resize(n_out * C), ys.data());
  PoolCsr csr = pool_csr(in[1].data<int32_t>(), in[2].data<int32_t>(), n_in, n_out, bounds, weights);
  const int64_t* start = csr.runs.start.data();
  const int32_t* row = csr.row;
  const float* w = csr.w.empty() ? nullptr : csr.w.data();
  if (mode == PoolMode::Select) {
    const float* V = as_f32(in[3], vs);
    std::vector<int32_t> arg(static_cast<size_t>(n_out) * C);
    pool_argmax(X, C, csr, n_out, arg.data());
    parallel_for(n_out, [&](int64_t b, int64_t e) { select_rows(V, arg.data(), C, b, e, Y); }, kRowGrain);
  } else {
    parallel_for(n_out, [&](int64_t b, int64_t e) {
      for (int64_t o = b; o < e; ++o) {
        if (o + kPrefetchRows < e) prefetch_rows(X, C, row, start[o + kPrefetchRows], start[o + kPrefetchRows + 1]);
        float* y = Y + o * C;
        const int64_t s = start[o], t = start[o + 1];
        if (s == t) {
          std::fill(y, y + C, 0.0f);
          continue;
        }
        const float* x0 = X + static_cast<int64_t>(row[s]) * C;
        if (mode == PoolMode::Max) {
          max_rows(X, C, row + s, t - s, y);
          continue;
        }
        float wsum = w ? w[s] : 1.0f;
        for (int c = 0; c < C; ++c) y[c] = wsum * x0[c];
        for (int64_t p = s + 1; p < t; ++p) {
          const float* xr = X + static_cast<int64_t>(row[p]) * C;
          const float wp = w ? w[p] : 1.0f;
          wsum += wp;
          for (int c = 0; c < C; ++c) y[c] += wp * xr[c];
        }
        if (mode == PoolMode::Avg) {
          const float inv = wsum > 0.0f ? 1.0f / wsum : 0.0f;
          for (int c = 0; c < C; ++c) y[c] *= inv;
        }
      }
    }, kRowGrain);
  }
  if (out.dtype() != mx::float32) store_from_f32(Y, out);
}

// Runs fn(e_begin, e_end, k) over the edges of each offset in turn, each offset in parallel
// tiles (`parallel`: the rows fn writes do not repeat within an offset), else in edge order.
template <class Fn>
void per_offset(const std::vector<int64_t>& bounds, bool parallel, Fn&& fn) {
  const int K = static_cast<int>(bounds.size()) - 1;
  for (int k = 0; k < K; ++k) {
    const int64_t e0 = bounds[k], n = bounds[k + 1] - bounds[k];
    if (n > 0)
      maybe_parallel_chunks(parallel, n, chunk_count(n, 2048),
                            [&](int64_t, int64_t b, int64_t e) { fn(e0 + b, e0 + e, k); });
  }
}

// The relation's edges with their validity (rows in range) and per-offset weights.
struct EdgeView {
  const int32_t* in;
  const int32_t* out;
  int64_t n_in, n_out;
  const std::vector<int64_t>& bounds;
  const std::vector<float>* weights;

  bool valid(int64_t e) const { return in[e] >= 0 && in[e] < n_in && out[e] >= 0 && out[e] < n_out; }
  float weight(int k) const { return weights ? (*weights)[k] : 1.0f; }
  int offset_of(int64_t e) const {
    return static_cast<int>(std::upper_bound(bounds.begin(), bounds.end(), e) - bounds.begin()) - 1;
  }
};

// 1 / (sum of the weights reaching each output row), 0 without any; summed offset by offset,
// the order in which the forward pass sums them (`parallel`: no output row repeats within
// an offset).
std::vector<float> avg_scale(const EdgeView& ev, bool parallel) {
  std::vector<float> scale(ev.n_out, 0.0f);
  per_offset(ev.bounds, parallel, [&](int64_t b, int64_t e, int k) {
    for (int64_t j = b; j < e; ++j)
      if (ev.valid(j)) scale[ev.out[j]] += ev.weight(k);
  });
  parallel_for(ev.n_out, [&](int64_t b, int64_t e) {
    for (int64_t o = b; o < e; ++o) scale[o] = scale[o] > 0.0f ? 1.0f / scale[o] : 0.0f;
  }, 1 << 15);
  return scale;
}

// The one edge of each input row (-1 for none), or an empty vector when some input row has
// two edges (the relation is not input-exclusive). Input rows must not repeat within an
// offset (the caller checks that first: a repeat is a second edge anyway).
std::vector<int32_t> exclusive_edges(const EdgeView& ev) {
  std::vector<int32_t> edge_of(ev.n_in, -1);
  std::atomic<bool> shared{false};
  per_offset(ev.bounds, true, [&](int64_t b, int64_t e, int) {
    for (int64_t j = b; j < e; ++j) {
      if (!ev.valid(j)) continue;
      if (edge_of[ev.in[j]] >= 0) shared.store(true, std::memory_order_relaxed);
      edge_of[ev.in[j]] = static_cast<int32_t>(j);
    }
  });
  if (shared.load()) edge_of.clear();
  return edge_of;
}

void pool_backward(const std::vector<mx::array>& in, mx::array& out, const std::vector<int64_t>& bounds,
                   const std::vector<float>* weights, PoolMode mode, PoolBackward backward, EdgeFacts facts) {
  const mx::array& dy = in[0];
  const int64_t n_in = out.shape(0), n_out = dy.shape(0);
  const int C = dy.shape(1);
  const EdgeView ev{in[1].data<int32_t>(), in[2].data<int32_t>(), n_in, n_out, bounds, weights};
  if (!facts.checked) {
    check_rows(ev.in, bounds.back(), n_in, "sparse_pool_grad", "in_rows", "the input");
    check_rows(ev.out, bounds.back(), n_out, "sparse_pool_grad", "out_rows", "the cotangent");
  }
  // The scatters below write dX rows (input rows) and, for avg, scale rows (output rows)
  // one offset at a time in parallel tiles: where nobody vouched that those rows do not
  // repeat within an offset, that is checked here, and the offsets are walked serially
  // where they do.
  const bool in_distinct = facts.distinct || rows_distinct_per_offset(ev.in, bounds, n_in);
  std::vector<float> dys, xs, dxs;
  const float* DY = as_f32(dy, dys);
  float* DX = out.dtype() == mx::float32 ? out.data<float>() : (dxs.resize(n_in * C), dxs.data());
  // Edges grouped by output row (a window map) share output rows within their one offset
  // group, so the per-offset walk of avg_scale does not apply: count the runs instead
  // (the same float: a sum of unit weights is the count).
  PoolCsr csr;
  const bool grouped = !weights && grouped_csr(ev.in, ev.out, bounds.back(), n_in, n_out, csr.runs);
  std::vector<float> scale;
  if (mode == PoolMode::Avg && grouped) {
    scale.resize(n_out);
    const int64_t* start = csr.runs.start.data();
    parallel_for(n_out, [&](int64_t b, int64_t e) {
      for (int64_t o = b; o < e; ++o) {
        const int64_t n = start[o + 1] - start[o];
        scale[o] = n > 0 ? 1.0f / static_cast<float>(n) : 0.0f;
      }
    }, 1 << 15);
  } else if (mode == PoolMode::Avg) {
    scale = avg_scale(ev, facts.distinct || rows_distinct_per_offset(ev.out, bounds, n_out));
  }
  std::vector<int32_t> arg;
  if (mode == PoolMode::Max) {
    if (grouped) csr.row = ev.in;
    else csr = pool_csr(ev.in, ev.out, n_in, n_out, bounds, nullptr);
    arg.resize(static_cast<size_t>(n_out) * C);
    pool_argmax(as_f32(in[3], xs), C, csr, n_out, arg.data());
  }
  auto factor = [&](int32_t o, int k) { return mode == PoolMode::Avg ? ev.weight(k) * scale[o] : ev.weight(k); };

  std::vector<int32_t> edge_of;
  if (backward == PoolBackward::Exclusive && in_distinct) edge_of = exclusive_edges(ev);
  if (!edge_of.empty()) {
    // input_exclusive_gather: dX[i] read from the one output row that i reached.
    parallel_for(n_in, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) {
        float* dx = DX + i * C;
        const int32_t j = edge_of[i];
        if (j < 0) {
          std::fill(dx, dx + C, 0.0f);
          continue;
        }
        const int32_t o = ev.out[j];
        const float* g = DY + static_cast<int64_t>(o) * C;
        if (mode == PoolMode::Max) {
          routed_row(arg.data() + static_cast<int64_t>(o) * C, g, static_cast<int32_t>(i), C, dx);
        } else {
          const float f = factor(o, weights ? ev.offset_of(j) : 0);
          for (int c = 0; c < C; ++c) dx[c] = f * g[c];
        }
      }
    }, kRowGrain);
  } else {
    // scatter_general: one offset at a time (its edges share no input row), scatter-add.
    parallel_for(n_in * C, [&](int64_t b, int64_t e) { std::fill(DX + b, DX + e, 0.0f); }, 1 << 16);
    per_offset(bounds, in_distinct, [&](int64_t b, int64_t e, int k) {
      for (int64_t j = b; j < e; ++j) {
        if (!ev.valid(j)) continue;
        const int32_t i = ev.in[j], o = ev.out[j];
        float* dx = DX + static_cast<int64_t>(i) * C;
        const float* g = DY + static_cast<int64_t>(o) * C;
        if (mode == PoolMode::Max) {
          routed_row_add(arg.data() + static_cast<int64_t>(o) * C, g, i, C, dx);
        } else {
          const float f = factor(o, k);
          for (int c = 0; c < C; ++c) dx[c] += f * g[c];
        }
      }
    });
  }
  if (out.dtype() != mx::float32) store_from_f32(DX, out);
}

// ---- global pooling ----------------------------------------------------------------------

struct BatchRuns {
  Runs runs;
  std::vector<int32_t> row;  // rows grouped by batch member, ascending within a member
};

BatchRuns batch_runs(const int32_t* batch, int64_t n, int64_t B) {
  BatchRuns r;
  r.row.resize(n);
  int32_t* row = r.row.data();
  r.runs = counting_sort(batch, n, B, nullptr, [](int64_t) { return true; },
                         [&](int64_t pos, int64_t i, int32_t) { row[pos] = static_cast<int32_t>(i); });
  return r;
}

// What global_reduce computes per batch member and channel.
enum class GlobalReduce { Sum, Max, Arg };

// Per batch member and channel: the sum of its rows (Sum, into val), the largest value with
// NaN counting as largest (Max, into val; 0 for an empty member), or the winning row under
// the max rule (Arg, into arg; -1 for an empty member). Each member's rows are reduced in
// runs of kGlobalRun rows (fixed, so results never depend on the thread count), combined in
// row order.
void global_reduce(const float* X, int C, const BatchRuns& br, int64_t B, GlobalReduce what, float* val,
                   int32_t* arg) {
  const int64_t* start = br.runs.start.data();
  struct Item { int64_t s, e; };
  std::vector<Item> items;
  std::vector<int64_t> first(B + 1, 0);
  for (int64_t m = 0; m < B; ++m) {
    first[m] = static_cast<int64_t>(items.size());
    for (int64_t s = start[m]; s < start[m + 1]; s += kGlobalRun)
      items.push_back({s, std::min(start[m + 1], s + kGlobalRun)});
  }
  first[B] = static_cast<int64_t>(items.size());
  const int64_t ni = static_cast<int64_t>(items.size());
  std::vector<float> part(static_cast<size_t>(ni) * C);
  std::vector<int32_t> part_row(what == GlobalReduce::Arg ? static_cast<size_t>(ni) * C : 0);
  parallel_chunks(ni, std::min<int64_t>(ni, 256), [&](int64_t, int64_t b, int64_t e) {
    for (int64_t it = b; it < e; ++it) {
      float* acc = part.data() + it * C;
      const int32_t* rows = br.row.data() + items[it].s;
      const int64_t n = items[it].e - items[it].s;
      if (what == GlobalReduce::Sum) {
        std::fill(acc, acc + C, 0.0f);
        for (int64_t p = 0; p < n; ++p) {
          const float* xr = X + static_cast<int64_t>(rows[p]) * C;
          for (int c = 0; c < C; ++c) acc[c] += xr[c];
        }
      } else {
        max_rows(X, C, rows, n, acc);
        if (what == GlobalReduce::Arg) argmax_rows(X, C, rows, n, acc, part_row.data() + it * C);
      }
    }
  });
  parallel_for(B, [&](int64_t b, int64_t e) {
    std::vector<float> best(C);
    for (int64_t m = b; m < e; ++m) {
      if (what == GlobalReduce::Arg) {
        int32_t* a = arg + m * C;
        std::fill(a, a + C, -1);
        for (int64_t it = first[m]; it < first[m + 1]; ++it)
          for (int c = 0; c < C; ++c)
            if (beats(part[it * C + c], part_row[it * C + c], best[c], a[c])) {
              best[c] = part[it * C + c];
              a[c] = part_row[it * C + c];
            }
        continue;
      }
      float* y = val + m * C;
      std::fill(y, y + C, 0.0f);
      if (first[m] == first[m + 1]) continue;
      if (what == GlobalReduce::Max) std::memcpy(y, part.data() + first[m] * C, sizeof(float) * C);
      for (int64_t it = first[m] + (what == GlobalReduce::Max ? 1 : 0); it < first[m + 1]; ++it) {
        const float* q = part.data() + it * C;
        if (what == GlobalReduce::Max) {
          for (int c = 0; c < C; ++c) y[c] = (q[c] > y[c] || q[c] != q[c]) ? q[c] : y[c];
        } else {
          for (int c = 0; c < C; ++c) y[c] += q[c];
        }
      }
    }
  }, 64);
}

void global_forward(const std::vector<mx::array>& in, mx::array& out, PoolMode mode, bool checked) {
  const mx::array& x = in[0];
  const int64_t n = x.shape(0), B = out.shape(0);
  const int C = x.shape(1);
  if (!checked) check_rows(in[1].data<int32_t>(), n, B, "global_pool", "batch indices", "the batch, batch_size");
  std::vector<float> xs, vs, ys;
  const float* X = as_f32(x, xs);
  float* Y = out.dtype() == mx::float32 ? out.data<float>() : (ys.resize(B * C), ys.data());
  BatchRuns br = batch_runs(in[1].data<int32_t>(), n, B);
  if (mode == PoolMode::Select) {
    const float* V = as_f32(in[2], vs);
    std::vector<int32_t> arg(static_cast<size_t>(B) * C);
    global_reduce(X, C, br, B, GlobalReduce::Arg, nullptr, arg.data());
    parallel_for(B, [&](int64_t b, int64_t e) { select_rows(V, arg.data(), C, b, e, Y); }, 64);
  } else {
    global_reduce(X, C, br, B, mode == PoolMode::Max ? GlobalReduce::Max : GlobalReduce::Sum, Y, nullptr);
    if (mode == PoolMode::Avg) {
      for (int64_t m = 0; m < B; ++m) {
        const float inv = 1.0f / static_cast<float>(std::max<int64_t>(br.runs.start[m + 1] - br.runs.start[m], 1));
        for (int c = 0; c < C; ++c) Y[m * C + c] *= inv;
      }
    }
  }
  if (out.dtype() != mx::float32) store_from_f32(Y, out);
}

void global_backward(const std::vector<mx::array>& in, mx::array& out, int64_t B, PoolMode mode, bool checked) {
  const mx::array& dy = in[0];
  const int32_t* batch = in[1].data<int32_t>();
  const int64_t n = out.shape(0);
  if (!checked) check_rows(batch, n, B, "global_pool_grad", "batch indices", "the batch, batch_size");
  const int C = dy.shape(1);
  std::vector<float> dys, xs, dxs;
  const float* DY = as_f32(dy, dys);
  float* DX = out.dtype() == mx::float32 ? out.data<float>() : (dxs.resize(n * C), dxs.data());
  std::vector<float> scale(B, 1.0f);
  std::vector<int32_t> arg;
  if (mode != PoolMode::Sum) {
    BatchRuns br = batch_runs(batch, n, B);
    if (mode == PoolMode::Avg) {
      for (int64_t m = 0; m < B; ++m)
        scale[m] = 1.0f / static_cast<float>(std::max<int64_t>(br.runs.start[m + 1] - br.runs.start[m], 1));
    } else {
      arg.resize(static_cast<size_t>(B) * C);
      global_reduce(as_f32(in[2], xs), C, br, B, GlobalReduce::Arg, nullptr, arg.data());
    }
  }
  parallel_for(n, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      float* dx = DX + i * C;
      const int32_t m = batch[i];
      if (m < 0 || m >= B) {
        std::fill(dx, dx + C, 0.0f);
        continue;
      }
      const float* g = DY + static_cast<int64_t>(m) * C;
      if (mode == PoolMode::Max) {
        const int32_t* a = arg.data() + static_cast<int64_t>(m) * C;
        routed_row(a, g, static_cast<int32_t>(i), C, dx);
      } else {
        const float f = scale[m];
        for (int c = 0; c < C; ++c) dx[c] = f * g[c];
      }
    }
  }, kRowGrain);
  if (out.dtype() != mx::float32) store_from_f32(DX, out);
}


}  // namespace

void SparsePool::eval_cpu(const std::vector<mx::array>& inputs, std::vector<mx::array>& outputs) {
  dispatch_cpu(stream(), inputs, outputs[0],
           [bounds = bounds_, weights = weights_, mode = mode_, facts = facts_](std::vector<mx::array>& in,
                                                                                mx::array& out) {
             pool_forward(in, out, *bounds, weights.get(), mode, facts);
           });
}

void SparsePoolGrad::eval_cpu(const std::vector<mx::array>& inputs, std::vector<mx::array>& outputs) {
  dispatch_cpu(stream(), inputs, outputs[0],
           [bounds = bounds_, weights = weights_, mode = mode_, bw = backward_, facts = facts_](
               std::vector<mx::array>& in, mx::array& out) {
             pool_backward(in, out, *bounds, weights.get(), mode, bw, facts);
           });
}

void GlobalPool::eval_cpu(const std::vector<mx::array>& inputs, std::vector<mx::array>& outputs) {
  dispatch_cpu(stream(), inputs, outputs[0],
           [mode = mode_, checked = checked_](std::vector<mx::array>& in, mx::array& out) {
             global_forward(in, out, mode, checked);
           });
}

void GlobalPoolGrad::eval_cpu(const std::vector<mx::array>& inputs, std::vector<mx::array>& outputs) {
  dispatch_cpu(stream(), inputs, outputs[0],
               [B = batch_size_, mode = mode_, checked = checked_](std::vector<mx::array>& in, mx::array& out) {
    global_backward(in, out, B, mode, checked);
  });
}

}  // namespace lattice
