// The look-ahead of staleness compensation `local_step` (pipeline/detail/compensation.hpp): the
// parameters the trainer gets are the master weights stepped by the optimizer over the s steps in
// flight, on a scratch copy of the optimizer state. The apply thread computes it once per update,
// so its cost is part of the pipeline's CPU work per step. Measured against the reference kernel
// over the same arrays: the bytes a fused look-ahead must move at least (read the weights, the
// moments and s gradients, write the view). A chunked form (weights and state copy kept in cache
// chunk by chunk) was measured on 2026-12-06 at the same speed as this one, within 12 % either
// way on an idle 2-vCPU host: the step's arithmetic, not the copies, sets the time here.
#include <benchmark/benchmark.h>

#include <cstddef>
#include <cstdint>
#include <random>
#include <span>
#include <vector>

#include <sluice/optim/adam.hpp>
#include <sluice/optim/sgd.hpp>
#include <sluice/optim/state.hpp>
#include <sluice/optim/step.hpp>
#include <sluice/pipeline/detail/compensation.hpp>

#include "support/bench.hpp"

namespace {

using sluice::optimizer_state;

// What the compensator reads of a bucket.
template <class O>
struct bucket {
  std::size_t first = 0, elements = 0;
  optimizer_state<O> ostate;
};

template <class O>
struct look_ahead_case {
  look_ahead_case(O const& opt, std::size_t n, unsigned staleness)
      : o(opt),
        s(staleness),
        master(n),
        grads(staleness + 1, std::vector<float>(n)),
        bk{0, n, optimizer_state<O>(opt, n)} {
    std::mt19937 rng(7);
    std::normal_distribution<float> d(0.0f, 1e-2f);
    for (auto& x : master) x = d(rng);
    for (auto& g : grads)
      for (auto& x : g) x = d(rng);
    for (int k = 0; k < 3; ++k)  // moments that are not zero
      sluice::step(o, bk.ostate, std::span<float>(master), std::span<float const>(grads[0]));
    comp.reset(sluice::staleness_compensation{}, s, n);
  }
  void view() { comp.view(o, master, bk, grads, updates); }
  [[nodiscard]] sluice::bench::kernel_arrays arrays() {
    using access = sluice::detail::optim::state_access;
    sluice::bench::kernel_arrays a{.elements = master.size(), .read = {{master.data(), 4}}};
    for (std::size_t k = 0; k < bk.ostate.layout().moments; ++k) a.read.push_back({access::f32(bk.ostate, k), 4});
    for (unsigned k = 0; k < s; ++k) a.read.push_back({grads[(updates + k) % (s + 1)].data(), 4});
    a.write.push_back({const_cast<float*>(comp.ahead().data()), 4});
    return a;
  }
  [[nodiscard]] sluice::bench::traffic traffic() const {
    return {.read = 4.0 * static_cast<double>(1 + bk.ostate.layout().moments + s), .write = 4};
  }

  O o;
  unsigned s;
  std::uint64_t updates = 3;
  std::vector<float> master;
  std::vector<std::vector<float>> grads;
  bucket<O> bk;
  sluice::detail::pipeline::compensator<O> comp;
};

template <class O>
void run(benchmark::State& state, O const& opt) {
  auto const n = static_cast<std::size_t>(state.range(0));
  auto const s = static_cast<unsigned>(state.range(1));
  look_ahead_case<O> c(opt, n, s);
  c.view();  // first touch, untimed
  sluice::bench::run_interleaved(state, c.arrays(), c.traffic(), [&] { c.view(); });
}

void BM_look_ahead_adam(benchmark::State& state) { run(state, sluice::adam{.lr = 1e-3}); }
void BM_look_ahead_sgd_momentum(benchmark::State& state) { run(state, sluice::sgd{.lr = 0.05, .momentum = 0.9}); }

// ResNet-50's 25.6 M parameters as one bucket, staleness 1 and 2.
void grid(benchmark::internal::Benchmark* b) {
  for (int s : {1, 2}) b->Args({25'557'032, s});
  b->ArgNames({"n", "s"})->UseManualTime()->Unit(benchmark::kMillisecond)->Iterations(15);
}
BENCHMARK(BM_look_ahead_adam)->Apply(grid);
BENCHMARK(BM_look_ahead_sgd_momentum)->Apply(grid);

}  // namespace
