// parallel_chunks covers [0, n) exactly once, whatever the thread count.
#include <doctest/doctest.h>

#include <atomic>
#include <vector>

#include <sluice/core/parallel.hpp>

TEST_CASE("parallel_chunks partitions the range exactly") {
  for (std::size_t n : {std::size_t{0}, std::size_t{1}, std::size_t{1000}, std::size_t{1} << 20}) {
    std::vector<std::atomic<int>> hits(n);
    int const workers = sluice::parallel_chunks(n, 1024, [&](std::size_t b, std::size_t e, int w) {
      CHECK(w >= 0);
      for (std::size_t i = b; i < e; ++i) hits[i].fetch_add(1, std::memory_order_relaxed);
    });
    CHECK(workers >= 1);
    CHECK(workers <= std::max(1, sluice::max_threads()));
    for (std::size_t i = 0; i < n; ++i) REQUIRE(hits[i].load() == 1);
  }
}
