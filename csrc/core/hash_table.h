// Open-addressing hash table from packed 64-bit coordinate keys to int32 rows.
// Linear probing over 16-byte slots (one cache line holds four), capacity a
// power of two at least 1.5x the number of keys: memory is proportional to N. unique_first
// sizes its table from an estimate of the distinct keys and grows it (grow()) on demand.
// Builders (build_coord_table, unique_first) pack the keys and their home slots (or
// hashes) in parallel, then insert them in row order on one thread without atomics, the home
// slots prefetched ahead: the first row to find a key absent is its first occurrence.
// Tables are read-only once built, so lookups run on all threads.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "core/pack.h"
#include "core/parallel.h"

namespace lattice {

struct alignas(16) Slot {
  uint64_t key;  // no initialiser: new Slot[cap] must not write the table before reset fills it in parallel
  int32_t value;
  int32_t pad;
};

inline uint64_t hash_key(uint64_t k) {
  // splitmix64 finaliser
  k ^= k >> 30;
  k *= 0xbf58476d1ce4e5b9ULL;
  k ^= k >> 27;
  k *= 0x94d049bb133111ebULL;
  k ^= k >> 31;
  return k;
}

class HashTable {
 public:
  static constexpr uint64_t kEmpty = Packer::kEmptyKey;
  static constexpr int32_t kMissing = -1;

  HashTable() = default;

  explicit HashTable(int64_t expected) { reset(expected); }

  void reset(int64_t expected) {
    uint64_t cap = 16;
    while (cap < static_cast<uint64_t>(expected) + static_cast<uint64_t>(expected) / 2 + 1) cap <<= 1;
    allocate(cap);
  }

  uint64_t capacity() const { return mask_ + 1; }
  uint64_t mask() const { return mask_; }

  // Whether `keys` keys would load the table past 2/3 (the builders grow before that).
  inline bool full_at(int64_t keys) const { return static_cast<uint64_t>(keys) * 3 > capacity() * 2; }

  // Doubles the capacity, every occupied slot re-placed (single-threaded, like place()).
  void grow() {
    const uint64_t old_cap = capacity();
    std::unique_ptr<Slot[]> old(std::move(slots_));
    allocate(old_cap * 2);
    Slot* s = slots_.get();
    for (uint64_t i = 0; i < old_cap; ++i) {
      if (old[i].key == kEmpty) continue;
      uint64_t pos = hash_key(old[i].key) & mask_;
      while (s[pos].key != kEmpty) pos = (pos + 1) & mask_;
      s[pos] = old[i];
    }
  }

  // Home slot of a key. Builders compute it in parallel, then prefetch it a few rows
  // ahead of place(), so the cache misses of consecutive inserts overlap.
  inline uint64_t home(uint64_t key) const { return hash_key(key) & mask_; }
  inline void prefetch(uint64_t pos) const { __builtin_prefetch(slots_.get() + pos, 1); }

  // Single-threaded insert: the slot of key, probing from its home slot. `fresh` tells
  // whether the key was absent; the slot then holds the key and kMissing for the caller.
  inline Slot& place(uint64_t key, uint64_t home, bool& fresh) {
    Slot* s = slots_.get();
    uint64_t pos = home;
    while (s[pos].key != key && s[pos].key != kEmpty) pos = (pos + 1) & mask_;
    fresh = s[pos].key != key;
    s[pos].key = key;
    return s[pos];
  }

  inline int32_t find(uint64_t key) const { return find_at(key, hash_key(key) & mask_); }

  // find() from a home slot computed (and prefetched) beforehand.
  inline int32_t find_at(uint64_t key, uint64_t pos) const {
    const Slot* s = slots_.get();
    while (true) {
      uint64_t cur = s[pos].key;
      if (cur == key) return s[pos].value;
      if (cur == kEmpty) return kMissing;
      pos = (pos + 1) & mask_;
    }
  }

  inline Slot& slot(uint64_t pos) { return slots_.get()[pos]; }
  inline const Slot& slot(uint64_t pos) const { return slots_.get()[pos]; }

 private:
  // cap empty slots (a power of two), filled in parallel.
  void allocate(uint64_t cap) {
    mask_ = cap - 1;
    slots_.reset(new Slot[cap]);
    Slot* s = slots_.get();
    parallel_for(static_cast<int64_t>(cap), [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) s[i] = Slot{kEmpty, kMissing, 0};
    }, 1 << 16);
  }

  std::unique_ptr<Slot[]> slots_;
  uint64_t mask_ = 0;
};

}  // namespace lattice
