// The codec kernels sluice::kernels compiles once: the top-k selection (band filter and emission
// stamped per instruction-set level) for each element type, as top_k, block_top_k,
// threshold_top_k and the fused block pass call it. With SLUICE_SEPARATE_KERNELS (defined by
// linking sluice::kernels) they are declared `extern template` here and taken from that library;
// the header-only default does not see these declarations. Included at the end of select.hpp.
#pragma once

#include <cstdint>
#include <span>

#include <sluice/compress/detail/select.hpp>
#include <sluice/core/float16.hpp>

// PREFIX is `extern template` (the declarations below) or `template` (the library's definitions).
#define SLUICE_COMPRESS_KERNELS_T(PREFIX, T)                                                                   \
  PREFIX top_k_threshold select_top_k<T, std::uint32_t>(std::span<T const>, std::size_t, select_workspace<T>&, \
                                                        std::span<std::uint32_t>, std::span<T>);
/// Every instance, inside namespace sluice::detail::compress.
#define SLUICE_COMPRESS_KERNELS(PREFIX)             \
  SLUICE_COMPRESS_KERNELS_T(PREFIX, float)          \
  SLUICE_COMPRESS_KERNELS_T(PREFIX, ::sluice::half) \
  SLUICE_COMPRESS_KERNELS_T(PREFIX, ::sluice::bfloat16)

#if defined(SLUICE_SEPARATE_KERNELS)
namespace sluice::detail::compress {
SLUICE_COMPRESS_KERNELS(extern template)
}  // namespace sluice::detail::compress
#endif
