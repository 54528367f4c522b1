// k-nearest and radius neighbours over points, on a hashed grid of cells (memory
// proportional to the number of points, never to the bounding box).
#include "backend/cpu/neighbors.h"

#include <algorithm>
#include <cmath>
#include <queue>

namespace lattice {

namespace {

struct Cloud {
  mx::array xyz = mx::zeros({0, 3}, mx::float32);
  mx::array batch = mx::zeros({0}, mx::int32);
  const float* p = nullptr;
  const int32_t* b = nullptr;
  int64_t n = 0;
};

Cloud as_cloud(const mx::array& xyz, const mx::array& batch, const char* op, const char* name) {
  Cloud c;
  c.xyz = materialize(mx::astype(xyz, mx::float32));
  c.batch = materialize(mx::astype(batch, mx::int32));
  if (c.xyz.ndim() != 2 || c.xyz.shape(1) != 3) {
    throw std::invalid_argument(std::string("[") + op + "] " + name + " must have shape (N, 3)");
  }
  c.n = c.xyz.shape(0);
  if (c.batch.ndim() != 1 || c.batch.shape(0) != c.n) {
    throw std::invalid_argument(std::string("[") + op + "] " + name + " batch must have shape (N,)");
  }
  c.p = c.xyz.data<float>();
  c.b = c.batch.data<int32_t>();
  return c;
}

// Source points bucketed by cell: cell table + CSR of point rows per cell.
struct Grid {
  double h = 1.0;
  UniqueResult cells;
  std::vector<int64_t> start;
  std::vector<int32_t> rows;

