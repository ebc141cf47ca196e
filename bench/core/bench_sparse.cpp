// Writing the dense form of a sparse tensor (1 % of 2^24 floats): sluice::densify as the
// reduce-scatter calls it (one forward pass; ranges of detail::densify_stream_bytes and more
// streamed out of an L1 tile), the same pass writing the range in place, and the two-pass form
// every peer uses (zero the tensor, then scatter the entries: torch's zeros + index_put_, CGX and
// StellaTrain's decompression). bw_frac counts the 4 bytes written per element, against a
// reference that writes the same array, side by side.
#include <cstdint>
#include <random>
#include <vector>

#include <sluice/core/memory.hpp>
#include <sluice/core/sparse.hpp>

#include "support/bench.hpp"

namespace {

struct sparse_case {
  std::size_t n;
  std::vector<std::uint32_t> idx;
  std::vector<float> val;
  std::vector<float, sluice::line_allocator<float>> dense;

  explicit sparse_case(std::size_t extent) : n(extent), dense(extent, 1.0f) {
    std::mt19937 rng(3);
    std::bernoulli_distribution keep(0.01);
    for (std::size_t i = 0; i < n; ++i)
      if (keep(rng)) idx.push_back(static_cast<std::uint32_t>(i)), val.push_back(static_cast<float>(i % 977) - 488.0f);
  }
  [[nodiscard]] sluice::sparse_view<float const> view() const { return {idx, val, n}; }
  [[nodiscard]] sluice::bench::kernel_arrays arrays() { return {.elements = n, .write = {{dense.data(), 4}}}; }
};

template <class Step>
void run_densify(benchmark::State& state, Step&& step) {
  sparse_case c(static_cast<std::size_t>(state.range(0)));
  sluice::bench::run_interleaved(state, c.arrays(), {.write = 4}, [&] { step(c); });
  state.counters["nnz"] = static_cast<double>(c.idx.size());
}

void BM_densify(benchmark::State& state) {
  run_densify(state, [](sparse_case& c) { sluice::densify(c.view(), std::span<float>(c.dense), 0, c.n); });
}

void BM_densify_in_place(benchmark::State& state) {
  run_densify(state,
              [](sparse_case& c) { sluice::detail::densify(c.view(), std::span<float>(c.dense), 0, c.n, SIZE_MAX); });
}

void BM_baseline_fill_scatter(benchmark::State& state) {
  run_densify(state, [](sparse_case& c) {
    std::fill(c.dense.begin(), c.dense.end(), 0.0f);
    sluice::scatter(c.view(), std::span<float>(c.dense), false);
  });
}

}  // namespace

BENCHMARK(BM_densify)->Arg(1 << 24)->UseManualTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_densify_in_place)->Arg(1 << 24)->UseManualTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_baseline_fill_scatter)->Arg(1 << 24)->UseManualTime()->Unit(benchmark::kMillisecond);
