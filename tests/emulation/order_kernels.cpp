// The row-order kernels of kernels/relations.inc (lt_row_keys, lt_key_order) run on the CPU:
// each group of LT_ORDER_THREADS threads is that many std::threads meeting at a
// std::barrier for LT_BARRIER, shared memory is a buffer the group's threads share, and the
// dialect's atomics are GCC builtins. The kernel bodies are the files the GPU compiles
// (included from the root given with -I), so tests/test_kernel_emulation.py checks their
// logic — barriers, shared and global counters, the scan — where no GPU is lent; NVRTC
// compiling them is tools/check_kernels.py's part.
//
//     order_kernels MAP_FILE OUT_FILE
//
// MAP_FILE: int32 n, K, then the (n, K) int32 map. OUT_FILE: uint32 masks (n), counts
// (LT_ORDER_KEYS), int32 order (n), uint32 taken (LT_ORDER_KEYS). Groups run one after
// another (their global atomics then meet in turn, not at once).
#include <algorithm>
#include <barrier>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>
using std::min;
#define LT_FN static inline
#define LT_GLOBAL
#define LT_SHARED
static thread_local std::barrier<>* lt_bar;
#define LT_BARRIER() lt_bar->arrive_and_wait()
typedef int lt_atomic_int;
typedef unsigned lt_atomic_uint;
typedef unsigned lt_uint;
LT_FN int lt_atomic_cas(int* p, int e, int d) { __atomic_compare_exchange_n(p, &e, d, false, __ATOMIC_RELAXED, __ATOMIC_RELAXED); return e; }
LT_FN void lt_atomic_min(int* p, int v) { int o = __atomic_load_n(p, __ATOMIC_RELAXED); while (v < o && !__atomic_compare_exchange_n(p, &o, v, true, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {} }
LT_FN void lt_atomic_min_u32(unsigned* p, unsigned v) { unsigned o = __atomic_load_n(p, __ATOMIC_RELAXED); while (v < o && !__atomic_compare_exchange_n(p, &o, v, true, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {} }
LT_FN lt_uint lt_atomic_add_u32(lt_atomic_uint* p, lt_uint v) { return __atomic_fetch_add(p, v, __ATOMIC_RELAXED); }
LT_FN lt_uint lt_local_load(lt_atomic_uint* p) { return __atomic_load_n(p, __ATOMIC_RELAXED); }
LT_FN void lt_local_store(lt_atomic_uint* p, lt_uint v) { __atomic_store_n(p, v, __ATOMIC_RELAXED); }
LT_FN lt_uint lt_local_add(lt_atomic_uint* p, lt_uint v) { return __atomic_fetch_add(p, v, __ATOMIC_RELAXED); }
#define LT_CHECK_GROUP 256  // coords.inc reads it; no kernel here uses it
#include "kernels/coords.inc"
#include "kernels/relations.inc"

template <class F> void run_groups(int groups, F f) {
  for (int g = 0; g < groups; ++g) {
    std::barrier<> bar(LT_ORDER_THREADS);
    std::vector<std::thread> ts;
    for (int lid = 0; lid < LT_ORDER_THREADS; ++lid)
      ts.emplace_back([&, lid] { lt_bar = &bar; f(g, lid); });
    for (auto& t : ts) t.join();
  }
}

int main(int argc, char** argv) {
  if (argc != 3) return 2;
  FILE* f = fopen(argv[1], "rb");
  int hdr[2];
  if (f == nullptr || fread(hdr, 4, 2, f) != 2) return 1;
  int n = hdr[0], kv = hdr[1];
  std::vector<int> map((size_t)n * kv);
  if (fread(map.data(), 4, map.size(), f) != map.size()) return 1;
  fclose(f);
  int params[2] = {n, kv};
  std::vector<unsigned> masks(n), counts(LT_ORDER_KEYS, 0u), taken(LT_ORDER_KEYS, 0u);
  std::vector<int> order(n, 0);
  int groups = (n + LT_ORDER_ROWS - 1) / LT_ORDER_ROWS;
  {
    std::vector<unsigned> h(LT_ORDER_KEYS);
    run_groups(groups, [&](int g, int lid) { lt_row_keys(map.data(), params, masks.data(), counts.data(), h.data(), g, lid); });
  }
  {
    std::vector<unsigned> h(LT_ORDER_KEYS), at(LT_ORDER_KEYS), part(LT_ORDER_THREADS);
    run_groups(groups, [&](int g, int lid) {
      lt_key_order(masks.data(), counts.data(), params, order.data(), taken.data(), h.data(), at.data(), part.data(), g, lid);
    });
  }
  FILE* o = fopen(argv[2], "wb");
  if (o == nullptr) return 1;
  fwrite(masks.data(), 4, n, o);
  fwrite(counts.data(), 4, LT_ORDER_KEYS, o);
  fwrite(order.data(), 4, n, o);
  fwrite(taken.data(), 4, LT_ORDER_KEYS, o);
  fclose(o);
}
