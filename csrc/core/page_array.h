// Zero-initialised storage in whole pages that grows without copying: anonymous mmap,
// grown with mremap on Linux (the pages move, nothing is copied, so growth never needs
// the old and the new buffer at once), mmap + copy elsewhere. Capacity that was never
// written costs no resident memory, and freeing unmaps at once (a heap block below
// glibc's trim threshold would stay resident). For buffers that grow with the data,
// such as per-voxel accumulators filled chunk by chunk.
#pragma once

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <new>
#include <type_traits>
#include <utility>

namespace lattice {

inline void* map_pages(size_t bytes) {
  return mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
}

// Grows a mapping of old_bytes to new_bytes (contents kept, the rest zero); MAP_FAILED on failure.
#if defined(__linux__)
inline void* grow_pages(void* p, size_t old_bytes, size_t new_bytes) {
  return mremap(p, old_bytes, new_bytes, MREMAP_MAYMOVE);  // moves the pages, copies nothing
}
#else
inline void* grow_pages(void* p, size_t old_bytes, size_t new_bytes) {
  void* q = map_pages(new_bytes);
  if (q != MAP_FAILED) {
    std::memcpy(q, p, old_bytes);
    munmap(p, old_bytes);
  }
  return q;
}
#endif

template <class T>
class PageArray {
  static_assert(std::is_trivially_copyable_v<T>, "PageArray holds trivially copyable values");

 public:
  PageArray() = default;
  explicit PageArray(size_t n) { grow(n); }
  ~PageArray() { reset(); }
  PageArray(const PageArray&) = delete;
  PageArray& operator=(const PageArray&) = delete;
  PageArray(PageArray&& o) noexcept
      : data_(std::exchange(o.data_, nullptr)), bytes_(std::exchange(o.bytes_, 0)) {}
  PageArray& operator=(PageArray&& o) noexcept {
    if (this != &o) {
      reset();
      data_ = std::exchange(o.data_, nullptr);
      bytes_ = std::exchange(o.bytes_, 0);
    }
    return *this;
  }

  T* data() { return data_; }
  const T* data() const { return data_; }
  size_t capacity() const { return bytes_ / sizeof(T); }

  // Capacity for at least n elements; elements never written before read as zero.
  void grow(size_t n) {
    if (n <= capacity() && data_) return;
    const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
    const size_t bytes = (std::max<size_t>(n, 1) * sizeof(T) + page - 1) / page * page;
    void* p = data_ ? grow_pages(data_, bytes_, bytes) : map_pages(bytes);
    if (p == MAP_FAILED) throw std::bad_alloc();
    data_ = static_cast<T*>(p);
    bytes_ = bytes;
  }

  // Geometric growth (x1.5) for buffers filled a piece at a time.
  void reserve(size_t n) {
    if (n > capacity() || !data_) grow(std::max(n, capacity() + capacity() / 2));
  }

  void reset() {
    if (data_) munmap(data_, bytes_);
    data_ = nullptr;
    bytes_ = 0;
  }

 private:
  T* data_ = nullptr;
  size_t bytes_ = 0;
};

}  // namespace lattice
