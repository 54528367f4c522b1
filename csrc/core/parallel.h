// Minimal fork-join helpers for the CPU backend. Work is split into contiguous
// chunks whose order is fixed by the input size alone, so results never depend
// on the number of threads.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

#include <sched.h>

namespace lattice {

inline int num_threads() {
  static const int n = [] {
    if (const char* env = std::getenv("LATTICE_NUM_THREADS")) {
      int v = std::atoi(env);
      if (v > 0) return v;
    }
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof(set), &set) == 0) {
      int c = CPU_COUNT(&set);
      if (c > 0) return c;
    }
    unsigned h = std::thread::hardware_concurrency();
    return h > 0 ? static_cast<int>(h) : 1;
  }();
  return n;
}

// Number of chunks for n items: a fixed function of n (not of the thread count).
inline int64_t chunk_count(int64_t n, int64_t grain = 4096, int64_t max_chunks = 64) {
  if (n <= 0) return 0;
  return std::clamp<int64_t>((n + grain - 1) / grain, 1, max_chunks);
}

inline int64_t chunk_begin(int64_t n, int64_t chunks, int64_t c) {
  return (n * c) / chunks;
}

// Runs fn(chunk_index, begin, end) for every chunk, on up to num_threads() threads.
template <class Fn>
void parallel_chunks(int64_t n, int64_t chunks, Fn&& fn) {
  if (chunks <= 0) return;
  int threads = static_cast<int>(std::min<int64_t>(num_threads(), chunks));
  if (threads <= 1) {
    for (int64_t c = 0; c < chunks; ++c) fn(c, chunk_begin(n, chunks, c), chunk_begin(n, chunks, c + 1));
    return;
  }
  std::exception_ptr error;
  std::mutex error_mutex;
  auto worker = [&](int t) {
    try {
      for (int64_t c = t; c < chunks; c += threads) {
        fn(c, chunk_begin(n, chunks, c), chunk_begin(n, chunks, c + 1));
      }
    } catch (...) {
      std::lock_guard<std::mutex> lock(error_mutex);
      if (!error) error = std::current_exception();
    }
  };
  std::vector<std::thread> pool;
  pool.reserve(threads - 1);
  for (int t = 1; t < threads; ++t) pool.emplace_back(worker, t);
  worker(0);
  for (auto& th : pool) th.join();
  if (error) std::rethrow_exception(error);
}

// Convenience: parallel loop over [0, n) in default chunks.
template <class Fn>
void parallel_for(int64_t n, Fn&& fn, int64_t grain = 4096) {
  parallel_chunks(n, chunk_count(n, grain), [&](int64_t, int64_t b, int64_t e) { fn(b, e); });
}

}  // namespace lattice
