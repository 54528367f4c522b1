// Minimal fork-join helpers for the CPU backend. Work is split into contiguous
// chunks whose order is fixed by the input size alone, so results never depend
// on the number of threads.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <cstdint>
#include <cstdlib>
#include <exception>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "core/settings.h"

#include <sched.h>
#include <unistd.h>

namespace lattice {

// Threads of the pool: fixed at the first call (lattice configures the core at import).
inline int num_threads() {
  static const int n = [] {
    if (settings().num_threads > 0) return settings().num_threads;  // LATTICE_NUM_THREADS
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

// Busy-waits one round: a pause instruction where there is one.
inline void spin_pause() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

// A persistent pool of num_threads() - 1 workers; the calling thread is the
// last worker. One job at a time: a caller that finds the pool busy (another
// thread is using it) runs its job on fresh threads instead.
//
// Hand-offs spin before they sleep: a worker that finishes a job watches for the next
// one for kSpin before it waits on the condition variable, and the caller watches for
// the workers to finish for as long before it waits. An op runs several parallel regions
// back to back (sparse_quantize: bounds, table clear, packing, rows; a convolution's
// gathers and products), and waking a sleeping thread through the kernel costs tens of
// microseconds on a loaded virtual machine, each way; while a worker spins, a new job
// reaches it without a system call (the condition variable is notified only when a
// worker sleeps). A worker idle past kSpin sleeps: an idle lattice takes no CPU.
class ThreadPool {
 public:
  static ThreadPool& instance() {
    static ThreadPool* pool = new ThreadPool(num_threads());  // never destroyed: workers are detached
    return *pool;
  }

  int size() const { return static_cast<int>(workers_) + 1; }

  // Runs job(t) for t in [0, n) with n <= size(); returns when all are done.
  template <class Job>
  bool try_run(int n, Job& job) {
    if (getpid() != pid_) return false;  // a forked child has no workers
    std::unique_lock<std::mutex> busy(busy_, std::try_to_lock);
    if (!busy.owns_lock()) return false;
    bool wake;
    {
      std::lock_guard<std::mutex> lock(m_);
      job_ = [&job](int t) { job(t); };
      active_ = n - 1;
      pending_.store(n - 1, std::memory_order_relaxed);
      generation_.fetch_add(1, std::memory_order_release);
      wake = sleepers_ > 0;  // read under m_: a worker about to sleep sees the new generation
    }
    if (wake) cv_.notify_all();
    job(0);
    if (!spin_until([&] { return pending_.load(std::memory_order_acquire) == 0; })) {
      std::unique_lock<std::mutex> lock(m_);
      caller_waits_ = true;
      done_.wait(lock, [&] { return pending_.load(std::memory_order_relaxed) == 0; });
      caller_waits_ = false;
    }
    std::lock_guard<std::mutex> lock(m_);
    job_ = nullptr;
    return true;
  }

 private:
  static constexpr auto kSpin = std::chrono::microseconds(200);

  explicit ThreadPool(int threads) : workers_(threads > 1 ? threads - 1 : 0), pid_(getpid()) {
    for (unsigned i = 0; i < workers_; ++i) std::thread([this, i] { loop(static_cast<int>(i) + 1); }).detach();
  }

  // Spins until done() or kSpin has passed (the clock read every 64 rounds); done()'s value.
  template <class Done>
  static bool spin_until(Done&& done) {
    const auto until = std::chrono::steady_clock::now() + kSpin;
    for (int i = 1;; ++i) {
      if (done()) return true;
      spin_pause();
      if (i % 64 == 0 && std::chrono::steady_clock::now() > until) return done();
    }
  }

  void loop(int t) {
    uint64_t seen = 0;
    while (true) {
      std::function<void(int)> job;
      spin_until([&] { return generation_.load(std::memory_order_acquire) != seen; });
      {
        std::unique_lock<std::mutex> lock(m_);
        if (generation_.load(std::memory_order_relaxed) == seen) {
          ++sleepers_;
          cv_.wait(lock, [&] { return generation_.load(std::memory_order_relaxed) != seen; });
          --sleepers_;
        }
        seen = generation_.load(std::memory_order_relaxed);
        if (t > active_) continue;
        job = job_;
      }
      job(t);
      std::lock_guard<std::mutex> lock(m_);
      if (pending_.fetch_sub(1, std::memory_order_release) == 1 && caller_waits_) done_.notify_all();
    }
  }

  unsigned workers_;
  pid_t pid_;
  std::mutex busy_, m_;
  std::condition_variable cv_, done_;
  std::function<void(int)> job_;
  int active_ = 0;
  int sleepers_ = 0;           // workers waiting on cv_ (under m_)
  bool caller_waits_ = false;  // the caller waits on done_ (under m_)
  std::atomic<int> pending_{0};
  std::atomic<uint64_t> generation_{0};
};

// Runs fn(chunk_index, begin, end) for every chunk, on up to num_threads() threads.
// Threads take the next unclaimed chunk as they finish one, so a thread the OS has
// descheduled (a busy shared machine) delays the call by at most the chunk it holds,
// not by a fixed share of the work. Chunk boundaries depend on n and chunks only.
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
  std::atomic<int64_t> next{0};
  auto worker = [&](int) {
    try {
      for (int64_t c = next.fetch_add(1, std::memory_order_relaxed); c < chunks;
           c = next.fetch_add(1, std::memory_order_relaxed)) {
        fn(c, chunk_begin(n, chunks, c), chunk_begin(n, chunks, c + 1));
      }
    } catch (...) {
      std::lock_guard<std::mutex> lock(error_mutex);
      if (!error) error = std::current_exception();
    }
  };
  if (!ThreadPool::instance().try_run(threads, worker)) {
    std::vector<std::thread> pool;
    pool.reserve(threads - 1);
    for (int t = 1; t < threads; ++t) pool.emplace_back(worker, t);
    worker(0);
    for (auto& th : pool) th.join();
  }
  if (error) std::rethrow_exception(error);
}

// parallel_chunks when `parallel`, else the same chunks in order on the calling thread
// (a scatter whose chunks may write the same rows).
template <class Fn>
void maybe_parallel_chunks(bool parallel, int64_t n, int64_t chunks, Fn&& fn) {
  if (parallel) {
    parallel_chunks(n, chunks, std::forward<Fn>(fn));
    return;
  }
  for (int64_t c = 0; c < chunks; ++c) fn(c, chunk_begin(n, chunks, c), chunk_begin(n, chunks, c + 1));
}

// Convenience: parallel loop over [0, n) in default chunks.
template <class Fn>
void parallel_for(int64_t n, Fn&& fn, int64_t grain = 4096) {
  parallel_chunks(n, chunk_count(n, grain), [&](int64_t, int64_t b, int64_t e) { fn(b, e); });
}

}  // namespace lattice
