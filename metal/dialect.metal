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
LT_FN void lt_atomic_add_f32(device atomic_float* p, float v) {
  atomic_fetch_add_explicit(p, v, memory_order_relaxed);
}
