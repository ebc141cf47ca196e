// non_finite_counter: the device side of error feedback's non-finite counters and of the search for
// a NaN or Inf before anything changes.
#pragma once

#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <span>

#include <cuda_runtime.h>

#include <sluice/core/error.hpp>
#include <sluice/cuda/detail/non_finite_kernels.cuh>
#include <sluice/cuda/runtime.cuh>

namespace sluice::cuda {

namespace kernel = sluice::detail::cuda;

/// Device counters of error feedback's non-finite handling (the device side of feedback_report):
/// the feedback wrappers given count() add the number of NaN or Inf compensated values to it (what
/// non_finite_values counts under every policy), and find() locates the first NaN or Inf of a
/// gradient before anything changes (what non_finite_policy::throw_error and skip_step act on,
/// see apply_non_finite_policy). One counter serves any number of calls on one stream.
class non_finite_counter {
 public:
  non_finite_counter() : words_(2) {
    check(cudaMemset(words_.data(), 0, 2 * sizeof(unsigned long long)), "cuda::non_finite_counter");
  }
  /// The device word the feedback wrappers add to.
  [[nodiscard]] unsigned long long* count() noexcept { return words_.data(); }
  /// The count so far, reset to 0 (synchronizes `s`): pass it to feedback_state::record_non_finite.
  [[nodiscard]] std::uint64_t take(cudaStream_t s) {
    unsigned long long v = 0;
    check(cudaMemcpyAsync(&v, words_.data(), sizeof v, cudaMemcpyDeviceToHost, s), "cuda::non_finite_counter::take");
    check(cudaMemsetAsync(words_.data(), 0, sizeof v, s), "cuda::non_finite_counter::take");
    check(cudaStreamSynchronize(s), "cuda::non_finite_counter::take");
    return v;
  }
  /// Index of the first NaN or Inf of g, or std::size_t(-1) when every value is finite (as
  /// sluice::first_non_finite); synchronizes `s`.
  [[nodiscard]] std::size_t find(std::span<float const> g, cudaStream_t s) {
    unsigned long long* const at = words_.data() + 1;
    check(cudaMemsetAsync(at, 0xff, sizeof *at, s), "cuda::non_finite_counter::find");
    if (!g.empty())
      kernel::find_non_finite<<<kernel::grid_for(g.size()), kernel::threads, 0, s>>>(g.data(), g.size(), at);
    check(cudaGetLastError(), "cuda::non_finite_counter::find");
    unsigned long long v = 0;
    check(cudaMemcpyAsync(&v, at, sizeof v, cudaMemcpyDeviceToHost, s), "cuda::non_finite_counter::find");
    check(cudaStreamSynchronize(s), "cuda::non_finite_counter::find");
    return v == ~0ull ? static_cast<std::size_t>(-1) : static_cast<std::size_t>(v);
  }

 private:
  device_buffer<unsigned long long> words_;  // the count, find's index
};

}  // namespace sluice::cuda
