// sparse_view accepts only uint32_t or uint64_t indices: a signed index type must not compile.
// expected-error: SparseIndex
#include <sluice/core/sparse.hpp>

#if defined(SLUICE_MUST_FAIL)
using index_type = int;
#else
using index_type = std::uint32_t;
#endif

int main() {
  sluice::sparse_view<float const, index_type> v{};
  return static_cast<int>(v.nnz());
}
