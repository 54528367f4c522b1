// Process settings of the native core. Nothing in csrc reads the environment: lattice's
// Python layer reads it (lattice/settings.py, the one place) and hands the values over
// once, at import, through _ext.configure, before any op runs.
#pragma once

#include <cstdint>

namespace lattice {

struct Settings {
  int num_threads = 0;                  // 0: the CPUs this process may run on
  int64_t conv_tile_floats = 1 << 14;   // floats of one gathered convolution tile
};

inline Settings& settings() {
  static Settings s;
  return s;
}

}  // namespace lattice
