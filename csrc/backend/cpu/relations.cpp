// CPU relation builders. Each builder walks source rows in fixed chunks, probes
// the hash table of the partner set, and bins edges by kernel offset; chunk
// order fixes the edge order, so results do not depend on the thread count.
#include "backend/cpu/relations.h"

#include "backend/cpu/coords.h"

#include <algorithm>
#include <numeric>
#include <optional>

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
  OutArray<int32_t> counts({K}, mx::int32);
  for (int32_t k = 0; k < K; ++k) counts.data()[k] = static_cast<int32_t>(totals[k]);
  RelationArrays r;
  r.in_rows = std::move(in_rows).finish();
  r.out_rows = std::move(out_rows).finish();
  r.counts = std::move(counts).finish();
  return r;
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

// The occupancy of a set's points in bricks of 8^3 lattice points: one bit per point, 64 bytes
// (one cache line) per brick, one byte per (x, y) column. The bricks are the set's downsample
// by 8 (`downsample`: its table finds a brick, its inverse gives each row's brick). The
// submanifold builder reads a row's window from the few bricks around it before it probes the
// set's table: on a scan most offsets meet no point (KITTI at 0.05 m: 6.5 edges per row of a
// 5^3 kernel's 125), and most (x, y) columns of a window are empty.
class Bricks {
 public:
  static constexpr int kShift = 3;
  static constexpr int64_t kBytes = 64;  // 8^3 bits: byte (x & 7) * 8 + (y & 7), bit z & 7

  explicit Bricks(const CoordTable& t) : cells_(downsample(t, {1 << kShift, 1 << kShift, 1 << kShift})) {
    bytes_.assign(static_cast<size_t>(cells_.table->n) * kBytes, 0);
    const int32_t* c = t.data();
    const int32_t* brick = cells_.inverse.data();
    for (int64_t i = 0; i < t.n; ++i) {
      const int32_t* r = c + 4 * i;
      bytes_[brick[i] * kBytes + column(r[1], r[2])] |= static_cast<uint8_t>(1u << (r[3] & 7));
    }
  }

  // The 64 occupancy bytes of brick (b, bx, by, bz) (brick coordinates: lattice coordinates
  // >> kShift), or nullptr where no point of the set lies in it.
  inline const uint8_t* find(int64_t b, int64_t bx, int64_t by, int64_t bz) const {
    const int32_t i = cells_.table->find(b, bx, by, bz);
    return i < 0 ? nullptr : bytes_.data() + i * kBytes;
  }

  // The byte of the (x, y) column inside its brick; bit z & 7 of it is point (x, y, z).
  static inline int column(int64_t x, int64_t y) { return static_cast<int>(((x & 7) << 3) | (y & 7)); }

 private:
  UniqueResult cells_;
  std::vector<uint8_t> bytes_;
};

// Kernels of at least this volume read the bricks first (KITTI at 0.05 m, docs/performance.md:
// k = 5 2.2x faster, k = 3 about the same); a window wider than kBrickMaxWindow points on an
// axis (more than 3 bricks) is probed directly.
constexpr int32_t kBrickMinVolume = 27;
constexpr int64_t kBrickMaxWindow = 17;

}  // namespace

RelationArrays relation_submanifold(const CoordTable& in, const Int3& size, const Int3& dilation) {
  const char* op = "submanifold_kernel_relation";
  for (int a = 0; a < 3; ++a) {
    if (size[a] % 2 == 0) throw std::invalid_argument("[submanifold_kernel_relation] kernel size must be odd");
  }
  AxisOffsets ax = make_axis_offsets(size, dilation, op);
  const int32_t K = size[0] * size[1] * size[2];
  const int32_t center = K / 2;  // offsets are symmetric: offset K-1-k is -offset k
  in.hashed();
  std::vector<std::array<int32_t, 3>> offs(K);
  int k = 0;
  for (int32_t x = 0; x < size[0]; ++x)
    for (int32_t y = 0; y < size[1]; ++y)
      for (int32_t z = 0; z < size[2]; ++z, ++k) offs[k] = {ax.off[0][x], ax.off[1][y], ax.off[2][z]};
  const int32_t* c = in.data();
  const HashTable& table = in.table;
  // The window's extent per axis (offsets are symmetric: -lo .. lo).
  int64_t reach[3];
  bool narrow = true;
  for (int a = 0; a < 3; ++a) {
    reach[a] = ax.off[a][size[a] - 1];
    narrow = narrow && 2 * reach[a] + 1 <= kBrickMaxWindow;
  }
  std::optional<Bricks> bricks;
  if (K >= kBrickMinVolume && narrow && in.n > 0) bricks.emplace(in);
  return bin_edges(
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
        if (!bricks) {
          for (int32_t kk = 0; kk < center; ++kk) probe(kk);
          flush();
          return;
        }
        // The bricks of the row's window (at most 3 per axis), looked up once. Per (x, y)
        // column of the window, the occupancy bytes of its z bricks: an empty column costs no
        // more, and only the occupied points of the others are probed.
        constexpr int S = Bricks::kShift;
        int64_t first[3], span[3];
        for (int a = 0; a < 3; ++a) {
          first[a] = (r[a + 1] - reach[a]) >> S;
          span[a] = ((r[a + 1] + reach[a]) >> S) - first[a] + 1;
        }
        const uint8_t* around[27];
        for (int64_t i = 0; i < span[0]; ++i)
          for (int64_t j = 0; j < span[1]; ++j)
            for (int64_t l = 0; l < span[2]; ++l)
              around[(i * span[1] + j) * span[2] + l] = bricks->find(r[0], first[0] + i, first[1] + j, first[2] + l);
        for (int32_t i = 0; i < size[0]; ++i) {
          const int64_t x = r[1] + ax.off[0][i];
          for (int32_t j = 0; j < size[1]; ++j) {
            const int32_t k0 = (i * size[1] + j) * size[2];
            if (k0 >= center) break;
            const int64_t y = r[2] + ax.off[1][j];
            const uint8_t* const* zs = around + (((x >> S) - first[0]) * span[1] + ((y >> S) - first[1])) * span[2];
            const int cell = Bricks::column(x, y);
            uint8_t column[3] = {0, 0, 0};
            uint8_t any = 0;
            for (int64_t l = 0; l < span[2]; ++l) {
              column[l] = zs[l] == nullptr ? 0 : zs[l][cell];
              any |= column[l];
            }
            if (any == 0) continue;
            for (int32_t l = 0; l < size[2] && k0 + l < center; ++l) {
              const int64_t z = r[3] + ax.off[2][l];
              if ((column[(z >> S) - first[2]] >> (z & 7)) & 1) probe(k0 + l);
            }
          }
        }
        flush();
      },
      op);
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
  RelationArrays res;
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
  OutArray<int32_t> counts({K}, mx::int32);
  std::fill(counts.data(), counts.data() + K, static_cast<int32_t>(n));
  res.in_rows = std::move(in_rows).finish();
  res.out_rows = std::move(out_rows).finish();
  res.counts = std::move(counts).finish();
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
