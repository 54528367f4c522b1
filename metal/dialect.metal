// Metal dialect of the shared kernel bodies in kernels/*.inc (the same names as
// cuda/dialect.cuh). NEVER RUN ON APPLE HARDWARE: see docs/backend.md.
#include <metal_stdlib>
using namespace metal;

#define LT_FN inline
#define LT_GLOBAL device
#define LT_SHARED threadgroup
#define LT_SHARED_ARRAY(T, name, n) threadgroup T name[n]
#define LT_BARRIER() threadgroup_barrier(mem_flags::mem_threadgroup)
// mx.fast.metal_kernel exposes these attributes when the source names them.
#define LT_THREAD_ID ((int)thread_position_in_grid.x)
#define LT_LOCAL_ID ((int)thread_position_in_threadgroup.x)
#define LT_GROUP_ID ((int)threadgroup_position_in_grid.x)
#define LT_GROUP_ID_Y ((int)threadgroup_position_in_grid.y)

typedef atomic_int lt_atomic_int;
typedef atomic_uint lt_atomic_uint;
typedef atomic_float lt_atomic_float;
typedef uint lt_uint;
#define LT_FLOAT_BITS(v) as_type<uint>(v)
// The wide type point coordinates are quantised in (kernels/points.inc). CUDA uses double,
// as the CPU core does; Metal has no double, so it is float here: a point far from the
// origin (relative to the voxel size) can land in a neighbouring voxel of the one the CPU
// core picks. A double arrives as two int32 words (high word first) and is rounded to
// float (zero for subnormals; voxel sizes and origins are finite).
typedef float lt_wide;
LT_FN float lt_wide_from_bits(int hi, int lo) {
  uint h = as_type<uint>(hi);
  int e = int((h >> 20) & 0x7FFu);
  if (e == 0) return 0.0f;
  float m = 1.0f + ldexp(float(h & 0xFFFFFu), -20) + ldexp(float(as_type<uint>(lo)), -52);
  float v = ldexp(m, e - 1023);
  return (h >> 31) != 0u ? -v : v;
}

// Compare-and-swap returning the value found (== expected when it swapped). Metal's
// weak exchange may fail spuriously; retry while the slot still holds `expected`.
LT_FN int lt_atomic_cas(device atomic_int* p, int expected, int desired) {
  int found = expected;
  while (!atomic_compare_exchange_weak_explicit(p, &found, desired, memory_order_relaxed,
                                                memory_order_relaxed)) {
    if (found != expected) return found;
    found = expected;
  }
  return expected;
}
LT_FN void lt_atomic_min(device atomic_int* p, int v) {
  atomic_fetch_min_explicit(p, v, memory_order_relaxed);
}
LT_FN void lt_atomic_max_u32(device atomic_uint* p, uint v) {
  atomic_fetch_max_explicit(p, v, memory_order_relaxed);
}
LT_FN void lt_atomic_min_u32(device atomic_uint* p, uint v) {
  atomic_fetch_min_explicit(p, v, memory_order_relaxed);
}
LT_FN void lt_atomic_add_f32(device atomic_float* p, float v) {
  atomic_fetch_add_explicit(p, v, memory_order_relaxed);
}
