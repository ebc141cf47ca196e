// Memory for large tensors: cache-line aligned, and on transparent huge pages where the system
// allows it. Gradients, parameters and optimizer state of hundreds of MiB are streamed by every
// kernel in sluice; with 4 KiB pages each stream needs a page walk every 4 KiB, with 2 MiB pages
// one per 2 MiB (measured on the development VM: docs/performance/optim.md).
#pragma once

#include <cstddef>
#include <new>

#if defined(__linux__)
#include <sys/mman.h>
#endif

namespace sluice {

/// Allocates on 64-byte boundaries (a tile starts on a cache line); arrays of 16 MiB and more on
/// 2 MiB boundaries with madvise(MADV_HUGEPAGE) (Linux; only a hint, which transparent huge pages
/// in "madvise" mode need). Stateless; usable with std::vector:
/// `std::vector<float, sluice::line_allocator<float>> grad(n);`
template <class T>
struct line_allocator {
  using value_type = T;
  line_allocator() = default;
  template <class U>
  constexpr line_allocator(line_allocator<U> const&) noexcept {}  // NOLINT(google-explicit-constructor)
  T* allocate(std::size_t n) {
    std::size_t const bytes = n * sizeof(T);
    if (bytes < huge) return static_cast<T*>(::operator new (bytes, std::align_val_t{64}));
    void* p = ::operator new (bytes, std::align_val_t{huge_page});
#if defined(__linux__)
    ::madvise(p, bytes / huge_page * huge_page, MADV_HUGEPAGE);  // a hint: failure changes nothing
#endif
    return static_cast<T*>(p);
  }
  void deallocate(T* p, std::size_t n) noexcept {
    ::operator delete (p, std::align_val_t{n * sizeof(T) < huge ? 64 : huge_page});
  }
  static constexpr std::size_t huge_page = std::size_t{2} << 20;  ///< alignment of large arrays
  static constexpr std::size_t huge = std::size_t{16} << 20;      ///< bytes from which arrays are "large"
  template <class U>
  friend constexpr bool operator==(line_allocator const&, line_allocator<U> const&) noexcept {
    return true;
  }
};

}  // namespace sluice
