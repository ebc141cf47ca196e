// Collectives over shaped links for a 2^24-float gradient (scripts/bench-collective.sh): sparse
// allgather and reduce-scatter (top_k 1%), CGX scatter-reduce-allgather (maxmin 4-bit), and the dense
// ring against Open MPI's own MPI_Allreduce. frac_of_bound = (wire bytes / link rate) / time.
#include <vector>

#include <sluice/collective/all.hpp>
#include <sluice/compress/maxmin_quantize.hpp>
#include <sluice/compress/top_k.hpp>

#include "collective/bench_world.hpp"

namespace {

using namespace sluice;
constexpr std::size_t n_grad = std::size_t{1} << 24;

template <class Body>
void on_network(benchmark::State& state, Body&& body) {
#if SLUICE_BENCH_MPI
  if (bench::under_mpirun()) return body(bench::mpi_world());
#endif
#if SLUICE_BENCH_ZMQ
  if (bench::under_torchrun_env()) return body(bench::zmq_world());
#endif
  state.SkipWithError("needs ranks: run under mpirun or with RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT");
}

collective_context ctx_for(std::uint64_t step) {
  return {.step = step, .tensor = 1, .seed = 7, .timeout = std::chrono::seconds(300), .tag = message_tag{0}};
}

void BM_ring_allreduce(benchmark::State& state) {
  on_network(state, [&](auto& t) {
    auto g = bench::rank_gradient(t.rank(), n_grad);
    ring_allreduce_workspace ws;
    std::uint64_t step = 0;
    bench::run_net(state, t, [&] {
      ring_allreduce(t, std::span<float>(g), ctx_for(step++), ws);
      return ring_allreduce_bytes(n_grad, t.size());
    });
  });
}

#if SLUICE_BENCH_MPI
void BM_baseline_mpi_allreduce(benchmark::State& state) {
  if (!bench::under_mpirun()) return state.SkipWithError("needs mpirun");
  auto& t = bench::mpi_world();
  auto g = bench::rank_gradient(t.rank(), n_grad);
  bench::run_net(state, t, [&] {
    MPI_Allreduce(MPI_IN_PLACE, g.data(), static_cast<int>(g.size()), MPI_FLOAT, MPI_SUM, t.comm());
    return ring_allreduce_bytes(n_grad, t.size());  // the bandwidth-optimal volume, for comparison
  });
}
BENCHMARK(BM_baseline_mpi_allreduce)->Iterations(3)->UseManualTime()->Unit(benchmark::kMillisecond);
#endif

// Argument: elements per chunk (0 = the tensor whole). Chunked, the encode of chunk c + 1 runs on a
// helper thread while chunk c is exchanged (sparse_allgather_options::chunk_elements).
void BM_sparse_allgather_top_k(benchmark::State& state) {
  on_network(state, [&](auto& t) {
    auto g = bench::rank_gradient(t.rank(), n_grad);
    top_k const codec{.ratio = 0.01};
    sparse_allgather_workspace<top_k> ws;
    std::vector<float> out(n_grad);
    sparse_allgather_options const opt{.chunk_elements = static_cast<std::size_t>(state.range(0))};
    std::uint64_t step = 0;
    bench::run_net(state, t, [&] {
      sparse_allgather(t, codec, std::span<float const>(g), std::span<float>(out), ctx_for(step++), ws, opt);
      return ws.sent_bytes;
    });
  });
}

// The same exchange into a sparse result (the sum as sorted (index, value) pairs, as a CPU sparse
// optimizer takes it): no dense output to clear, each message merged into the running sum on arrival.
void BM_sparse_allgather_top_k_sparse_out(benchmark::State& state) {
  on_network(state, [&](auto& t) {
    auto g = bench::rank_gradient(t.rank(), n_grad);
    top_k const codec{.ratio = 0.01};
    sparse_allgather_workspace<top_k> ws;
    sparse_buffer<float> out;
    sparse_allgather_options const opt{.chunk_elements = static_cast<std::size_t>(state.range(0))};
    std::uint64_t step = 0;
    bench::run_net(state, t, [&] {
      sparse_allgather(t, codec, std::span<float const>(g), out, ctx_for(step++), ws, opt);
      return ws.sent_bytes;
    });
  });
}

// The exchange alone, the message encoded beforehand (as in a pipeline whose compression stage runs
// ahead of communication).
void BM_sparse_allgather_top_k_exchange(benchmark::State& state) {
  on_network(state, [&](auto& t) {
    auto g = bench::rank_gradient(t.rank(), n_grad);
    top_k const codec{.ratio = 0.01};
    sparse_allgather_workspace<top_k> ws;
    std::vector<float> out(n_grad);
    std::vector<std::vector<std::byte>> msgs(64);
    top_k::workspace<float> ews;
    for (std::uint64_t s = 0; s < msgs.size(); ++s)
      detail::encode_into(codec, std::span<float const>(g), detail::encode_ctx(ctx_for(s), t.rank()), ews, msgs[s]);
    std::uint64_t step = 0;
    bench::run_net(state, t, [&] {
      auto const s = step++ % msgs.size();
      sparse_allgather_encoded(t, codec, std::span<std::byte const>(msgs[s]), std::span<float>(out), ctx_for(s), ws);
      return ws.sent_bytes;
    });
  });
}

// The selection alone (the encode of BM_sparse_allgather_top_k, every rank at once on this host's
// shared cores): the part of the full allgather that no byte on the wire can overlap.
void BM_sparse_allgather_top_k_encode(benchmark::State& state) {
  on_network(state, [&](auto& t) {
    auto g = bench::rank_gradient(t.rank(), n_grad);
    top_k const codec{.ratio = 0.01};
    top_k::workspace<float> ews;
    std::vector<std::byte> msg;
    std::uint64_t step = 0;
    bench::run_net(state, t, [&] {
      detail::encode_into(codec, std::span<float const>(g), detail::encode_ctx(ctx_for(step++), t.rank()), ews, msg);
      return msg.size();
    });
  });
}

void BM_sparse_reduce_scatter_top_k(benchmark::State& state) {
  on_network(state, [&](auto& t) {
    auto g = bench::rank_gradient(t.rank(), n_grad);
    top_k const codec{.ratio = 0.01};
    sparse_reduce_scatter_workspace<top_k> ws;
    std::vector<float> out(n_grad);
    sparse_allgather_options const opt{.chunk_elements = static_cast<std::size_t>(state.range(0))};
    std::uint64_t step = 0;
    bench::run_net(state, t, [&] {
      sparse_reduce_scatter(t, codec, std::span<float const>(g), std::span<float>(out), ctx_for(step++), ws, opt);
      return ws.sent_bytes;
    });
  });
}

void BM_scatter_reduce_allgather_maxmin4(benchmark::State& state) {
  on_network(state, [&](auto& t) {
    auto g = bench::rank_gradient(t.rank(), n_grad);
    maxmin_quantize const codec{.bits = 4, .bucket = 1024};
    scatter_reduce_allgather_workspace<maxmin_quantize> ws;
    std::vector<float> out(n_grad);
    std::uint64_t step = 0;
    bench::run_net(state, t, [&] {
      scatter_reduce_allgather(t, codec, std::span<float const>(g), std::span<float>(out), ctx_for(step++), ws);
      return ws.sent_bytes;
    });
  });
}

// The transport alone: every rank sends one top_k-1%-sized message (840 KB) to every peer and receives
// theirs, no framing, no codec. Separates what the engine reaches on the link from collective compute.
void BM_transport_exchange(benchmark::State& state) {
  on_network(state, [&](auto& t) {
    std::size_t const bytes = static_cast<std::size_t>(state.range(0));
    std::vector<std::byte> msg(bytes, std::byte{1}), buf;
    bench::run_net(state, t, [&] {
      using request = typename std::remove_reference_t<decltype(t)>::request;
      std::vector<request> reqs;
      int const n = t.size(), r = t.rank();
      for (int k = 1; k < n; ++k) reqs.push_back(t.send((r + k) % n, message_tag{7}, msg));
      for (int k = 1; k < n; ++k)
        (void)t.recv((r - k + n) % n, message_tag{7}, buf, deadline::after(std::chrono::seconds(300)));
      for (auto& q : reqs) q.wait(deadline::after(std::chrono::seconds(300)));
      return bytes * static_cast<std::size_t>(n - 1);
    });
  });
}

// The same volume as a ring: every rank sends its message to its right neighbour and forwards what
// it receives from its left one (N-2 forwards), so each link carries one flow at a time.
void BM_transport_ring(benchmark::State& state) {
  on_network(state, [&](auto& t) {
    std::size_t const bytes = static_cast<std::size_t>(state.range(0));
    std::vector<std::byte> msg(bytes, std::byte{1});
    std::vector<std::vector<std::byte>> got(static_cast<std::size_t>(t.size()));
    bench::run_net(state, t, [&] {
      using request = typename std::remove_reference_t<decltype(t)>::request;
      std::vector<request> reqs;
      int const n = t.size(), r = t.rank();
      reqs.push_back(t.send((r + 1) % n, message_tag{7}, msg));
      for (int k = 1; k < n; ++k) {
        auto& buf = got[static_cast<std::size_t>(k)];
        (void)t.recv((r - 1 + n) % n, message_tag{7}, buf, deadline::after(std::chrono::seconds(300)));
        if (k + 1 < n) reqs.push_back(t.send((r + 1) % n, message_tag{7}, buf));
      }
      for (auto& q : reqs) q.wait(deadline::after(std::chrono::seconds(300)));
      return bytes * static_cast<std::size_t>(n - 1);
    });
  });
}

}  // namespace

BENCHMARK(BM_transport_exchange)
    ->Arg(840'000)
    ->Arg(4'200'000)
    ->Iterations(5)
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_transport_ring)
    ->Arg(840'000)
    ->Arg(4'200'000)
    ->Iterations(5)
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_ring_allreduce)->Iterations(3)->UseManualTime()->Unit(benchmark::kMillisecond);
// Chunks of 2^21 and 2^20 elements: 8 and 16 messages per rank for the 2^24-float gradient.
BENCHMARK(BM_sparse_allgather_top_k)
    ->Arg(0)
    ->Arg(1 << 21)
    ->Arg(1 << 20)
    ->Iterations(5)
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_sparse_allgather_top_k_sparse_out)
    ->Arg(0)
    ->Arg(1 << 21)
    ->Iterations(5)
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_sparse_allgather_top_k_exchange)->Iterations(5)->UseManualTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_sparse_allgather_top_k_encode)->Iterations(5)->UseManualTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_sparse_reduce_scatter_top_k)
    ->Arg(0)
    ->Arg(1 << 21)
    ->Arg(1 << 20)
    ->Iterations(5)
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_scatter_reduce_allgather_maxmin4)->Iterations(5)->UseManualTime()->Unit(benchmark::kMillisecond);
