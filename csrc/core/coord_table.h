// A coordinate set with its hash table: the object every relation builder and
// coordinate function works on. Built once per coordinate set and cached by the
// CoordinateManager on the Python side.
#pragma once

#include <array>
#include <atomic>
#include <bit>
#include <cassert>
#include <cstdint>
#include <memory>
#include <mutex>
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

struct CoordTable;

// Inserts the rows of t (known to be unique) into t.table, which must be reset to t.n.
void hash_rows(const CoordTable& t);

struct CoordTable {
  mx::array coords;  // (N, 4) int32, row-contiguous, evaluated
  int64_t n = 0;
  Bounds bounds;
  Packer packer;
  // Filled by the builder, or on first use (hashed()) when the rows were proven unique
  // without hashing them (build_coord_table: strictly sorted rows), so a set that is only
  // downsampled never hashes its rows.
  mutable HashTable table;

  CoordTable() : coords(mx::zeros({0, 4}, mx::int32)) {}
  CoordTable(const CoordTable&) = delete;
  CoordTable& operator=(const CoordTable&) = delete;

  const int32_t* data() const { return coords.data<int32_t>(); }

  // The hash table, built now if it was deferred. Every function that probes a table
  // calls this once, before its loops: find() itself does not check (an atomic load in
  // the probe loops of the relation builders cost 25 % on a dense block).
  const HashTable& hashed() const {
    if (!hashed_.load(std::memory_order_acquire)) {
      std::lock_guard<std::mutex> lock(hash_mutex_);
      if (!hashed_.load(std::memory_order_relaxed)) {
        table.reset(n);
        hash_rows(*this);
        hashed_.store(true, std::memory_order_release);
      }
    }
    return table;
  }
  bool is_hashed() const { return hashed_.load(std::memory_order_acquire); }
  void defer_hash() { hashed_.store(false, std::memory_order_release); }

  // Row of a coordinate, -1 when absent. Requires hashed() to have been called.
  inline int32_t find(int64_t b, int64_t x, int64_t y, int64_t z) const {
    assert(is_hashed());
    uint64_t key = 0;
    if (!packer.pack(b, x, y, z, key)) return HashTable::kMissing;
    return table.find(key);
  }

 private:
  mutable std::atomic<bool> hashed_{true};
  mutable std::mutex hash_mutex_;
};

using CoordTablePtr = std::shared_ptr<CoordTable>;

// Bounds of an (N, 4) int32 buffer, computed in parallel; with `increasing`, also whether
// every row is strictly greater than the one before in (batch, x, y, z) order.
Bounds coord_bounds(const int32_t* c, int64_t n, bool* increasing = nullptr);

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

