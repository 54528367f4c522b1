// CPU coordinate functions: tables, lookups, downsampling, set operations,
// Morton codes and point quantisation.
#include "backend/cpu/coords.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <numeric>

#include "core/clones.h"
#include "core/message.h"

namespace lattice {

Bounds coord_bounds(const int32_t* c, int64_t n, bool* increasing) {
  Bounds out;
  if (increasing) *increasing = true;
  if (n == 0) return out;
  const int64_t chunks = chunk_count(n, 1 << 15);
  std::vector<Bounds> part(chunks);
  std::vector<uint8_t> sorted(chunks, 1);
  parallel_chunks(n, chunks, [&](int64_t ci, int64_t b, int64_t e) {
    Bounds bb;
    for (int a = 0; a < 4; ++a) {
      bb.lo[a] = INT64_MAX;
      bb.hi[a] = INT64_MIN;
    }
    bool up = true;
    for (int64_t i = b; i < e; ++i) {
      for (int a = 0; a < 4; ++a) {
        int64_t v = c[4 * i + a];
        bb.lo[a] = std::min(bb.lo[a], v);
        bb.hi[a] = std::max(bb.hi[a], v);
      }
      if (increasing && up && i > 0)
        up = std::lexicographical_compare(c + 4 * (i - 1), c + 4 * i, c + 4 * i, c + 4 * i + 4);
    }
    part[ci] = bb;
    sorted[ci] = up;
  });
  out = part[0];
  for (auto& p : part) {
    for (int a = 0; a < 4; ++a) {
      out.lo[a] = std::min(out.lo[a], p.lo[a]);
      out.hi[a] = std::max(out.hi[a], p.hi[a]);
    }
  }
  if (increasing) *increasing = std::all_of(sorted.begin(), sorted.end(), [](uint8_t v) { return v != 0; });
  return out;
}

static std::string fmt_coord(const int32_t* c) {
  lattice::Message s;
  s << "(" << c[0] << ", " << c[1] << ", " << c[2] << ", " << c[3] << ")";
  return s.str();
}

namespace {

// Inserts every row: keys and home slots packed in parallel, then one pass in row order
// on one thread, without atomics, prefetching home slots ahead (see unique_first).
// Returns the first row whose coordinate an earlier row holds, or -1.
int64_t insert_rows(const CoordTable& t) {
  constexpr int64_t kAhead = 16;
  const int32_t* c = t.data();
  const int64_t n = t.n;
  HashTable& ht = t.table;
  std::unique_ptr<uint64_t[]> keys(new uint64_t[n]);
  std::unique_ptr<uint32_t[]> home(new uint32_t[n]);
  parallel_for(n, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      uint64_t key = 0;
      t.packer.pack(c[4 * i], c[4 * i + 1], c[4 * i + 2], c[4 * i + 3], key);
      keys[i] = key;
      home[i] = static_cast<uint32_t>(ht.home(key));
    }
  });
  for (int64_t i = 0; i < n; ++i) {
    if (i + kAhead < n) ht.prefetch(home[i + kAhead]);
    bool fresh;
    Slot& slot = ht.place(keys[i], home[i], fresh);
    if (!fresh) return i;
    slot.value = static_cast<int32_t>(i);
  }
  return -1;
}

}  // namespace

void hash_rows(const CoordTable& t) { insert_rows(t); }

