// CPU relation builders. Each builder walks source rows in fixed chunks, probes
// the hash table of the partner set, and bins edges by kernel offset; chunk
// order fixes the edge order, so results do not depend on the thread count. The submanifold
// relation can also merge the sorted rows instead (submanifold_by_merge, where its route asks),
// into the same arrays.
#include "backend/cpu/relations.h"

#include "backend/cpu/coords.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <numeric>

namespace lattice {

namespace {

struct EdgeChunk {
  std::vector<int32_t> kid, in, out;
  std::vector<int64_t> counts;
};

class Emitter {
 public:
  explicit Emitter(EdgeChunk& c) : c_(c) {}
  inline void operator()(int32_t k, int32_t i, int32_t o) {
    c_.kid.push_back(k);
    c_.in.push_back(i);
    c_.out.push_back(o);
    ++c_.counts[k];
  }

 private:
  EdgeChunk& c_;
};

// A relation's arrays: the edges (grouped by offset) and each offset's edge count.
RelationArrays edge_arrays(OutArray<int32_t>&& in_rows, OutArray<int32_t>&& out_rows,
                           const std::vector<int64_t>& counts) {
  const int32_t K = static_cast<int32_t>(counts.size());
  OutArray<int32_t> cnt({K}, mx::int32);
  for (int32_t k = 0; k < K; ++k) cnt.data()[k] = static_cast<int32_t>(counts[k]);
  RelationArrays r;
  r.in_rows = std::move(in_rows).finish();
  r.out_rows = std::move(out_rows).finish();
  r.counts = std::move(cnt).finish();
  return r;
}

// Runs gen(row, emit) over n source rows and gathers the edges grouped by offset.
template <class Gen>
RelationArrays bin_edges(int64_t n, int32_t K, int64_t expected_per_row, Gen&& gen, const char* op) {
  const int64_t chunks = chunk_count(n, 2048, 256);
  std::vector<EdgeChunk> parts(chunks);
  parallel_chunks(n, chunks, [&](int64_t ci, int64_t b, int64_t e) {
    EdgeChunk& c = parts[ci];
    c.counts.assign(K, 0);
    const size_t reserve = static_cast<size_t>((e - b) * expected_per_row);
    c.kid.reserve(reserve);
    c.in.reserve(reserve);
    c.out.reserve(reserve);
    Emitter emit(c);
    for (int64_t r = b; r < e; ++r) gen(r, emit);
  });
  // cursor[ci][k]: where chunk ci writes its first edge of offset k.
  std::vector<int64_t> totals(K, 0);
  for (auto& p : parts)
    for (int32_t k = 0; k < K; ++k) totals[k] += p.counts[k];
  std::vector<int64_t> base(K + 1, 0);
  for (int32_t k = 0; k < K; ++k) base[k + 1] = base[k] + totals[k];
  const int64_t E = base[K];
  checked_rows(E, op);
  std::vector<std::vector<int64_t>> cursor(chunks, std::vector<int64_t>(K));
  std::vector<int64_t> run(base.begin(), base.end() - 1);
  for (int64_t ci = 0; ci < chunks; ++ci) {
    for (int32_t k = 0; k < K; ++k) {
      cursor[ci][k] = run[k];
      run[k] += parts[ci].counts[k];
    }
  }
  OutArray<int32_t> in_rows({static_cast<int>(E)}, mx::int32);
  OutArray<int32_t> out_rows({static_cast<int>(E)}, mx::int32);
  int32_t* ir = in_rows.data();
  int32_t* orow = out_rows.data();
  parallel_chunks(chunks, chunks, [&](int64_t ci, int64_t, int64_t) {
    EdgeChunk& c = parts[ci];
    std::vector<int64_t>& cur = cursor[ci];
    for (size_t j = 0; j < c.kid.size(); ++j) {
      int64_t p = cur[c.kid[j]]++;
      ir[p] = c.in[j];
      orow[p] = c.out[j];
    }
    EdgeChunk().kid.swap(c.kid);
  });
  return edge_arrays(std::move(in_rows), std::move(out_rows), totals);
}

// A submanifold relation's mirrored offsets (those after the centre) each put in ascending
// output row, as the first half's come: then every offset runs through the output in order
// and the convolution takes the relation in output-row blocks (conv.cpp, out_block_rows). One
// stable counting sort by output row over the mirrored edges; each offset keeps its edges.
void mirrors_by_out_row(int32_t* ir, int32_t* orow, const std::vector<int64_t>& counts, int64_t n) {
  const int32_t K = static_cast<int32_t>(counts.size()), center = K / 2;
  std::vector<int64_t> base(K + 1, 0);
  for (int32_t k = 0; k < K; ++k) base[k + 1] = base[k] + counts[k];
  const int64_t b0 = base[center + 1], m = base[K] - b0;
  if (m == 0) return;
  std::vector<int64_t> at(n + 1, 0);
  for (int64_t e = b0; e < base[K]; ++e) ++at[orow[e] + 1];
  for (int64_t o = 0; o < n; ++o) at[o + 1] += at[o];
  std::vector<int32_t> order(m), kid(m);  // the mirrored edges by output row, offsets in order within a row
  for (int32_t k = center + 1; k < K; ++k)
    for (int64_t e = base[k]; e < base[k + 1]; ++e) {
      order[at[orow[e]]++] = static_cast<int32_t>(e - b0);
      kid[e - b0] = k;
    }
  const std::vector<int32_t> ti(ir + b0, ir + base[K]), to(orow + b0, orow + base[K]);
  std::vector<int64_t> cur(base.begin(), base.end() - 1);
  for (const int32_t j : order) {
    const int64_t a = cur[kid[j]]++;
    ir[a] = ti[j];
    orow[a] = to[j];
  }
}

struct AxisOffsets {
  int32_t size[3];
  int32_t off[3][64];  // offsets already multiplied by dilation
};

AxisOffsets make_axis_offsets(const Int3& size, const Int3& dilation, const char* op) {
  AxisOffsets ax;
  for (int a = 0; a < 3; ++a) {
    if (size[a] < 1 || size[a] > 64) {
      throw std::invalid_argument(std::string("[") + op + "] kernel size per axis must be in 1..64");
    }
    ax.size[a] = size[a];
    for (int32_t j = 0; j < size[a]; ++j) ax.off[a][j] = axis_offset(size[a], j) * dilation[a];
  }
  return ax;
}

}  // namespace

mx::array kernel_offsets(const Int3& size, const Int3& dilation) {
  AxisOffsets ax = make_axis_offsets(size, dilation, "kernel_offsets");
  const int K = size[0] * size[1] * size[2];
  OutArray<int32_t> out({K, 3}, mx::int32);
  int32_t* o = out.data();
  int k = 0;
  for (int32_t x = 0; x < size[0]; ++x)
    for (int32_t y = 0; y < size[1]; ++y)
      for (int32_t z = 0; z < size[2]; ++z, ++k) {
        o[3 * k] = ax.off[0][x];
        o[3 * k + 1] = ax.off[1][y];
        o[3 * k + 2] = ax.off[2][z];
      }
  return std::move(out).finish();
}

// A row's offsets are probed in batches of at most this many (half of a 5^3 kernel fits).
constexpr int32_t kMaxHalfOffsets = 128;

namespace {

// The submanifold relation by merging sorted rows (route cpu.merge_relation_submanifold: kernels
// of 27 offsets or more, z dilation up to 4): the rows sorted by (batch, x, y, z) once (LSD radix sort of the packed keys, which order
// lexicographically), then for each (dx, dy) of the first half of the kernel one sweep of the
// sorted rows with a second cursor on the shifted column, which only moves forward; no hash
// probe. The half's edges are then put in the order the probing builder emits them — per
// offset, by output row — by two stable counting sorts, the centre is every (r, r), and each
// mirrored offset is its half twin swapped, put by output row too (mirrors_by_out_row): the
// same arrays as the probing builder, bit for bit. On the KITTI scan at 0.05 m, one thread:
// a 5^3 map 55-75 -> 24-26 ms, 3^3 at 68,642 rows 32-38 -> 7-9 ms (the probing builder read
// the set's occupancy in 8^3 bricks first, then probed the occupied points; both are in
// docs/performance.md).
RelationArrays submanifold_by_merge(const CoordTable& in, const AxisOffsets& ax, const Int3& size, const char* op) {
  const int64_t n = in.n;
  const int32_t K = size[0] * size[1] * size[2], center = K / 2;
  const int32_t* c = in.data();
  // 1. The rows in key order.
  std::vector<uint64_t> key(n), key2(n);
  std::vector<int32_t> row(n), row2(n);
  uint64_t top = 0;
  bool sorted = true;
  for (int64_t i = 0; i < n; ++i) {
    const int32_t* r = c + 4 * i;
    in.packer.pack(r[0], r[1], r[2], r[3], key[i]);  // a stored row is inside its own box
    row[i] = static_cast<int32_t>(i);
    top |= key[i];
    sorted = sorted && (i == 0 || key[i - 1] < key[i]);
  }
  if (!sorted) {
    constexpr int kBits = 11;
    std::vector<int64_t> count((1 << kBits) + 1);
    for (int shift = 0; shift < 64 && (top >> shift) != 0; shift += kBits) {
      std::fill(count.begin(), count.end(), 0);
      for (int64_t i = 0; i < n; ++i) ++count[((key[i] >> shift) & ((1u << kBits) - 1)) + 1];
      for (int d = 0; d < (1 << kBits); ++d) count[d + 1] += count[d];
      for (int64_t i = 0; i < n; ++i) {
        const int64_t at = count[(key[i] >> shift) & ((1u << kBits) - 1)]++;
        key2[at] = key[i];
        row2[at] = row[i];
      }
      key.swap(key2);
      row.swap(row2);
    }
  }
  std::vector<std::array<int32_t, 4>> sc(n);  // the coordinates in key order
  for (int64_t p = 0; p < n; ++p) std::memcpy(sc[p].data(), c + 4 * static_cast<int64_t>(row[p]), 16);
  std::vector<uint64_t>().swap(key2);
  std::vector<int32_t>().swap(row2);
  // 2. Per (dx, dy) of the half kernel, one sweep: edges (k, in, out) in sweep order.
  const int32_t sz = size[2];
  const int64_t zlo = ax.off[2][0], zhi = ax.off[2][sz - 1], dz = sz > 1 ? ax.off[2][1] - ax.off[2][0] : 1;
  std::vector<std::pair<int32_t, int32_t>> columns;  // (i, j) with k0 = (i * Sy + j) * Sz < center + 1
  for (int32_t i = 0; i < size[0]; ++i)
    for (int32_t j = 0; j < size[1]; ++j)
      if ((i * size[1] + j) * sz <= center) columns.push_back({i, j});
  const int64_t nc = static_cast<int64_t>(columns.size());
  struct Found { std::vector<int32_t> k, in, out; };
  std::vector<Found> found(nc);
  parallel_chunks(nc, nc, [&](int64_t ci, int64_t, int64_t) {
    const int32_t i = columns[ci].first, j = columns[ci].second;
    const int32_t k0 = (i * size[1] + j) * sz;
    const int32_t lmax = k0 + sz - 1 < center ? sz : center - k0;  // the centre column: dz < 0 only
    const int64_t ox = ax.off[0][i], oy = ax.off[1][j];
    Found& f = found[ci];
    int64_t q = 0;
    const auto before = [&](const std::array<int32_t, 4>& a, int64_t b, int64_t x, int64_t y, int64_t z) {
      if (a[0] != b) return a[0] < b;
      if (a[1] != x) return a[1] < x;
      if (a[2] != y) return a[2] < y;
      return a[3] < z;
    };
    for (int64_t p = 0; p < n; ++p) {
      const auto& o = sc[p];
      const int64_t b = o[0], x = o[1] + ox, y = o[2] + oy, z0 = o[3] + zlo;
      while (q < n && before(sc[q], b, x, y, z0)) ++q;
      for (int64_t r = q; r < n; ++r) {
        const auto& m = sc[r];
        if (m[0] != b || m[1] != x || m[2] != y || m[3] > o[3] + zhi) break;
        const int64_t d = m[3] - z0;
        if (d % dz != 0) continue;
        const int32_t l = static_cast<int32_t>(d / dz);
        if (l >= lmax) break;
        f.k.push_back(k0 + l);
        f.in.push_back(row[r]);
        f.out.push_back(row[p]);
      }
    }
  });
  // 3. The half's edges by offset, each offset's by output row (two stable counting sorts).
  int64_t half = 0;
  for (const Found& f : found) half += static_cast<int64_t>(f.k.size());
  std::vector<int64_t> by_out(n + 1, 0);
  for (const Found& f : found)
    for (int32_t o : f.out) ++by_out[o + 1];
  for (int64_t o = 0; o < n; ++o) by_out[o + 1] += by_out[o];
  std::vector<int32_t> tk(half), ti(half), to(half);
  for (const Found& f : found)
    for (size_t e = 0; e < f.k.size(); ++e) {
      const int64_t at = by_out[f.out[e]]++;
      tk[at] = f.k[e];
      ti[at] = f.in[e];
      to[at] = f.out[e];
    }
  std::vector<Found>().swap(found);
  std::vector<int64_t> counts(K, 0);
  for (int32_t k : tk) ++counts[k];
  counts[center] = n;
  for (int32_t k = 0; k < center; ++k) counts[K - 1 - k] = counts[k];
  std::vector<int64_t> base(K + 1, 0);
  for (int32_t k = 0; k < K; ++k) base[k + 1] = base[k] + counts[k];
  const int64_t E = base[K];
  checked_rows(E, op);
  OutArray<int32_t> in_rows({static_cast<int>(E)}, mx::int32);
  OutArray<int32_t> out_rows({static_cast<int>(E)}, mx::int32);
  int32_t* ir = in_rows.data();
  int32_t* orow = out_rows.data();
  std::vector<int64_t> cur(base.begin(), base.end() - 1);
  for (int64_t e = 0; e < half; ++e) {
    const int64_t a = cur[tk[e]]++, b = cur[K - 1 - tk[e]]++;
    ir[a] = ti[e];
    orow[a] = to[e];
    ir[b] = to[e];  // the mirrored offset: the same edge reversed
    orow[b] = ti[e];
  }
  for (int64_t r = 0; r < n; ++r) ir[base[center] + r] = orow[base[center] + r] = static_cast<int32_t>(r);
  mirrors_by_out_row(ir, orow, counts, n);
  return edge_arrays(std::move(in_rows), std::move(out_rows), counts);
}


}  // namespace

RelationArrays relation_submanifold(const CoordTable& in, const Int3& size, const Int3& dilation, bool merge) {
  const char* op = "submanifold_kernel_relation";
  for (int a = 0; a < 3; ++a) {
    if (size[a] % 2 == 0) throw std::invalid_argument("[submanifold_kernel_relation] kernel size must be odd");
  }
  AxisOffsets ax = make_axis_offsets(size, dilation, op);
  const int32_t K = size[0] * size[1] * size[2];
  const int32_t center = K / 2;  // offsets are symmetric: offset K-1-k is -offset k
  if (merge) return submanifold_by_merge(in, ax, size, op);
  in.hashed();
  std::vector<std::array<int32_t, 3>> offs(K);
  int k = 0;
  for (int32_t x = 0; x < size[0]; ++x)
    for (int32_t y = 0; y < size[1]; ++y)
      for (int32_t z = 0; z < size[2]; ++z, ++k) offs[k] = {ax.off[0][x], ax.off[1][y], ax.off[2][z]};
  const int32_t* c = in.data();
  const HashTable& table = in.table;
  RelationArrays r = bin_edges(
      in.n, K, K,
      [&](int64_t o, Emitter& emit) {
        const int32_t* r = c + 4 * o;
        const int32_t orow = static_cast<int32_t>(o);
        emit(center, orow, orow);
        // A row's probes in offset order: every key and home slot first, prefetched, then the
        // probes (at most kMaxHalfOffsets at a time), so that one row's misses overlap.
        uint64_t keys[kMaxHalfOffsets], homes[kMaxHalfOffsets];
        int32_t probed[kMaxHalfOffsets];
        int32_t np = 0;
        auto flush = [&] {
          for (int32_t j = 0; j < np; ++j) {
            const int32_t i = table.find_at(keys[j], homes[j]);
            if (i >= 0) {
              emit(probed[j], i, orow);
              emit(K - 1 - probed[j], orow, i);
            }
          }
          np = 0;
        };
        auto probe = [&](int32_t kk) {
          uint64_t key = 0;
          if (!in.packer.pack(r[0], int64_t(r[1]) + offs[kk][0], int64_t(r[2]) + offs[kk][1],
                              int64_t(r[3]) + offs[kk][2], key)) {
            return;  // outside the set's box: no row there
          }
          keys[np] = key;
          homes[np] = table.home(key);
          table.prefetch(homes[np]);
          probed[np++] = kk;
          if (np == kMaxHalfOffsets) flush();
        };
        for (int32_t kk = 0; kk < center; ++kk) probe(kk);
        flush();
      },
      op);
  const int32_t* cnt = r.counts.data<int32_t>();
  mirrors_by_out_row(r.in_rows.data<int32_t>(), r.out_rows.data<int32_t>(), std::vector<int64_t>(cnt, cnt + K), in.n);
  return r;
}

RelationArrays relation_forward(const CoordTable& in, const CoordTable& out, const Int3& size,
                                const Int3& stride, const Int3& padding, const Int3& dilation) {
  const char* op = "kernel_relation";
  AxisOffsets ax = make_axis_offsets(size, dilation, op);
  const int32_t K = size[0] * size[1] * size[2];
  const int32_t* c = in.data();
  out.hashed();
  return bin_edges(
      in.n, K, 1,
      [&](int64_t i, Emitter& emit) {
        const int32_t* r = c + 4 * i;
        // Per axis, the offsets j with (x - off_j + p) divisible by s, and o = (...) / s.
        int32_t nj[3];
        int32_t jj[3][64];
        int64_t oo[3][64];
        for (int a = 0; a < 3; ++a) {
          nj[a] = 0;
          for (int32_t j = 0; j < ax.size[a]; ++j) {
            int64_t v = int64_t(r[a + 1]) - ax.off[a][j] + padding[a];
            int64_t q = floordiv(v, stride[a]);
            if (q * stride[a] == v) {
              jj[a][nj[a]] = j;
              oo[a][nj[a]++] = q;
            }
          }
        }
        for (int32_t x = 0; x < nj[0]; ++x)
          for (int32_t y = 0; y < nj[1]; ++y)
            for (int32_t z = 0; z < nj[2]; ++z) {
              int32_t o = out.find(r[0], oo[0][x], oo[1][y], oo[2][z]);
              if (o >= 0) emit((jj[0][x] * size[1] + jj[1][y]) * size[2] + jj[2][z], int32_t(i), o);
            }
      },
      op);
}

RelationArrays relation_transposed(const CoordTable& in, const CoordTable* out, const Int3& size,
                                   const Int3& stride, const Int3& padding, const Int3& dilation) {
  const char* op = "transposed_kernel_relation";
  AxisOffsets ax = make_axis_offsets(size, dilation, op);
  const int32_t K = size[0] * size[1] * size[2];
  std::vector<std::array<int32_t, 3>> offs(K);
  int k = 0;
  for (int32_t x = 0; x < size[0]; ++x)
    for (int32_t y = 0; y < size[1]; ++y)
      for (int32_t z = 0; z < size[2]; ++z, ++k) offs[k] = {ax.off[0][x], ax.off[1][y], ax.off[2][z]};
  const int32_t* c = in.data();
  auto target = [&](const int32_t* r, int32_t kk, int a) {
    return int64_t(r[a + 1]) * stride[a] + offs[kk][a] - padding[a];
  };
  if (out != nullptr) {
    out->hashed();
    return bin_edges(
        in.n, K, K,
        [&](int64_t s, Emitter& emit) {
          const int32_t* r = c + 4 * s;
          for (int32_t kk = 0; kk < K; ++kk) {
            int32_t t = out->find(r[0], target(r, kk, 0), target(r, kk, 1), target(r, kk, 2));
            if (t >= 0) emit(kk, int32_t(s), t);
          }
        },
        op);
  }
  // Generated support: every (input row, offset) pair is an edge.
  Bounds b;
  if (in.n > 0) {
    b.lo[0] = in.bounds.lo[0];
    b.hi[0] = in.bounds.hi[0];
    for (int a = 0; a < 3; ++a) {
      int64_t omin = INT64_MAX, omax = INT64_MIN;
      for (int32_t j = 0; j < size[a]; ++j) {
        omin = std::min<int64_t>(omin, ax.off[a][j]);
        omax = std::max<int64_t>(omax, ax.off[a][j]);
      }
      b.lo[a + 1] = in.bounds.lo[a + 1] * stride[a] + omin - padding[a];
      b.hi[a + 1] = in.bounds.hi[a + 1] * stride[a] + omax - padding[a];
    }
  }
  const int64_t n = in.n;
  checked_rows(n * K, op);
  UniqueResult u = unique_first(
      n * K, b,
      [&](int64_t idx, int64_t* o) {
        const int64_t s = idx / K;
        const int32_t kk = static_cast<int32_t>(idx % K);
        const int32_t* r = c + 4 * s;
        o[0] = r[0];
        for (int a = 0; a < 3; ++a) o[a + 1] = target(r, kk, a);
      },
      op, false);
  OutArray<int32_t> in_rows({static_cast<int>(n * K)}, mx::int32);
  OutArray<int32_t> out_rows({static_cast<int>(n * K)}, mx::int32);
  int32_t* ir = in_rows.data();
  int32_t* orow = out_rows.data();
  parallel_for(n, [&](int64_t b0, int64_t e0) {
    for (int32_t kk = 0; kk < K; ++kk)
      for (int64_t s = b0; s < e0; ++s) {
        ir[kk * n + s] = static_cast<int32_t>(s);
        orow[kk * n + s] = u.inverse[s * K + kk];
      }
  });
  RelationArrays res = edge_arrays(std::move(in_rows), std::move(out_rows), std::vector<int64_t>(K, n));
  res.out_table = std::move(u.table);
  return res;
}

RelationArrays relation_exclusive(const CoordTable& in, const int32_t* inverse, const Int3& stride) {
  const int32_t K = stride[0] * stride[1] * stride[2];
  const int32_t* c = in.data();
  const int64_t s0 = stride[0], s1 = stride[1], s2 = stride[2];
  auto mod = [](int64_t v, int64_t s) { return v - floordiv(v, s) * s; };
  return bin_edges(
      in.n, K, 1,
      [&](int64_t i, Emitter& emit) {
        const int32_t* r = c + 4 * i;
        const int32_t k = static_cast<int32_t>((mod(r[1], s0) * s1 + mod(r[2], s1)) * s2 + mod(r[3], s2));
        emit(k, static_cast<int32_t>(i), inverse[i]);
      },
      "kernel_relation");
}

}  // namespace lattice