// std::popcount is a libgcc call on baseline x86-64 (no POPCNT): count the bits inline
// there, by table for the common cells of up to 8 points (2x2x2 windows).
inline int popcount32(uint32_t v) {
#if defined(__x86_64__) && !defined(__POPCNT__)
  static constexpr auto kByte = [] {
    std::array<uint8_t, 256> t{};
    for (int i = 0; i < 256; ++i) t[i] = static_cast<uint8_t>((i & 1) + t[i / 2]);
    return t;
  }();
  if (v < 256) return kByte[v];
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

// Expected distinct keys among m, from the first kSample (a run of consecutive rows: point
// clouds and voxel sets are stored in scan or spatial order, so a run holds its
// neighbourhood's duplicates): m times the distinct fraction of the run, plus a margin.
// Only the table's starting size rests on it: the numbering pass grows the table as needed.
inline int64_t expected_distinct(int64_t m, const uint64_t* keys) {
  constexpr int64_t kSample = 8192;
  if (m <= 4 * kSample) return m;
  HashTable probe(kSample);
  int64_t d = 0;
  for (int64_t i = 0; i < kSample; ++i) {
    bool fresh;
    probe.place(keys[i], probe.home(keys[i]), fresh);
    d += fresh;
  }
  return std::min<int64_t>(m, m * d / kSample * 5 / 4 + 1024);
}

// Three passes. (1) In parallel: every candidate's packed key and the low 32 bits of its
// hash (and bit). (2) One pass in candidate order on one thread, without atomics: the first
// candidate to find its key's slot empty is the key's first occurrence and takes the next
// number, so the numbering, the inverse, the per-row bits (OR-ed by number) and the counts
// all come out of this pass; home slots are prefetched ahead, the keys having been packed
// in (1). The table starts at the size expected_distinct() gives and doubles when a new
// key brings it past 2/3 full, so a dense cloud of few voxels works in a table that stays in cache.
// (3) In parallel: the unique rows' coordinates, from their first candidates, and (with
// bits) the candidates scattered to their group, ranked by bit inside it.
//
// unique_first_packed takes pass (1) from the caller: pack(b, e, packer, keys, hash) fills
// the keys and hashes of candidates b..e (sparse_quantize computes a block of cells at a time,
// vectorised); fn still gives the unique rows' coordinates in (3).
template <class CoordFn, class BitFn, class PackFn>
UniqueResult unique_first_impl(int64_t m, const Bounds& bounds, CoordFn& fn, const char* op, bool want_counts,
                               BitFn& bit, PackFn* pack) {
  constexpr bool kGroups = !std::is_same_v<std::decay_t<BitFn>, NoBits>;
  constexpr int64_t kAhead = 16;  // home slots prefetched ahead in the numbering pass
  check_int32_bounds(bounds, op);
  checked_rows(m, op);
  UniqueResult res;
  auto table = std::make_shared<CoordTable>();
  table->bounds = bounds;
  table->packer = Packer(bounds, op);
  HashTable& ht = table->table;
  const Packer& pk = table->packer;
  res.inverse = OutArray<int32_t>({static_cast<int>(m)}, mx::int32);
  int32_t* inverse = res.inverse.data();
  std::unique_ptr<uint64_t[]> keys(new uint64_t[m]);
  std::unique_ptr<uint32_t[]> hash(new uint32_t[m]);  // capacity <= 2^32 for m < 2^31
  std::unique_ptr<uint8_t[]> bits(new uint8_t[kGroups ? m : 0]);
  parallel_for(m, [&](int64_t b, int64_t e) {
    if constexpr (!std::is_same_v<PackFn, std::nullptr_t>) {
      (*pack)(b, e, pk, keys.get(), hash.get());
    } else {
      for (int64_t i = b; i < e; ++i) {
        int64_t c[4];
        fn(i, c);
        uint64_t key = 0;
        pk.pack(c[0], c[1], c[2], c[3], key);
        keys[i] = key;
        hash[i] = static_cast<uint32_t>(hash_key(key));
        if constexpr (kGroups) bits[i] = static_cast<uint8_t>(bit(i));
      }
    }
  });
  ht.reset(expected_distinct(m, keys.get()));

  std::unique_ptr<int32_t[]> first_row(new int32_t[m]);                        // by number
  std::unique_ptr<uint32_t[]> tags(new uint32_t[kGroups ? m : 0]);              // by number
  std::unique_ptr<int32_t[]> count(new int32_t[want_counts ? m : 0]);           // by number
  int32_t n_unique = 0;
  for (int64_t i = 0; i < m; ++i) {
    if (i + kAhead < m) ht.prefetch(hash[i + kAhead] & ht.mask());
    bool fresh;
    Slot& slot = ht.place(keys[i], hash[i] & ht.mask(), fresh);
    int32_t u = slot.value;
    if (fresh) {
      u = slot.value = n_unique++;
      if (ht.full_at(n_unique)) ht.grow();  // `slot` is not used past here
      first_row[u] = static_cast<int32_t>(i);
      if constexpr (kGroups) tags[u] = 0;
      if (want_counts) count[u] = 0;
    }
    inverse[i] = u;
    if constexpr (kGroups) tags[u] |= 1u << bits[i];
    if (want_counts) ++count[u];
  }

  OutArray<int32_t> out({n_unique, 4}, mx::int32);
  int32_t* oc = out.data();
  parallel_for(n_unique, [&](int64_t b, int64_t e) {
    for (int64_t u = b; u < e; ++u) {
      int64_t c[4];
      fn(first_row[u], c);
      for (int a = 0; a < 4; ++a) oc[4 * u + a] = static_cast<int32_t>(c[a]);
    }
  });
  if (want_counts) {
    res.counts = OutArray<int32_t>({n_unique}, mx::int32);
    std::copy(count.get(), count.get() + n_unique, res.counts.data());
  }
  if constexpr (kGroups) {
    // Entries of unique row u start at start[u], the prefix sum of the tags' popcounts.
    std::unique_ptr<int64_t[]> start(new int64_t[n_unique + 1]);
    start[0] = 0;
    for (int32_t u = 0; u < n_unique; ++u) start[u + 1] = start[u] + popcount32(tags[u]);
    res.grouped = true;
    res.group_rows = OutArray<int32_t>({static_cast<int>(m)}, mx::int32);
    res.group_out = OutArray<int32_t>({static_cast<int>(m)}, mx::int32);
    int32_t* rows = res.group_rows.data();
    int32_t* outs = res.group_out.data();
    parallel_for(m, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) {
        const int32_t u = inverse[i];
        const int64_t p = start[u] + popcount32(tags[u] & ((1u << bits[i]) - 1u));
        rows[p] = static_cast<int32_t>(i);
        outs[p] = u;
      }
    });
  }
  table->coords = std::move(out).finish();
  table->n = n_unique;
  res.table = std::move(table);
  return res;
}

template <class CoordFn, class BitFn = NoBits>
UniqueResult unique_first(int64_t m, const Bounds& bounds, CoordFn&& fn, const char* op, bool want_counts,
                          BitFn&& bit = BitFn{}) {
  return unique_first_impl(m, bounds, fn, op, want_counts, bit, static_cast<std::nullptr_t*>(nullptr));
}

template <class CoordFn, class PackFn>
UniqueResult unique_first_packed(int64_t m, const Bounds& bounds, CoordFn&& fn, const char* op, bool want_counts,
                                 PackFn&& pack) {
  NoBits none;
  return unique_first_impl(m, bounds, fn, op, want_counts, none, &pack);
}

// Per-axis kernel offsets: odd sizes centred, even sizes from 0.
inline int32_t axis_offset(int32_t size, int32_t j) { return (size % 2 == 1) ? j - size / 2 : j; }

}  // namespace lattice
