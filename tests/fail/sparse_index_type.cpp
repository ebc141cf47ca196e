// The mistake: a sparse view with signed indices (int), as a user's own index arrays often are.
// sparse_view takes std::uint32_t or std::uint64_t indices only, and says so.
// expected-error: sluice::sparse_view<T, Index>: Index must be std::uint32_t or std::uint64_t
// (sluice::SparseIndex), the index widths of the wire format and the kernels; write sparse_view<T> for 32-bit
// indices, or sparse_view<T, std::uint64_t> for tensors of 2^32 elements or more
#include <sluice/core/sparse.hpp>

#if defined(SLUICE_MUST_FAIL)
using index_type = int;
#else
using index_type = std::uint32_t;
#endif

int main() {
  sluice::sparse_view<float const, index_type> v{};  // error-here
  return static_cast<int>(v.nnz());
}