CoordTablePtr build_coord_table(const mx::array& coords_in, const char* op) {
  auto t = std::make_shared<CoordTable>();
  t->coords = as_coords(coords_in, op);
  t->n = t->coords.shape(0);
  const int32_t* c = t->data();
  bool increasing = false;  // rows strictly increasing in (batch, x, y, z): unique, no hashing needed
  t->bounds = coord_bounds(c, t->n, &increasing);
  if (!t->bounds.empty() && t->bounds.lo[0] < 0) {
    for (int64_t i = 0; i < t->n; ++i) {
      if (c[4 * i] < 0) {
        lattice::Message msg;
        msg << "[" << op << "] batch indices must be non-negative, got " << c[4 * i] << " at row " << i;
        throw std::invalid_argument(msg.str());
      }
    }
  }
  t->packer = Packer(t->bounds, op);
  if (increasing) {
    t->defer_hash();  // unique already: hashed on first use
    return t;
  }
  t->table.reset(t->n);
  const int64_t dup = insert_rows(*t);
  if (dup >= 0) {
    // The first row that repeats a coordinate, and the row it repeats.
    const int32_t first = t->find(c[4 * dup], c[4 * dup + 1], c[4 * dup + 2], c[4 * dup + 3]);
    lattice::Message msg;
    msg << "[" << op << "] duplicate active coordinates: rows " << first << " and " << dup << " both hold "
        << fmt_coord(c + 4 * dup) << " (deduplicate with sparse_quantize or sparse_from_coordinates)";
    throw std::invalid_argument(msg.str());
  }
  return t;
}

mx::array lookup_rows(const CoordTable& t, const mx::array& queries_in) {
  mx::array q = as_coords(queries_in, "lookup_coords", "queries");
  t.hashed();
  const int64_t m = q.shape(0);
  const int32_t* qc = q.data<int32_t>();
  OutArray<int32_t> out({static_cast<int>(m)}, mx::int32);
  int32_t* o = out.data();
  parallel_for(m, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      const int32_t* r = qc + 4 * i;
      o[i] = t.find(r[0], r[1], r[2], r[3]);
    }
  });
  return std::move(out).finish();
}

mx::array to_array(const std::vector<int32_t>& v) {
  OutArray<int32_t> out({static_cast<int>(v.size())}, mx::int32);
  std::copy(v.begin(), v.end(), out.data());
  return std::move(out).finish();
}

namespace {

// floor(v / s) and v - s * floor(v / s) for one axis of coordinates >= lo: a shift and a
// mask for powers of two, else a multiply by a precomputed reciprocal of s (exact for the
// offsets v - base * s < 2^33 that int32 coordinates give; no division per row).
struct AxisDiv {
  int64_t s, base;  // base = floor(lo / s)
  int shift = -1;   // log2(s) for powers of two
  int k = 0;
  uint64_t m = 0;   // ceil(2^k / s)

  AxisDiv(int32_t stride, int64_t lo) : s(stride), base(floordiv(lo, stride)) {
    const uint32_t us = static_cast<uint32_t>(stride);
    if (std::has_single_bit(us)) {
      shift = std::countr_zero(us);
    } else {
      k = 33 + static_cast<int>(std::bit_width(us));  // 2^k >= 2^33 * s
      m = static_cast<uint64_t>(((static_cast<unsigned __int128>(1) << k) + s - 1) / s);
    }
  }
  inline int64_t div(int32_t v) const {
    if (shift >= 0) return v >> shift;  // arithmetic shift floors
    const uint64_t n = static_cast<uint64_t>(v - base * s);
    return base + static_cast<int64_t>((static_cast<unsigned __int128>(n) * m) >> k);
  }
  inline int32_t mod(int32_t v) const {
    if (shift >= 0) return v & static_cast<int32_t>(s - 1);
    return static_cast<int32_t>(v - div(v) * s);
  }
};

}  // namespace

