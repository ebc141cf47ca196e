// Non-temporal copy of whole cache lines written once over lanes: stream_lanes<L> for each level
// L, stamped by core/detail/simd_stamp.hpp from core/sparse.hpp (no include guard; alone it
// includes that).
#ifndef SLUICE_SIMD_LEVEL
#include <sluice/core/sparse.hpp>
#else

namespace sluice::detail {

template <>
struct stream_lanes<SLUICE_SIMD_LEVEL> {
  /// bytes (a multiple of 64) from the 64-byte-aligned src to the 64-byte-aligned dst.
  static void copy(std::byte* SLUICE_RESTRICT dst, std::byte const* SLUICE_RESTRICT src, std::size_t bytes) noexcept {
    for (std::size_t i = 0; i < bytes; i += 64) detail::simd::vi32<SLUICE_SIMD_LEVEL>::stream64(dst + i, src + i);
  }
};

}  // namespace sluice::detail

#endif
