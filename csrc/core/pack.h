// Packing of (batch, x, y, z) lattice coordinates into one 64-bit key.
//
// The packing is mixed-radix over the bounding box of the stored coordinates:
//   key = (((b - lo_b) * R_x + (x - lo_x)) * R_y + (y - lo_y)) * R_z + (z - lo_z)
// so any int32 coordinates pack as long as the product of the four extents fits
// in 64 bits. Memory never depends on the extents (no dense grid): they only set
// the radices. Queries outside the box are simply absent.
#pragma once

#include <array>
#include <cstdint>
#include <limits>
#include "core/message.h"
#include <stdexcept>

namespace lattice {

struct Bounds {
  std::array<int64_t, 4> lo{0, 0, 0, 0};
  std::array<int64_t, 4> hi{-1, -1, -1, -1};  // empty when hi < lo
  bool empty() const { return hi[0] < lo[0]; }
};

class Packer {
 public:
  static constexpr uint64_t kEmptyKey = std::numeric_limits<uint64_t>::max();

  Packer() = default;

  explicit Packer(const Bounds& b, const char* op = "lattice") : lo_(b.lo) {
    if (b.empty()) {
      radix_ = {0, 0, 0, 0};
      return;
    }
    unsigned __int128 total = 1;
    for (int a = 0; a < 4; ++a) {
      radix_[a] = static_cast<uint64_t>(b.hi[a] - b.lo[a] + 1);
      total *= radix_[a];
    }
    if (total >= static_cast<unsigned __int128>(kEmptyKey)) {
      lattice::Message msg;
      msg << "[" << op << "] coordinates span too large to pack into a 64-bit key: batch "
          << b.lo[0] << ".." << b.hi[0] << ", x " << b.lo[1] << ".." << b.hi[1] << ", y "
          << b.lo[2] << ".." << b.hi[2] << ", z " << b.lo[3] << ".." << b.hi[3]
          << " (the product of the four extents must be below 2^64)";
      throw std::overflow_error(msg.str());
    }
  }

  // Returns false when the coordinate lies outside the packed box.
  inline bool pack(int64_t b, int64_t x, int64_t y, int64_t z, uint64_t& key) const {
    uint64_t ub = static_cast<uint64_t>(b - lo_[0]);
    uint64_t ux = static_cast<uint64_t>(x - lo_[1]);
    uint64_t uy = static_cast<uint64_t>(y - lo_[2]);
    uint64_t uz = static_cast<uint64_t>(z - lo_[3]);
    if (ub >= radix_[0] || ux >= radix_[1] || uy >= radix_[2] || uz >= radix_[3]) return false;
    key = ((ub * radix_[1] + ux) * radix_[2] + uy) * radix_[3] + uz;
    return true;
  }

  inline void unpack(uint64_t key, int32_t* out) const {
    uint64_t z = key % radix_[3];
    key /= radix_[3];
    uint64_t y = key % radix_[2];
    key /= radix_[2];
    uint64_t x = key % radix_[1];
    uint64_t b = key / radix_[1];
    out[0] = static_cast<int32_t>(static_cast<int64_t>(b) + lo_[0]);
    out[1] = static_cast<int32_t>(static_cast<int64_t>(x) + lo_[1]);
    out[2] = static_cast<int32_t>(static_cast<int64_t>(y) + lo_[2]);
    out[3] = static_cast<int32_t>(static_cast<int64_t>(z) + lo_[3]);
  }

 private:
  std::array<int64_t, 4> lo_{0, 0, 0, 0};
  std::array<uint64_t, 4> radix_{0, 0, 0, 0};
};

// Checks that a computed coordinate range stays inside int32; throws otherwise.
inline void check_int32_bounds(const Bounds& b, const char* op) {
  constexpr int64_t lo = std::numeric_limits<int32_t>::min();
  constexpr int64_t hi = std::numeric_limits<int32_t>::max();
  if (b.empty()) return;
  for (int a = 1; a < 4; ++a) {
    if (b.lo[a] < lo || b.hi[a] > hi) {
      lattice::Message msg;
      msg << "[" << op << "] output coordinates overflow int32 on axis " << "xyz"[a - 1] << ": "
          << b.lo[a] << ".." << b.hi[a];
      throw std::overflow_error(msg.str());
    }
  }
}

}  // namespace lattice