  inline int64_t cell_of(double v) const { return static_cast<int64_t>(std::floor(v / h)); }
};

Grid build_grid(const Cloud& src, double h, const char* op) {
  Grid g;
  g.h = h;
  Bounds b;
  if (src.n > 0) {
    for (int a = 0; a < 4; ++a) {
      b.lo[a] = INT64_MAX;
      b.hi[a] = INT64_MIN;
    }
    for (int64_t i = 0; i < src.n; ++i) {
      int64_t v[4] = {src.b[i], g.cell_of(src.p[3 * i]), g.cell_of(src.p[3 * i + 1]),
                      g.cell_of(src.p[3 * i + 2])};
      for (int a = 0; a < 4; ++a) {
        b.lo[a] = std::min(b.lo[a], v[a]);
        b.hi[a] = std::max(b.hi[a], v[a]);
      }
    }
  }
  g.cells = unique_first(
      src.n, b,
      [&](int64_t i, int64_t* o) {
        o[0] = src.b[i];
        for (int a = 0; a < 3; ++a) o[a + 1] = g.cell_of(src.p[3 * i + a]);
      },
      op, true);
  const int64_t nc = g.cells.table->n;
  g.start.assign(nc + 1, 0);
  for (int64_t c = 0; c < nc; ++c) g.start[c + 1] = g.start[c] + g.cells.counts[c];
  std::vector<int64_t> fill(g.start.begin(), g.start.end() - 1);
  g.rows.resize(src.n);
  for (int64_t i = 0; i < src.n; ++i) g.rows[fill[g.cells.inverse[i]]++] = static_cast<int32_t>(i);
  return g;
}

void check_finite(const Cloud& c, const char* op, const char* name) {
  for (int64_t i = 0; i < 3 * c.n; ++i) {
    if (!std::isfinite(c.p[i])) {
      throw std::invalid_argument(std::string("[") + op + "] " + name + " holds a non-finite value at row " +
                                  std::to_string(i / 3));
    }
  }
}

// Smallest cell size whose indices span at most 2^18 cells per axis over the cloud, so
// cell keys pack for up to 1024 batch members (cells larger than the search radius
// still cover it: only more points are tested).
double min_cell(const Cloud& c) {
  double lo = INFINITY, hi = -INFINITY;
  for (int64_t i = 0; i < 3 * c.n; ++i) {
    lo = std::min<double>(lo, c.p[i]);
    hi = std::max<double>(hi, c.p[i]);
  }
  return c.n > 0 ? (hi - lo) / double(1 << 18) : 0.0;
}

using Hit = std::pair<float, int32_t>;  // (squared distance, source row)

NeighborArrays pack_result(std::vector<std::vector<Hit>>& per_query, int64_t m, const char* op) {
  OutArray<int32_t> offsets({static_cast<int>(m + 1)}, mx::int32);
  int32_t* off = offsets.data();
  off[0] = 0;
  int64_t total = 0;
  for (int64_t q = 0; q < m; ++q) {
    total += per_query[q].size();
    checked_rows(total, op);
    off[q + 1] = static_cast<int32_t>(total);
  }
  OutArray<int32_t> rows({static_cast<int>(total)}, mx::int32);
  OutArray<float> dist({static_cast<int>(total)}, mx::float32);
  parallel_for(m, [&](int64_t b, int64_t e) {
    for (int64_t q = b; q < e; ++q) {
      int64_t o = off[q];
      for (auto& h : per_query[q]) {
        rows.data()[o] = h.second;
        dist.data()[o++] = std::sqrt(h.first);
      }
    }
  }, 1024);
  return {std::move(offsets).finish(), std::move(rows).finish(), std::move(dist).finish()};
}

inline float dist2(const float* a, const float* b) {
  float dx = a[0] - b[0], dy = a[1] - b[1], dz = a[2] - b[2];
  return dx * dx + dy * dy + dz * dz;
}

}  // namespace

NeighborArrays radius_neighbors(const mx::array& source, const mx::array& source_batch,
                                const mx::array& query, const mx::array& query_batch, double radius,
                                int64_t max_neighbors) {
  const char* op = "radius_relation";
  Cloud src = as_cloud(source, source_batch, op, "source");
  Cloud qry = as_cloud(query, query_batch, op, "query");
  check_finite(src, op, "source");
  check_finite(qry, op, "query");
  Grid g = build_grid(src, std::max(radius, min_cell(src)), op);
  const float r2 = static_cast<float>(radius * radius);
  std::vector<std::vector<Hit>> hits(qry.n);
  parallel_for(qry.n, [&](int64_t b, int64_t e) {
    for (int64_t q = b; q < e; ++q) {
      const float* qp = qry.p + 3 * q;
      int64_t cx = g.cell_of(qp[0]), cy = g.cell_of(qp[1]), cz = g.cell_of(qp[2]);
      auto& out = hits[q];
      for (int dx = -1; dx <= 1; ++dx)
        for (int dy = -1; dy <= 1; ++dy)
          for (int dz = -1; dz <= 1; ++dz) {
            int32_t cell = g.cells.table->find(qry.b[q], cx + dx, cy + dy, cz + dz);
            if (cell < 0) continue;
            for (int64_t j = g.start[cell]; j < g.start[cell + 1]; ++j) {
              int32_t s = g.rows[j];
              float d = dist2(qp, src.p + 3 * s);
              if (d <= r2) out.emplace_back(d, s);
            }
          }
      std::sort(out.begin(), out.end());
      if (max_neighbors >= 0 && static_cast<int64_t>(out.size()) > max_neighbors) out.resize(max_neighbors);
    }
  }, 256);
  return pack_result(hits, qry.n, op);
}

NeighborArrays knn_neighbors(const mx::array& source, const mx::array& source_batch,
                             const mx::array& query, const mx::array& query_batch, int64_t k) {
  const char* op = "knn_relation";
  Cloud src = as_cloud(source, source_batch, op, "source");
  Cloud qry = as_cloud(query, query_batch, op, "query");
  check_finite(src, op, "source");
  check_finite(qry, op, "query");
  // Cell size: about k points per cell at the cloud's mean density.
  double lo[3] = {INFINITY, INFINITY, INFINITY}, hi[3] = {-INFINITY, -INFINITY, -INFINITY};
  for (int64_t i = 0; i < src.n; ++i)
    for (int a = 0; a < 3; ++a) {
      lo[a] = std::min<double>(lo[a], src.p[3 * i + a]);
      hi[a] = std::max<double>(hi[a], src.p[3 * i + a]);
    }
  double ext[3], vol = 1.0, ext_max = 0.0;
  int dims = 0;
  for (int a = 0; a < 3; ++a) {
    ext[a] = src.n > 0 ? hi[a] - lo[a] : 0.0;
    ext_max = std::max(ext_max, ext[a]);
    if (ext[a] > 0) {
      vol *= ext[a];
      ++dims;
    }
  }
  double h = 1.0;
  if (dims > 0 && src.n > 0) h = std::pow(vol * double(std::max<int64_t>(k, 1)) / double(src.n), 1.0 / dims);
  if (!(h > 0) || !std::isfinite(h)) h = ext_max > 0 ? ext_max : 1.0;
  h = std::max(h, min_cell(src));
  Grid g = build_grid(src, h, op);
  const Bounds& cb = g.cells.table->bounds;
  std::vector<std::vector<Hit>> hits(qry.n);
  parallel_for(qry.n, [&](int64_t b, int64_t e) {
    for (int64_t q = b; q < e; ++q) {
      const float* qp = qry.p + 3 * q;
      int64_t c[3] = {g.cell_of(qp[0]), g.cell_of(qp[1]), g.cell_of(qp[2])};
      int64_t max_ring = 0;
      for (int a = 0; a < 3; ++a)
        max_ring = std::max({max_ring, c[a] - cb.lo[a + 1], cb.hi[a + 1] - c[a]});
      std::priority_queue<Hit> heap;  // max-heap of the best k
      for (int64_t R = 0; R <= max_ring; ++R) {
        if (R > 0 && 24 * R * R > g.cells.table->n) {
          // The shell holds more cells than the grid: scan the batch's points directly.
          heap = std::priority_queue<Hit>();
          for (int64_t s = 0; s < src.n; ++s) {
            if (src.b[s] != qry.b[q]) continue;
            Hit hit{dist2(qp, src.p + 3 * s), static_cast<int32_t>(s)};
            if (static_cast<int64_t>(heap.size()) < k) heap.push(hit);
            else if (hit < heap.top()) {
              heap.pop();
              heap.push(hit);
            }
          }
          break;
        }
        for (int64_t dx = -R; dx <= R; ++dx)
          for (int64_t dy = -R; dy <= R; ++dy)
            for (int64_t dz = -R; dz <= R; ++dz) {
              if (std::max({std::llabs(dx), std::llabs(dy), std::llabs(dz)}) != R) continue;
              int32_t cell = g.cells.table->find(qry.b[q], c[0] + dx, c[1] + dy, c[2] + dz);
              if (cell < 0) continue;
              for (int64_t j = g.start[cell]; j < g.start[cell + 1]; ++j) {
                int32_t s = g.rows[j];
                Hit hit{dist2(qp, src.p + 3 * s), s};
                if (static_cast<int64_t>(heap.size()) < k) heap.push(hit);
                else if (hit < heap.top()) {
                  heap.pop();
                  heap.push(hit);
                }
              }
            }
        // Cells beyond ring R are at least R * h away from the query.
        if (static_cast<int64_t>(heap.size()) == k) {
          double reach = double(R) * h;
          if (reach * reach > heap.top().first) break;
        }
      }
      auto& out = hits[q];
      out.reserve(heap.size());
      while (!heap.empty()) {
        out.push_back(heap.top());
        heap.pop();
      }
      std::reverse(out.begin(), out.end());
    }
  }, 256);
  return pack_result(hits, qry.n, op);
}

}  // namespace lattice
