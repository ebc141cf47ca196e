// sluice::kernels: the top-k selection of every element type, compiled once
// (include/sluice/compress/detail/instances.hpp).
#include <sluice/compress/detail/instances.hpp>

namespace sluice::compress_detail {
SLUICE_COMPRESS_KERNELS(template)
}  // namespace sluice::compress_detail
