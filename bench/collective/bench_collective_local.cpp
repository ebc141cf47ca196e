// The CPU cost of each collective on an in-process world of 4 threads (no network): what a
// collective adds on top of the wire time. bytes_per_second counts the gradient bytes reduced.
#include <thread>
#include <vector>

#include <sluice/collective/all.hpp>
#include <sluice/compress/maxmin_quantize.hpp>
#include <sluice/compress/top_k.hpp>
#include <sluice/transport/local.hpp>

#include "collective/bench_world.hpp"

namespace {

using namespace sluice;

// Runs `per_rank(t, iteration)` on 4 threads for every benchmark iteration.
template <class F>
void on_local_world(benchmark::State& state, std::size_t n, F per_rank) {
  int const world = 4;
  auto eps = local_transport::create(world);
  for (auto _ : state) {
    std::vector<std::thread> th;
    for (int r = 0; r < world; ++r) th.emplace_back([&, r] { per_rank(eps[static_cast<std::size_t>(r)]); });
    for (auto& x : th) x.join();
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations()) * static_cast<std::int64_t>(n * 4 * world));
}

void BM_local_ring_allreduce(benchmark::State& state) {
  auto const n = static_cast<std::size_t>(state.range(0));
  std::vector<std::vector<float>> g(4);
  std::vector<ring_allreduce_workspace> ws(4);
  for (int r = 0; r < 4; ++r) g[static_cast<std::size_t>(r)] = bench::rank_gradient(r, n);
  on_local_world(state, n, [&](local_transport& t) {
    auto const r = static_cast<std::size_t>(t.rank());
    ring_allreduce(t, std::span<float>(g[r]), {}, ws[r]);
  });
}

// A collective from each rank's gradient into a dense output of its own: `call(t, in, out, ws)`
// with one Workspace per rank.
template <class Workspace, class Call>
void dense_out_on_local_world(benchmark::State& state, Call&& call) {
  auto const n = static_cast<std::size_t>(state.range(0));
  std::vector<std::vector<float>> g(4), out(4, std::vector<float>(n));
  std::vector<Workspace> ws(4);
  for (int r = 0; r < 4; ++r) g[static_cast<std::size_t>(r)] = bench::rank_gradient(r, n);
  on_local_world(state, n, [&](local_transport& t) {
    auto const r = static_cast<std::size_t>(t.rank());
    call(t, std::span<float const>(g[r]), std::span<float>(out[r]), ws[r]);
  });
}

void BM_local_sparse_allgather_top_k(benchmark::State& state) {
  dense_out_on_local_world<sparse_allgather_workspace<top_k>>(
      state, [](local_transport& t, auto in, auto out, auto& ws) {
        sparse_allgather(t, top_k{.ratio = 0.01}, in, out, {}, ws);
      });
}

void BM_local_sparse_reduce_scatter_top_k(benchmark::State& state) {
  dense_out_on_local_world<sparse_reduce_scatter_workspace<top_k>>(
      state, [](local_transport& t, auto in, auto out, auto& ws) {
        sparse_reduce_scatter(t, top_k{.ratio = 0.01}, in, out, {}, ws);
      });
}

void BM_local_scatter_reduce_allgather_maxmin4(benchmark::State& state) {
  dense_out_on_local_world<scatter_reduce_allgather_workspace<maxmin_quantize>>(
      state, [](local_transport& t, auto in, auto out, auto& ws) {
        scatter_reduce_allgather(t, maxmin_quantize{.bits = 4}, in, out, {}, ws);
      });
}

}  // namespace

BENCHMARK(BM_local_ring_allreduce)->Arg(1 << 20)->Arg(1 << 24)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_local_sparse_allgather_top_k)->Arg(1 << 20)->Arg(1 << 24)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_local_sparse_reduce_scatter_top_k)
    ->Arg(1 << 20)
    ->Arg(1 << 24)
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_local_scatter_reduce_allgather_maxmin4)
    ->Arg(1 << 20)
    ->Arg(1 << 24)
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);
