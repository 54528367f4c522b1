// A coordinate set with its hash table: the object every relation builder and
// coordinate function works on. Built once per coordinate set and cached by the
// CoordinateManager on the Python side.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

#include "core/arrays.h"
#include "core/hash_table.h"
#include "core/pack.h"
#include "core/parallel.h"

namespace lattice {

inline int64_t floordiv(int64_t a, int64_t b) {
  int64_t q = a / b;
  return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
}

struct CoordTable {
  mx::array coords;  // (N, 4) int32, row-contiguous, evaluated
  int64_t n = 0;
  Bounds bounds;
  Packer packer;
  HashTable table;

  CoordTable() : coords(mx::zeros({0, 4}, mx::int32)) {}

  const int32_t* data() const { return coords.data<int32_t>(); }

  inline int32_t find(int64_t b, int64_t x, int64_t y, int64_t z) const {
    uint64_t key = 0;
    if (!packer.pack(b, x, y, z, key)) return HashTable::kMissing;
    return table.find(key);
  }
};

using CoordTablePtr = std::shared_ptr<CoordTable>;

// Bounds of an (N, 4) int32 buffer, computed in parallel.
Bounds coord_bounds(const int32_t* c, int64_t n);

// Builds the table of a coordinate set; rejects duplicate rows and negative batch
// indices with errors naming the rows.
CoordTablePtr build_coord_table(const mx::array& coords, const char* op);

// Deduplicates m candidate coordinates given by fn(i, int64_t out[4]) whose values
// lie inside `bounds`. Unique rows are numbered by first occurrence. Returns the
// table of the unique set (its coords array filled), and writes inverse[i] (the
// unique row of candidate i) and optionally counts per unique row.
struct UniqueResult {
  CoordTablePtr table;
  std::vector<int32_t> inverse;
  std::vector<int32_t> counts;
};

template <class CoordFn>
UniqueResult unique_first(int64_t m, const Bounds& bounds, CoordFn&& fn, const char* op,
                          bool want_counts) {
  check_int32_bounds(bounds, op);
  checked_rows(m, op);
  UniqueResult res;
  auto table = std::make_shared<CoordTable>();
  table->bounds = bounds;
  table->packer = Packer(bounds, op);
  table->table.reset(m);
  res.inverse.resize(m);
  std::vector<uint64_t> pos(m);
  std::vector<uint8_t> first(m);
  const int64_t chunks = chunk_count(m);
  std::vector<int64_t> chunk_unique(chunks + 1, 0);
  HashTable& ht = table->table;
  const Packer& pk = table->packer;

  parallel_chunks(m, chunks, [&](int64_t, int64_t b, int64_t e) {
    int64_t c[4];
    for (int64_t i = b; i < e; ++i) {
      fn(i, c);
      uint64_t key = 0;
      pk.pack(c[0], c[1], c[2], c[3], key);
      pos[i] = ht.insert_min(key, static_cast<int32_t>(i));
    }
  });
  parallel_chunks(m, chunks, [&](int64_t ci, int64_t b, int64_t e) {
    int64_t u = 0;
    for (int64_t i = b; i < e; ++i) {
      first[i] = ht.slot(pos[i]).value == static_cast<int32_t>(i);
      u += first[i];
    }
    chunk_unique[ci + 1] = u;
  });
  for (int64_t ci = 0; ci < chunks; ++ci) chunk_unique[ci + 1] += chunk_unique[ci];
  const int64_t n_unique = chunk_unique[chunks];
  OutArray<int32_t> out({static_cast<int>(n_unique), 4}, mx::int32);
  int32_t* oc = out.data();
  parallel_chunks(m, chunks, [&](int64_t ci, int64_t b, int64_t e) {
    int64_t u = chunk_unique[ci];
    for (int64_t i = b; i < e; ++i) {
      if (!first[i]) continue;
      pk.unpack(ht.slot(pos[i]).key, oc + 4 * u);
      ht.slot(pos[i]).value = static_cast<int32_t>(u);
      ++u;
    }
  });
  if (want_counts) res.counts.assign(n_unique, 0);
  parallel_chunks(m, chunks, [&](int64_t, int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      int32_t u = ht.slot(pos[i]).value;
      res.inverse[i] = u;
      if (want_counts) std::atomic_ref<int32_t>(res.counts[u]).fetch_add(1, std::memory_order_relaxed);
    }
  });
  table->coords = std::move(out).finish();
  table->n = n_unique;
  res.table = std::move(table);
  return res;
}

// Per-axis kernel offsets: odd sizes centred, even sizes from 0.
inline int32_t axis_offset(int32_t size, int32_t j) { return (size % 2 == 1) ? j - size / 2 : j; }

}  // namespace lattice
