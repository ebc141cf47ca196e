// Overlap with the trainer over Open MPI, one rank per process under mpirun (4 ranks): the
// ResNet-50 layout, each rank's forward and backward replaced by a 150 ms wait, step time ÷ that
// wait for staleness 0, 1, 2. Dense training through the ring allreduce (over MPI point-to-point)
// and through MPI_Allreduce itself (by_mpi_allreduce, the DDP-equivalent baseline), beside
// block_top_k 1 % + residual + adam, so the per-step speedup reads from one run. The rows with
// exchange = 0 run the same pipeline on MPI_COMM_SELF at the same time on every rank (no exchange):
// what the machine's CPUs allow when the wire costs nothing. All ranks run the same benchmarks;
// rank 0 reports (scripts/netns-exec-rank.sh keeps the other ranks quiet).
//
//   mpirun -np 4 --oversubscribe build/release/bench/bench_pipeline_mpi
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include <sluice/transport/mpi.hpp>

#include "collective/bench_world.hpp"
#include "pipeline/model_layouts.hpp"
#include "pipeline/pipeline_testing.hpp"

namespace {

using namespace sluice;
using clock_type = std::chrono::steady_clock;

// Timed steps per row after one warm-up step (SLUICE_BENCH_STEPS, default 6): a dense step at
// 100 Mbit/s takes seconds.
int timed_steps() {
  char const* v = std::getenv("SLUICE_BENCH_STEPS");
  int const n = v ? std::atoi(v) : 6;
  return n > 0 ? n : 6;
}

template <class Collective, class C, class F, class O>
void overlap(benchmark::State& state, C codec, F feedback, O opt) {
  layout const l = bench::load_layout("resnet50");
  auto const staleness = static_cast<unsigned>(state.range(0));
  auto const compute = std::chrono::milliseconds(state.range(1));
  bool const exchange = state.range(2) != 0;
  int const steps = timed_steps();
  mpi_transport& world = bench::mpi_world();
  double step_s = 0;
  for (auto _ : state) {
    mpi_transport self(MPI_COMM_SELF);
    mpi_transport& t = exchange ? world : self;
    std::vector<double> times;
    test::model_params p(l);
    std::vector<std::vector<float>> g;
    test::gradients(world.rank(), 0, p, g);
    // Every rank starts from the same parameters: no broadcast (100 MB to each peer at attach).
    pipeline pipe{
        codec,
        feedback,
        opt,
        t,
        pipeline_options{.staleness = staleness, .seed = 1, .broadcast_parameters = false, .kernel_threads = 1},
        Collective{}};
    auto spans = p.spans();
    pipe.attach(l, spans);
    auto const grads = test::views(g);
    world.barrier(deadline::after(std::chrono::seconds(120)));
    for (int s = 0; s <= steps; ++s) {
      auto const t0 = clock_type::now();
      std::this_thread::sleep_for(compute);
      pipe.step(grads);
      if (s > 0) times.push_back(std::chrono::duration<double>(clock_type::now() - t0).count());
    }
    pipe.synchronize();
    std::sort(times.begin(), times.end());
    step_s = times[times.size() / 2];
    state.SetIterationTime(step_s);
    state.counters["sent_MB"] = static_cast<double>(pipe.last_report().sent_bytes) / 1e6;
    world.barrier(deadline::after(std::chrono::seconds(120)));
  }
  double const c = std::chrono::duration<double>(compute).count();
  state.counters["step_ms"] = step_s * 1e3;
  state.counters["compute_ms"] = c * 1e3;
  state.counters["step_vs_compute"] = step_s / c;
  state.counters["link_Mbps"] = bench::link_bps() / 1e6;
  state.SetItemsProcessed(static_cast<std::int64_t>(l.total_elements()) * state.iterations());
  state.SetLabel(fmt::format("resnet50, {} MPI ranks, staleness {}{}", world.size(), staleness,
                             exchange ? "" : ", no exchange (MPI_COMM_SELF)"));
}

void BM_overlap_mpi_dense_mpi_allreduce(benchmark::State& state) {
  overlap<by_mpi_allreduce>(state, identity{}, no_feedback{}, adam{.lr = 1e-3});
}
void BM_overlap_mpi_dense_ring(benchmark::State& state) {
  overlap<by_codec>(state, identity{}, no_feedback{}, adam{.lr = 1e-3});
}
void BM_overlap_mpi_block_top_k(benchmark::State& state) {
  overlap<by_codec>(state, block_top_k{.ratio = 0.01}, residual{}, adam{.lr = 1e-3});
}
// Args: staleness, compute ms, exchange (1: over the MPI world; 0: MPI_COMM_SELF, no exchange).
void args(benchmark::internal::Benchmark* b) {
  b->ArgsProduct({{0, 1, 2}, {150}, {1}})
      ->Args({1, 150, 0})
      ->UseManualTime()
      ->Unit(benchmark::kMillisecond)
      ->Iterations(1);
}
BENCHMARK(BM_overlap_mpi_dense_mpi_allreduce)->Apply(args);
BENCHMARK(BM_overlap_mpi_dense_ring)->Apply(args);
BENCHMARK(BM_overlap_mpi_block_top_k)->Apply(args);

}  // namespace