UniqueResult downsample(const CoordTable& t, const std::array<int32_t, 3>& stride) {
  const char* op = "downsample_coords";
  Bounds b;
  if (t.n > 0) {
    b.lo[0] = t.bounds.lo[0];
    b.hi[0] = t.bounds.hi[0];
    for (int a = 0; a < 3; ++a) {
      b.lo[a + 1] = floordiv(t.bounds.lo[a + 1], stride[a]);
      b.hi[a + 1] = floordiv(t.bounds.hi[a + 1], stride[a]);
    }
  }
  const int32_t* c = t.data();
  const AxisDiv dx(stride[0], t.bounds.lo[1]), dy(stride[1], t.bounds.lo[2]), dz(stride[2], t.bounds.lo[3]);
  auto cell = [&](int64_t i, int64_t* out) {
    const int32_t* r = c + 4 * i;
    out[0] = r[0];
    out[1] = dx.div(r[1]);
    out[2] = dy.div(r[2]);
    out[3] = dz.div(r[3]);
  };
  const int64_t volume = int64_t(stride[0]) * stride[1] * stride[2];
  if (volume > kMaxWindowVolume) return unique_first(t.n, b, cell, op, false);
  // The rows of a set are unique, so the rows of one cell have distinct offsets in it.
  return unique_first(t.n, b, cell, op, false, [&](int64_t i) {
    const int32_t* r = c + 4 * i;
    return (dx.mod(r[1]) * stride[1] + dy.mod(r[2])) * stride[2] + dz.mod(r[3]);
  });
}

UniqueResult unique_coords(const mx::array& coords_in) {
  mx::array coords = as_coords(coords_in, "unique_coords");
  const int32_t* c = coords.data<int32_t>();
  const int64_t n = coords.shape(0);
  return unique_first(
      n, coord_bounds(c, n),
      [&](int64_t i, int64_t* out) {
        for (int a = 0; a < 4; ++a) out[a] = c[4 * i + a];
      },
      "unique_coords", true);
}

UniqueResult union_coords(const CoordTable& lhs, const CoordTable& rhs) {
  Bounds b;
  if (lhs.n == 0) b = rhs.bounds;
  else if (rhs.n == 0) b = lhs.bounds;
  else {
    for (int a = 0; a < 4; ++a) {
      b.lo[a] = std::min(lhs.bounds.lo[a], rhs.bounds.lo[a]);
      b.hi[a] = std::max(lhs.bounds.hi[a], rhs.bounds.hi[a]);
    }
  }
  const int32_t* l = lhs.data();
  const int32_t* r = rhs.data();
  const int64_t nl = lhs.n;
  return unique_first(
      lhs.n + rhs.n, b,
      [&](int64_t i, int64_t* out) {
        const int32_t* src = i < nl ? l + 4 * i : r + 4 * (i - nl);
        for (int a = 0; a < 4; ++a) out[a] = src[a];
      },
      "union_coords", false);
}

mx::array intersection_rows(const CoordTable& lhs, const CoordTable& rhs) {
  const int32_t* c = lhs.data();
  rhs.hashed();
  std::vector<uint8_t> keep(lhs.n);
  parallel_for(lhs.n, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      const int32_t* r = c + 4 * i;
      keep[i] = rhs.find(r[0], r[1], r[2], r[3]) >= 0;
    }
  });
  std::vector<int32_t> rows;
  rows.reserve(lhs.n);
  for (int64_t i = 0; i < lhs.n; ++i)
    if (keep[i]) rows.push_back(static_cast<int32_t>(i));
  return to_array(rows);
}

// ---- Morton codes -------------------------------------------------------------

static inline uint64_t spread21(uint64_t v) {
  v &= 0x1fffffULL;
  v = (v | (v << 32)) & 0x1f00000000ffffULL;
  v = (v | (v << 16)) & 0x1f0000ff0000ffULL;
  v = (v | (v << 8)) & 0x100f00f00f00f00fULL;
  v = (v | (v << 4)) & 0x10c30c30c30c30c3ULL;
  v = (v | (v << 2)) & 0x1249249249249249ULL;
  return v;
}

static constexpr int64_t kMortonBias = 1 << 20;

