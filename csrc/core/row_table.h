// A growable hash set of coordinate rows, for coordinate sets that arrive in pieces
// (the streaming voxelizer).
//
// HashTable (hash_table.h) maps packed 64-bit keys to rows in 16-byte slots and is
// built once, at a fixed size, for an immutable CoordTable. A RowTable slot is 8 bytes:
// row + 1 in the low 32 bits and 32 bits of the coordinate's hash in the high 32 (0 =
// empty); the coordinates stay in the caller's (N, 4) row buffer and are compared only
// when the hash bits match. Nothing is packed, so wider bounds never force a rehash.
// More rows do: `rebuild` frees the slot array, then inserts the rows again from the
// row buffer, so two tables are never alive at once. Open addressing with linear
// probing, a power-of-two capacity and a load of at most 3/4 after `rebuild`; inserts
// are lock-free (compare-and-swap on the whole slot).
#pragma once

#include <atomic>
#include <cstdint>

#include "core/hash_table.h"
#include "core/page_array.h"
#include "core/parallel.h"

namespace lattice {

class RowTable {
 public:
  static inline uint64_t hash(const int32_t* c) {
    const uint64_t a = (static_cast<uint64_t>(static_cast<uint32_t>(c[0])) << 32) | static_cast<uint32_t>(c[1]);
    const uint64_t b = (static_cast<uint64_t>(static_cast<uint32_t>(c[2])) << 32) | static_cast<uint32_t>(c[3]);
    return hash_key(a ^ hash_key(b));
  }

  static inline int64_t row_of(uint64_t slot) { return static_cast<int64_t>(static_cast<uint32_t>(slot)) - 1; }

  uint64_t capacity() const { return slots_.data() ? mask_ + 1 : 0; }

  // Whether `rows` rows fit without exceeding the load limit.
  bool fits(int64_t rows) const { return static_cast<uint64_t>(rows) * 4 <= capacity() * 3; }

  // Frees the slots, then inserts rows [0, n) of `coords` (unique, (n, 4)) into a fresh
  // slot array with room for `room` rows at a load of at most 3/4.
  void rebuild(const int32_t* coords, int64_t n, int64_t room) {
    uint64_t cap = 16;
    while (cap * 3 < static_cast<uint64_t>(room) * 4) cap <<= 1;
    slots_.reset();
    slots_.grow(cap);  // zero pages: every slot empty
    mask_ = cap - 1;
    parallel_for(n, [&](int64_t b, int64_t e) {
      for (int64_t r = b; r < e; ++r) {
        const uint64_t h = hash(coords + 4 * r);
        const uint64_t want = make(h, r);
        uint64_t pos = h & mask_;
        while (true) {
          std::atomic_ref<uint64_t> s(slots_.data()[pos]);
          uint64_t cur = 0;
          if (s.load(std::memory_order_relaxed) == 0 &&
              s.compare_exchange_strong(cur, want, std::memory_order_relaxed)) {
            break;
          }
          pos = (pos + 1) & mask_;
        }
      }
    }, 1 << 14);
  }

  // Finds or inserts coordinate c, keeping the smallest row offered for it (the first
  // occurrence); coords_of(row) gives the coordinates of a stored row. Returns the slot.
  // Concurrent-safe as long as coords_of is valid for every row offered.
  template <class CoordsOf>
  inline uint64_t insert_min(const int32_t* c, int64_t row, CoordsOf&& coords_of) {
    const uint64_t h = hash(c);
    const uint64_t want = make(h, row);
    const uint32_t tag = static_cast<uint32_t>(h >> 32);
    uint64_t pos = h & mask_;
    while (true) {
      std::atomic_ref<uint64_t> s(slots_.data()[pos]);
      uint64_t cur = s.load(std::memory_order_acquire);
      if (cur == 0) {
        if (s.compare_exchange_strong(cur, want, std::memory_order_acq_rel)) return pos;
        // lost the slot to another insert: cur now holds its entry, examined below
      }
      if (static_cast<uint32_t>(cur >> 32) == tag) {
        const int32_t* o = coords_of(row_of(cur));
        if (o[0] == c[0] && o[1] == c[1] && o[2] == c[2] && o[3] == c[3]) {
          while (row_of(cur) > row && !s.compare_exchange_weak(cur, want, std::memory_order_acq_rel)) {
          }
          return pos;
        }
      }
      pos = (pos + 1) & mask_;
    }
  }

  inline int64_t row_at(uint64_t pos) const { return row_of(slots_.data()[pos]); }

  // Renumbers the entry in slot pos (single writer per slot, no concurrent inserts).
  inline void set_row(uint64_t pos, int64_t row) {
    uint64_t& s = slots_.data()[pos];
    s = (s & ~0xffffffffULL) | static_cast<uint32_t>(row + 1);
  }

  void reset() {
    slots_.reset();
    mask_ = 0;
  }

 private:
  static inline uint64_t make(uint64_t h, int64_t row) {
    return (h & ~0xffffffffULL) | static_cast<uint32_t>(row + 1);
  }

  PageArray<uint64_t> slots_;
  uint64_t mask_ = 0;
};

}  // namespace lattice
