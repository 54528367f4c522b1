// A coordinate set with its hash table: the object every relation builder and
// coordinate function works on. Built once per coordinate set and cached by the
// CoordinateManager on the Python side.
#pragma once

#include <atomic>
#include <bit>
#include <cstdint>
#include <memory>
#include <type_traits>
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
//
// With a `bit` function (bit(i) in [0, 32), distinct among the candidates of one unique
// row: the window downsample, where it is the kernel offset of a row inside its cell) it
// also groups the candidates by unique row: group_rows lists them by unique row, ascending
// bit within a row, and group_out[p] is the unique row of group_rows[p].
struct UniqueResult {
  CoordTablePtr table;
  OutArray<int32_t> inverse;  // (m,)
  OutArray<int32_t> counts;   // (n_unique,) when asked for
  bool grouped = false;       // group_rows / group_out (m,) were filled
  OutArray<int32_t> group_rows, group_out;
};

// std::popcount is a libgcc call on baseline x86-64 (no POPCNT): count the bits inline there.
inline int popcount32(uint32_t v) {
#if defined(__x86_64__) && !defined(__POPCNT__)
  v = v - ((v >> 1) & 0x55555555u);
  v = (v & 0x33333333u) + ((v >> 2) & 0x33333333u);
  return static_cast<int>((((v + (v >> 4)) & 0x0F0F0F0Fu) * 0x01010101u) >> 24);
#else
  return std::popcount(v);
#endif
}

struct NoBits {
  int operator()(int64_t) const { return 0; }
};

// One hash pass (lock-free inserts keeping the smallest candidate per key, the next keys'
// slots prefetched), then three streaming passes: mark first occurrences and count them
// per chunk; number them in chunk order (their coordinates come from fn, not from the
// key); and give every candidate the number of its first occurrence, looked up in the
// N-sized first_of array rather than in the table.
template <class CoordFn, class BitFn = NoBits>
UniqueResult unique_first(int64_t m, const Bounds& bounds, CoordFn&& fn, const char* op, bool want_counts,
                          BitFn&& bit = BitFn{}) {
  constexpr bool kGroups = !std::is_same_v<std::decay_t<BitFn>, NoBits>;
  check_int32_bounds(bounds, op);
  checked_rows(m, op);
  UniqueResult res;
  auto table = std::make_shared<CoordTable>();
  table->bounds = bounds;
  table->packer = Packer(bounds, op);
  table->table.reset(m);
  res.inverse = OutArray<int32_t>({static_cast<int>(m)}, mx::int32);
  std::unique_ptr<uint32_t[]> pos(new uint32_t[m]);     // slot of each candidate (capacity <= 2^32 for m < 2^31)
  std::unique_ptr<int32_t[]> first_of(new int32_t[m]);  // first candidate with the same key; ~u once numbered
  std::unique_ptr<uint8_t[]> bits(new uint8_t[kGroups ? m : 0]);
  const int64_t chunks = chunk_count(m);
  std::vector<int64_t> chunk_unique(chunks + 1, 0);
  HashTable& ht = table->table;
  const Packer& pk = table->packer;
  auto key_of = [&](int64_t i) {
    int64_t c[4];
    fn(i, c);
    uint64_t key = 0;
    pk.pack(c[0], c[1], c[2], c[3], key);
    return key;
  };

  parallel_chunks(m, chunks, [&](int64_t, int64_t b, int64_t e) {
    for_keys_prefetched(ht, b, e, key_of, [&](int64_t i, uint64_t key) {
      const int32_t row = static_cast<int32_t>(i);
      if constexpr (kGroups) {
        bits[i] = static_cast<uint8_t>(bit(i));
        pos[i] = static_cast<uint32_t>(ht.insert_min_tag(key, row, 1u << bits[i]));
      } else {
        pos[i] = static_cast<uint32_t>(ht.insert_min(key, row));
      }
    });
  });
  parallel_chunks(m, chunks, [&](int64_t ci, int64_t b, int64_t e) {
    int64_t u = 0;
    for (int64_t i = b; i < e; ++i) {
      first_of[i] = ht.slot(pos[i]).value;
      u += first_of[i] == i;
    }
    chunk_unique[ci + 1] = u;
  });
  for (int64_t ci = 0; ci < chunks; ++ci) chunk_unique[ci + 1] += chunk_unique[ci];
  const int64_t n_unique = chunk_unique[chunks];
  OutArray<int32_t> out({static_cast<int>(n_unique), 4}, mx::int32);
  int32_t* oc = out.data();
  std::unique_ptr<uint32_t[]> tags(new uint32_t[kGroups ? n_unique : 0]);
  parallel_chunks(m, chunks, [&](int64_t ci, int64_t b, int64_t e) {
    int32_t u = static_cast<int32_t>(chunk_unique[ci]);
    for (int64_t i = b; i < e; ++i) {
      if (first_of[i] != i) continue;
      int64_t c[4];
      fn(i, c);
      for (int a = 0; a < 4; ++a) oc[4 * static_cast<int64_t>(u) + a] = static_cast<int32_t>(c[a]);
      Slot& s = ht.slot(pos[i]);
      s.value = u;
      if constexpr (kGroups) tags[u] = s.tag;
      first_of[i] = ~u;
      ++u;
    }
  });
  std::unique_ptr<int64_t[]> group_start;
  if constexpr (kGroups) {
    // Entries of unique row u start at group_start[u]: the prefix sum of the tags' popcounts.
    group_start.reset(new int64_t[n_unique + 1]);
    const int64_t gchunks = chunk_count(n_unique, 1 << 14);
    std::vector<int64_t> part(gchunks + 1, 0);
    parallel_chunks(n_unique, gchunks, [&](int64_t ci, int64_t b, int64_t e) {
      int64_t t = 0;
      for (int64_t u = b; u < e; ++u) t += popcount32(tags[u]);
      part[ci + 1] = t;
    });
    for (int64_t ci = 0; ci < gchunks; ++ci) part[ci + 1] += part[ci];
    parallel_chunks(n_unique, gchunks, [&](int64_t ci, int64_t b, int64_t e) {
      int64_t t = part[ci];
      for (int64_t u = b; u < e; ++u) {
        group_start[u] = t;
        t += popcount32(tags[u]);
      }
    });
    group_start[n_unique] = part[gchunks];
    res.grouped = true;
    res.group_rows = OutArray<int32_t>({static_cast<int>(m)}, mx::int32);
    res.group_out = OutArray<int32_t>({static_cast<int>(m)}, mx::int32);
  }
  if (want_counts) {
    res.counts = OutArray<int32_t>({static_cast<int>(n_unique)}, mx::int32);
    std::fill(res.counts.data(), res.counts.data() + n_unique, 0);
  }
  parallel_chunks(m, chunks, [&](int64_t, int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      const int32_t f = first_of[i];
      const int32_t u = f < 0 ? ~f : ~first_of[f];
      res.inverse[i] = u;
      if (want_counts) std::atomic_ref<int32_t>(res.counts[u]).fetch_add(1, std::memory_order_relaxed);
      if constexpr (kGroups) {
        const uint32_t below = tags[u] & ((1u << bits[i]) - 1u);
        const int64_t p = group_start[u] + popcount32(below);
        res.group_rows[p] = static_cast<int32_t>(i);
        res.group_out[p] = u;
      }
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
