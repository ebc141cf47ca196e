// The one parallel-loop helper: static chunks over OpenMP threads (serial without OpenMP).
// Kernels split work in cache-sized chunks and call this; no kernel opens its own omp region.
#pragma once

#include <algorithm>
#include <cstddef>

#include <sluice/config.hpp>

#if SLUICE_HAS_OPENMP
#include <omp.h>
#endif

namespace sluice {

/// Threads a parallel region started now would use (1 without OpenMP).
inline int max_threads() noexcept {
#if SLUICE_HAS_OPENMP
  return omp_get_max_threads();
#else
  return 1;
#endif
}

/// Calls f(begin, end, worker) on contiguous chunks of [0, n) of at least `grain` elements, one
/// chunk per worker (worker in [0, workers)). Returns the number of workers asked for (an upper
/// bound on the worker ids passed to f; size per-worker scratch by it). Serial when
/// n < 2 * grain. `f` must not throw across threads: callers validate before the loop.
template <class F>
int parallel_chunks(std::size_t n, std::size_t grain, F&& f) {
  std::size_t const g = std::max<std::size_t>(grain, 1);
  int const workers =
      static_cast<int>(std::min<std::size_t>(static_cast<std::size_t>(max_threads()), std::max<std::size_t>(n / g, 1)));
  if (workers <= 1) {
    f(std::size_t{0}, n, 0);
    return 1;
  }
#if SLUICE_HAS_OPENMP
#pragma omp parallel num_threads(workers)
  {
    int const w = omp_get_thread_num();
    auto const nt = static_cast<std::size_t>(omp_get_num_threads());  // may be fewer than asked
    std::size_t const per = n / nt, extra = n % nt;
    std::size_t const uw = static_cast<std::size_t>(w);
    std::size_t const begin = uw * per + std::min(uw, extra);
    std::size_t const end = begin + per + (uw < extra ? 1 : 0);
    f(begin, end, w);
  }
#endif
  return workers;
}

}  // namespace sluice