static void morton_fill(const int32_t* c, int64_t n, uint64_t* out) {
  std::atomic<int64_t> bad{-1};
  parallel_for(n, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      const int32_t* r = c + 4 * i;
      uint64_t v[3];
      for (int a = 0; a < 3; ++a) {
        int64_t x = static_cast<int64_t>(r[a + 1]) + kMortonBias;
        if (x < 0 || x >= 2 * kMortonBias) {
          int64_t expected = -1;
          bad.compare_exchange_strong(expected, i);
          x = 0;
        }
        v[a] = static_cast<uint64_t>(x);
      }
      out[i] = (spread21(v[0]) << 2) | (spread21(v[1]) << 1) | spread21(v[2]);
    }
  });
  if (bad.load() >= 0) {
    lattice::Message msg;
    msg << "[morton_codes] coordinates must lie in [-2^20, 2^20) for 63-bit Morton codes; row "
        << bad.load() << " holds " << fmt_coord(c + 4 * bad.load());
    throw std::overflow_error(msg.str());
  }
}

mx::array morton_codes(const mx::array& coords_in) {
  mx::array coords = as_coords(coords_in, "morton_codes");
  const int64_t n = coords.shape(0);
  OutArray<uint64_t> out({static_cast<int>(n)}, mx::uint64);
  morton_fill(coords.data<int32_t>(), n, out.data());
  return std::move(out).finish();
}

mx::array morton_order(const mx::array& coords_in) {
  mx::array coords = as_coords(coords_in, "morton_order");
  const int64_t n = coords.shape(0);
  const int32_t* c = coords.data<int32_t>();
  std::vector<uint64_t> codes(n);
  morton_fill(c, n, codes.data());
  OutArray<int32_t> out({static_cast<int>(n)}, mx::int32);
  int32_t* o = out.data();
  std::iota(o, o + n, 0);
  std::stable_sort(o, o + n, [&](int32_t a, int32_t b) {
    if (c[4 * a] != c[4 * b]) return c[4 * a] < c[4 * b];
    return codes[a] < codes[b];
  });
  return std::move(out).finish();
}

// ---- Point quantisation -------------------------------------------------------

// One chunk of quantize_coords, typed on the point dtype so that the loop has no branch
// per element: floor((p - origin) / voxel_size) in double (exact for float32 input, the
// reference's arithmetic), the int32 range test folded into one flag per point, bounds
// as running min / max. Returns the first bad point of the chunk, or -1.
template <class T>
[[gnu::always_inline]] inline int64_t quantize_chunk(const T* p, const int32_t* bidx, int64_t b, int64_t e, const double* org,
                              const double* vs, int32_t* q, Bounds& bb) {
  int64_t lo[4], hi[4];
  for (int a = 0; a < 4; ++a) {
    lo[a] = INT64_MAX;
    hi[a] = INT64_MIN;
  }
  int64_t bad = -1;
  for (int64_t i = b; i < e; ++i) {
    const int64_t bi = bidx ? bidx[i] : 0;
    bool ok = bi >= 0;
    int64_t v[4] = {bi, 0, 0, 0};
    for (int a = 0; a < 3; ++a) {
      const double f = std::floor((static_cast<double>(p[3 * i + a]) - org[a]) / vs[a]);
      const bool in = f >= INT32_MIN && f <= INT32_MAX;  // false for NaN
      ok = ok && in;
      v[a + 1] = in ? static_cast<int64_t>(f) : 0;
    }
    if (!ok) {
      if (bad < 0) bad = i;
      v[0] = v[1] = v[2] = v[3] = 0;
    }
    for (int a = 0; a < 4; ++a) {
      q[4 * i + a] = static_cast<int32_t>(v[a]);
      lo[a] = std::min(lo[a], v[a]);
      hi[a] = std::max(hi[a], v[a]);
    }
  }
  for (int a = 0; a < 4; ++a) {
    bb.lo[a] = lo[a];
    bb.hi[a] = hi[a];
  }
  return bad;
}

