// Software prefetch of a byte range for writing, one hint per cache line (a no-op where the
// compiler has no __builtin_prefetch).
#pragma once

#include <cstddef>
#include <cstdint>

namespace sluice::detail {

/// Prefetches (for writing) every cache line of [first, first + bytes).
inline void prefetch_lines(void const* first, std::size_t bytes) noexcept {
#if defined(__GNUC__) || defined(__clang__)
  if (bytes == 0) return;
  auto const b = reinterpret_cast<std::uintptr_t>(first), last = b + bytes - 1;
  for (std::uintptr_t q = b & ~std::uintptr_t{63}; q <= last; q += 64)
    __builtin_prefetch(reinterpret_cast<void const*>(q), 1, 3);
#else
  (void)first, (void)bytes;
#endif
}

}  // namespace sluice::detail
