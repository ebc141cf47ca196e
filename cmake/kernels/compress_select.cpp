// sluice::kernels: the top-k selection of every element type, compiled once
// (include/sluice/compress/detail/instances.hpp).
#include <sluice/compress/detail/instances.hpp>

namespace sluice::detail::compress {
SLUICE_COMPRESS_KERNELS(template)
}  // namespace sluice::detail::compress
