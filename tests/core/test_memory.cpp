// line_allocator: cache-line alignment, large arrays in distinct colours (never a multiple of
// 2^28 bytes apart element for element), correct release (ASan runs this test too).
#include <doctest/doctest.h>

#include <cstdint>
#include <set>
#include <vector>

#include <sluice/core/memory.hpp>

TEST_CASE("line_allocator aligns to a cache line and colours large arrays apart") {
  using A = sluice::line_allocator<float>;
  std::vector<float, A> small(1000, 1.0f);
  CHECK(reinterpret_cast<std::uintptr_t>(small.data()) % 64 == 0);
  std::size_t const n = (std::size_t{16} << 20) / sizeof(float) + 5;  // just past "large"
  std::vector<std::vector<float, A>> big;
  std::set<std::uintptr_t> colours;
  for (int i = 0; i < 4; ++i) {
    big.emplace_back(n, static_cast<float>(i));
    auto const p = reinterpret_cast<std::uintptr_t>(big.back().data());
    CHECK(p % 64 == 0);
    colours.insert(p % A::huge_page);
  }
  // Consecutive large arrays start at different offsets within their 2 MiB regions, so element i
  // of two of them is never a multiple of 2^28 bytes (or of the region size) apart.
  CHECK(colours.size() == 4);
  for (std::size_t a = 0; a < big.size(); ++a)
    for (std::size_t b = a + 1; b < big.size(); ++b) {
      auto const pa = reinterpret_cast<std::uintptr_t>(big[a].data()),
                 pb = reinterpret_cast<std::uintptr_t>(big[b].data());
      CHECK((pa > pb ? pa - pb : pb - pa) % (std::uintptr_t{1} << 28) != 0);
    }
  // Contents survive and the storage is released through the same path (resizing reallocates).
  for (int i = 0; i < 4; ++i) CHECK(big[static_cast<std::size_t>(i)][n - 1] == static_cast<float>(i));
  big[0].resize(2 * n, 7.0f);
  CHECK(big[0][0] == 0.0f);
  CHECK(big[0][2 * n - 1] == 7.0f);
}
