// Memory for large tensors: cache-line aligned, and on transparent huge pages where the system
// allows it. Gradients, parameters and optimizer state of hundreds of MiB are streamed by every
// kernel in sluice; with 4 KiB pages each stream needs a page walk every 4 KiB, with 2 MiB pages
// one per 2 MiB.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstring>
#include <new>

#if defined(__linux__)
#include <sys/mman.h>
#endif

namespace sluice {

/// Allocates on 64-byte boundaries (a tile starts on a cache line); arrays of 16 MiB and more on
/// transparent huge pages (2 MiB-aligned regions with madvise(MADV_HUGEPAGE) on Linux; only a
/// hint, which THP in "madvise" mode needs). Large arrays also start at a different "colour" each
/// (a rotating offset of k * (4 KiB + 64 B) into their region): element i of two arrays allocated
/// one after the other must not sit a multiple of 2^28 bytes apart, or AMD Zen's L1 way predictor
/// (tags from address bits 12-27) makes their lines evict each other on every access — seen as a
/// 3x slower element-wise kernel over p, g, m, v on Zen 5. Stateless and
/// thread-safe; usable with std::vector: `std::vector<float, sluice::line_allocator<float>> g(n);`
template <class T>
struct line_allocator {
  using value_type = T;
  line_allocator() = default;
  template <class U>
  constexpr line_allocator(line_allocator<U> const&) noexcept {}  // NOLINT(google-explicit-constructor)
  T* allocate(std::size_t n) {
    std::size_t const bytes = n * sizeof(T);
    if (bytes < huge) return static_cast<T*>(::operator new (bytes, std::align_val_t{64}));
    static std::atomic<unsigned> next_colour{0};
    std::size_t const offset = colour_bytes * (1 + next_colour.fetch_add(1, std::memory_order_relaxed) % colours);
    auto* const base = static_cast<std::byte*>(::operator new (bytes + offset, std::align_val_t{huge_page}));
#if defined(__linux__)
    ::madvise(base, (bytes + offset) / huge_page * huge_page, MADV_HUGEPAGE);  // a hint: failure changes nothing
#endif
    std::memcpy(base + offset - sizeof offset, &offset, sizeof offset);  // read back by deallocate
    return reinterpret_cast<T*>(base + offset);
  }
  void deallocate(T* p, std::size_t n) noexcept {
    if (n * sizeof(T) < huge) return ::operator delete (p, std::align_val_t{64});
    auto* const q = reinterpret_cast<std::byte*>(p);
    std::size_t offset = 0;
    std::memcpy(&offset, q - sizeof offset, sizeof offset);
    ::operator delete (q - offset, std::align_val_t{huge_page});
  }
  static constexpr std::size_t huge_page = std::size_t{2} << 20;  ///< alignment of large regions
  static constexpr std::size_t huge = std::size_t{16} << 20;      ///< bytes from which arrays are "large"
  static constexpr std::size_t colour_bytes = 4096 + 64;          ///< step between colours
  static constexpr unsigned colours = 15;                         ///< distinct starting offsets
  template <class U>
  friend constexpr bool operator==(line_allocator const&, line_allocator<U> const&) noexcept {
    return true;
  }
};

}  // namespace sluice