// The loop compiled twice on x86-64 (LATTICE_X86_CLONES, core/clones.h): for x86-64-v3
// machines (floor is one vroundsd; the loop stays scalar) and for the baseline the wheel
// targets, where floor is a branchy software sequence (perf on the dense indoor frame: the
// loop fell from 48 % to 31 % of sparse_quantize's samples).

LATTICE_X86_CLONES static int64_t quantize_chunk_f32(const float* p, const int32_t* bidx, int64_t b, int64_t e,
                                                     const double* org, const double* vs, int32_t* q,
                                                     Bounds& bb) {
  return quantize_chunk(p, bidx, b, e, org, vs, q, bb);
}

LATTICE_X86_CLONES static int64_t quantize_chunk_f64(const double* p, const int32_t* bidx, int64_t b, int64_t e,
                                                     const double* org, const double* vs, int32_t* q,
                                                     Bounds& bb) {
  return quantize_chunk(p, bidx, b, e, org, vs, q, bb);
}

Bounds quantize_coords(const PointRows& points, const std::array<double, 3>& voxel_size,
                       const std::array<double, 3>& origin, const int32_t* bidx, std::vector<int32_t>& q,
                       const char* op) {
  const int64_t n = points.n;
  auto p_at = [&](int64_t j) { return points.at(j); };
  q.resize(4 * n);
  const int64_t chunks = chunk_count(n, 1 << 14);
  std::vector<Bounds> part(chunks);
  std::vector<int64_t> first_bad(chunks, -1);
  parallel_chunks(n, chunks, [&](int64_t ci, int64_t b, int64_t e) {
    first_bad[ci] = points.f64 ? quantize_chunk_f64(points.f64, bidx, b, e, origin.data(), voxel_size.data(),
                                                    q.data(), part[ci])
                               : quantize_chunk_f32(points.f32, bidx, b, e, origin.data(), voxel_size.data(),
                                                    q.data(), part[ci]);
  });
  for (int64_t i : first_bad) {
    if (i < 0) continue;  // chunks in point order: the first bad point of all
    lattice::Message msg;
    msg << "[" << op << "] point " << i << " (" << p_at(3 * i) << ", " << p_at(3 * i + 1) << ", "
        << p_at(3 * i + 2) << ")";
    if (bidx && bidx[i] < 0) msg << " has a negative batch index " << bidx[i];
    else msg << " is not finite or its voxel index overflows int32";
    throw std::invalid_argument(msg.str());
  }
  Bounds b;
  if (n > 0) {
    b = part[0];
    for (auto& pp : part)
      for (int a = 0; a < 4; ++a) {
        b.lo[a] = std::min(b.lo[a], pp.lo[a]);
        b.hi[a] = std::max(b.hi[a], pp.hi[a]);
      }
  }
  return b;
}

