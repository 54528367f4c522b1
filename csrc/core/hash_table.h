// Open-addressing hash table from packed 64-bit coordinate keys to int32 rows.
// Linear probing over 16-byte slots (one cache line holds four), capacity a
// power of two at least 1.5x the number of keys: memory is proportional to N.
// Inserts are lock-free (compare-and-swap on the key), so tables are built by
// all threads at once. Each slot also has a 32-bit tag that builders may use
// (the window downsample keeps the occupied kernel offsets of a cell there).
#pragma once

#include <algorithm>
#include <atomic>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "core/pack.h"
#include "core/parallel.h"

namespace lattice {

struct alignas(16) Slot {
  uint64_t key = 0;
  int32_t value;
  uint32_t tag;
};

// value and tag are updated together by one 64-bit compare-and-swap (insert_min_tag).
static_assert(offsetof(Slot, tag) == offsetof(Slot, value) + 4 && std::endian::native == std::endian::little);
using SlotWord = uint64_t __attribute__((may_alias));

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
    mask_ = cap - 1;
    slots_.reset(new Slot[cap]);
    Slot* s = slots_.get();
    parallel_for(static_cast<int64_t>(cap), [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) s[i] = Slot{kEmpty, kMissing, 0};
    }, 1 << 16);
  }

  uint64_t capacity() const { return mask_ + 1; }

  // Home slot of a key: callers prefetch it a few keys ahead, so the cache misses
  // of consecutive inserts overlap instead of queueing behind each atomic.
  inline void prefetch(uint64_t key) const { __builtin_prefetch(slots_.get() + (hash_key(key) & mask_), 1); }

  // Claims a slot for key. Returns the slot index; `inserted` tells whether this
  // call claimed it. The value is written by the callers below. Concurrent-safe.
  inline uint64_t claim(uint64_t key, bool& inserted) {
    uint64_t pos = hash_key(key) & mask_;
    Slot* s = slots_.get();
    while (true) {
      std::atomic_ref<uint64_t> slot_key(s[pos].key);
      uint64_t cur = slot_key.load(std::memory_order_acquire);
      if (cur == kEmpty) {
        if (slot_key.compare_exchange_strong(cur, key, std::memory_order_acq_rel)) {
          inserted = true;
          return pos;
        }
      }
      if (cur == key) {
        inserted = false;
        return pos;
      }
      if (cur != kEmpty) pos = (pos + 1) & mask_;
    }
  }

  // Inserts key -> value when absent (keys expected unique).
  inline uint64_t insert(uint64_t key, int32_t value, bool& inserted) {
    uint64_t pos = claim(key, inserted);
    if (inserted) std::atomic_ref<int32_t>(slots_.get()[pos].value).store(value, std::memory_order_relaxed);
    return pos;
  }

  // Keeps the smallest value stored for the key (first occurrence by row).
  // Unwritten slots hold kMissing, which counts as larger than any row.
  inline uint64_t insert_min(uint64_t key, int32_t value) {
    bool inserted;
    uint64_t pos = claim(key, inserted);
    std::atomic_ref<int32_t> v(slots_.get()[pos].value);
    int32_t cur = v.load(std::memory_order_relaxed);
    while ((cur == kMissing || value < cur) &&
           !v.compare_exchange_weak(cur, value, std::memory_order_relaxed)) {
    }
    return pos;
  }

  // insert_min, and also sets `bit` in the slot's tag, in one atomic update of both.
  inline uint64_t insert_min_tag(uint64_t key, int32_t value, uint32_t bit) {
    bool inserted;
    uint64_t pos = claim(key, inserted);
    SlotWord* word = reinterpret_cast<SlotWord*>(&slots_.get()[pos].value);
    uint64_t cur = __atomic_load_n(word, __ATOMIC_RELAXED);
    while (true) {
      const int32_t v = static_cast<int32_t>(static_cast<uint32_t>(cur));
      const uint32_t tag = static_cast<uint32_t>(cur >> 32) | bit;
      const int32_t nv = (v == kMissing || value < v) ? value : v;
      const uint64_t next = (static_cast<uint64_t>(tag) << 32) | static_cast<uint32_t>(nv);
      if (next == cur ||
          __atomic_compare_exchange_n(word, &cur, next, true, __ATOMIC_RELAXED, __ATOMIC_RELAXED))
        return pos;
    }
  }

  inline int32_t find(uint64_t key) const {
    uint64_t pos = hash_key(key) & mask_;
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
  std::unique_ptr<Slot[]> slots_;
  uint64_t mask_ = 0;
};

// Runs fn(i, key_of(i)) for i in [b, e) in order, prefetching the home slot of the key
// kAhead rows ahead: consecutive inserts then wait on their cache misses together.
template <class KeyOf, class Fn>
inline void for_keys_prefetched(const HashTable& table, int64_t b, int64_t e, KeyOf&& key_of, Fn&& fn) {
  constexpr int64_t kAhead = 8;  // a power of two
  uint64_t ring[kAhead];
  for (int64_t j = b; j < std::min(e, b + kAhead); ++j) table.prefetch(ring[j & (kAhead - 1)] = key_of(j));
  for (int64_t i = b; i < e; ++i) {
    const uint64_t key = ring[i & (kAhead - 1)];
    if (i + kAhead < e) table.prefetch(ring[(i + kAhead) & (kAhead - 1)] = key_of(i + kAhead));
    fn(i, key);
  }
}

}  // namespace lattice