namespace {

constexpr int kCellBlock = 64;             // points per block of the vectorised passes
constexpr int kCellFlat = 3 * kCellBlock;  // their coordinates

// The extremes of each coordinate over points b..e, as one flat run per block against
// per-position accumulators (so the loop vectorises), and whether every value is a number.
template <class T>
[[gnu::always_inline]] inline bool extremes(const T* p, int64_t b, int64_t e, T* lo3, T* hi3) {
  T lo[kCellFlat], hi[kCellFlat];
  for (int j = 0; j < kCellFlat; ++j) lo[j] = hi[j] = p[3 * b + j % 3];
  int nan = 0;
  for (int64_t s = b; s < e; s += kCellBlock) {
    const int64_t flat = 3 * std::min<int64_t>(kCellBlock, e - s);
    const T* ps = p + 3 * s;
    for (int64_t j = 0; j < flat; ++j) {
      const T x = ps[j];
      nan |= x != x;
      lo[j] = x < lo[j] ? x : lo[j];
      hi[j] = x > hi[j] ? x : hi[j];
    }
  }
  for (int a = 0; a < 3; ++a) {
    lo3[a] = hi3[a] = p[3 * b + a];
    for (int j = a; j < kCellFlat; j += 3) {
      lo3[a] = std::min(lo3[a], lo[j]);
      hi3[a] = std::max(hi3[a], hi[j]);
    }
  }
  return nan == 0;
}

// Cells of a block: floor((p - origin) / voxel_size) in double for `flat` coordinates, with
// the origin and size repeated per position (o, v). The cells are known to lie inside int32
// (cell_bounds), so floor is the truncation less one where it rounded up: no branch, and the
// loop vectorises (two divisions at a time on the baseline, four on x86-64-v3).
template <class T>
[[gnu::always_inline]] inline void cells(const T* p, int64_t flat, const double* o, const double* v, int32_t* c) {
  for (int64_t j = 0; j < flat; ++j) {
    const double d = (static_cast<double>(p[j]) - o[j]) / v[j];
    const int32_t t = static_cast<int32_t>(d);
    c[j] = t - (d < static_cast<double>(t));
  }
}

LATTICE_X86_CLONES bool extremes_f32(const float* p, int64_t b, int64_t e, float* lo, float* hi) {
  return extremes(p, b, e, lo, hi);
}
LATTICE_X86_CLONES bool extremes_f64(const double* p, int64_t b, int64_t e, double* lo, double* hi) {
  return extremes(p, b, e, lo, hi);
}
LATTICE_X86_CLONES void cells_f32(const float* p, int64_t flat, const double* o, const double* v, int32_t* c) {
  cells(p, flat, o, v, c);
}
LATTICE_X86_CLONES void cells_f64(const double* p, int64_t flat, const double* o, const double* v, int32_t* c) {
  cells(p, flat, o, v, c);
}

// The bounds of every point's cell, from the extremes of its coordinates (floor and the
// division by a positive voxel size are monotonic), and of the batch indices. False when a
// point is not finite, a cell leaves int32 or a batch index is negative: quantize_coords then
// runs point by point and names the first such point.
bool cell_bounds(const PointRows& pts, const int32_t* bidx, const double* org, const double* vs, Bounds& out) {
  const int64_t n = pts.n;
  const int64_t chunks = chunk_count(n, 1 << 15);
  struct Part {
    double lo[3], hi[3];
    int32_t blo = 0, bhi = 0;
    bool finite = true;
  };
  std::vector<Part> part(chunks);
  parallel_chunks(n, chunks, [&](int64_t ci, int64_t b, int64_t e) {
    Part& r = part[ci];
    if (pts.f64) {
      double lo[3], hi[3];
      r.finite = extremes_f64(pts.f64, b, e, lo, hi);
      for (int a = 0; a < 3; ++a) r.lo[a] = lo[a], r.hi[a] = hi[a];
    } else {
      float lo[3], hi[3];
      r.finite = extremes_f32(pts.f32, b, e, lo, hi);
      for (int a = 0; a < 3; ++a) r.lo[a] = lo[a], r.hi[a] = hi[a];
    }
    if (bidx) {
      int32_t blo = bidx[b], bhi = bidx[b];
      for (int64_t i = b; i < e; ++i) {
        blo = std::min(blo, bidx[i]);
        bhi = std::max(bhi, bidx[i]);
      }
      r.blo = blo;
      r.bhi = bhi;
    }
  });
  Bounds bb;
  bb.lo = {INT64_MAX, INT64_MAX, INT64_MAX, INT64_MAX};
  bb.hi = {INT64_MIN, INT64_MIN, INT64_MIN, INT64_MIN};
  for (const Part& r : part) {
    if (!r.finite || r.blo < 0) return false;
    bb.lo[0] = std::min<int64_t>(bb.lo[0], r.blo);
    bb.hi[0] = std::max<int64_t>(bb.hi[0], r.bhi);
    for (int a = 0; a < 3; ++a) {
      const double lo = std::floor((r.lo[a] - org[a]) / vs[a]);
      const double hi = std::floor((r.hi[a] - org[a]) / vs[a]);
      if (!(lo >= INT32_MIN && hi <= INT32_MAX)) return false;  // also catches +-inf
      bb.lo[a + 1] = std::min(bb.lo[a + 1], static_cast<int64_t>(lo));
      bb.hi[a + 1] = std::max(bb.hi[a + 1], static_cast<int64_t>(hi));
    }
  }
  out = bb;
  return true;
}

}  // namespace

UniqueResult quantize_points(const mx::array& points_in, const std::array<double, 3>& voxel_size,
                             const std::array<double, 3>& origin, const mx::array* batch_in) {
  const char* op = "sparse_quantize";
  mx::array points = materialize(points_in);
  if (points.ndim() != 2 || points.shape(1) != 3) {
    throw std::invalid_argument("[sparse_quantize] points must have shape (N, 3)");
  }
  // float64 points keep their precision (metres near 5e5 in projected LAS data);
  // everything else is computed from float32.
  if (points.dtype() != mx::float32 && points.dtype() != mx::float64) {
    points = materialize(mx::astype(points, mx::float32, mx::Device::cpu));
  }
  PointRows rows;
  rows.n = points.shape(0);
  if (points.dtype() == mx::float64) rows.f64 = points.data<double>();
  else rows.f32 = points.data<float>();
  mx::array batch = mx::zeros({0}, mx::int32);
  if (batch_in) {
    batch = materialize(mx::astype(*batch_in, mx::int32));
    if (batch.ndim() != 1 || batch.shape(0) != rows.n) {
      throw std::invalid_argument("[sparse_quantize] batch_indices must have shape (N,) matching points");
    }
  }
  const int32_t* bidx = batch_in ? batch.data<int32_t>() : nullptr;
  Bounds b;
  if (rows.n > 0 && cell_bounds(rows, bidx, origin.data(), voxel_size.data(), b)) {
    // The cells computed where they are packed, a block at a time: no N x 4 buffer of cells
    // written and read back.
    double o[kCellFlat], v[kCellFlat];
    for (int j = 0; j < kCellFlat; ++j) {
      o[j] = origin[j % 3];
      v[j] = voxel_size[j % 3];
    }
    auto pack = [&](int64_t lo, int64_t hi, const Packer& pk, uint64_t* keys, uint32_t* hash) {
      int32_t c[kCellFlat];
      for (int64_t s = lo; s < hi; s += kCellBlock) {
        const int64_t len = std::min<int64_t>(kCellBlock, hi - s);
        if (rows.f64) cells_f64(rows.f64 + 3 * s, 3 * len, o, v, c);
        else cells_f32(rows.f32 + 3 * s, 3 * len, o, v, c);
        for (int64_t i = 0; i < len; ++i) {
          uint64_t key = 0;
          pk.pack(bidx ? bidx[s + i] : 0, c[3 * i], c[3 * i + 1], c[3 * i + 2], key);
          keys[s + i] = key;
          hash[s + i] = static_cast<uint32_t>(hash_key(key));
        }
      }
    };
    auto coords = [&](int64_t i, int64_t* out) {  // one point's cell, the blocks' arithmetic
      int32_t c[3];
      if (rows.f64) cells(rows.f64 + 3 * i, 3, o, v, c);
      else cells(rows.f32 + 3 * i, 3, o, v, c);
      out[0] = bidx ? bidx[i] : 0;
      for (int a = 0; a < 3; ++a) out[a + 1] = c[a];
    };
    return unique_first_packed(rows.n, b, coords, op, true, pack);
  }
  std::vector<int32_t> q;
  b = quantize_coords(rows, voxel_size, origin, bidx, q, op);
  const int32_t* qc = q.data();
  return unique_first(
      rows.n, b,
      [&](int64_t i, int64_t* out) {
        for (int a = 0; a < 4; ++a) out[a] = qc[4 * i + a];
      },
      op, true);
}

}  // namespace lattice
