// The transports the collective benchmarks run on: a process-wide mpi_transport under mpirun,
// a zmq_transport when torchrun-style variables are set (scripts/bench-collective.sh starts the
// ranks in network namespaces), else none (network benchmarks skip). All ranks must run the same
// benchmarks with fixed iteration counts; rank 0 reports.
#pragma once

#include <benchmark/benchmark.h>
#include <sys/resource.h>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

#include <sluice/transport/concepts.hpp>

// bench/CMakeLists.txt defines these when bench_collective links sluice::mpi / sluice::zmq.
#if defined(SLUICE_BENCH_HAVE_MPI)
#include <sluice/transport/mpi.hpp>
#define SLUICE_BENCH_MPI 1
#else
#define SLUICE_BENCH_MPI 0
#endif
#if defined(SLUICE_BENCH_HAVE_ZMQ)
#include <sluice/transport/zmq.hpp>
#define SLUICE_BENCH_ZMQ 1
#else
#define SLUICE_BENCH_ZMQ 0
#endif

namespace sluice::bench {

/// Link rate of the shaped links in bits/s (SLUICE_LINK_BPS), 0 when unknown.
inline double link_bps() {
  char const* v = std::getenv("SLUICE_LINK_BPS");
  return v ? std::strtod(v, nullptr) : 0.0;
}

inline bool under_mpirun() { return std::getenv("OMPI_COMM_WORLD_SIZE") != nullptr; }
inline bool under_torchrun_env() { return std::getenv("WORLD_SIZE") != nullptr && !under_mpirun(); }

#if SLUICE_BENCH_MPI
inline mpi_transport& mpi_world() {
  struct world {
    mpi_environment env{};
    mpi_transport t{};
  };
  static world w;
  return w.t;
}
#endif

#if SLUICE_BENCH_ZMQ
inline zmq_transport& zmq_world() {
  using namespace std::chrono_literals;
  static zmq_transport t({.connect_timeout = 120s, .heartbeat_timeout = 120s});
  return t;
}
#endif

/// A deterministic gradient for this rank: uniform in [-1, 1).
inline std::vector<float> rank_gradient(int rank, std::size_t n) {
  std::vector<float> g(n);
  std::uint64_t s = 0x9E3779B97F4A7C15ull * static_cast<std::uint64_t>(rank + 1);
  for (auto& x : g) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    x = static_cast<float>(static_cast<double>(s >> 40) / static_cast<double>(1ull << 23) - 1.0);
  }
  return g;
}

/// Times `step` (one collective call) for the benchmark's fixed iterations, after one untimed call
/// (workspaces sized, pages touched, connections warm: the steady state of a training loop), with a
/// barrier before each outside the timing, and reports wire_bytes (what this rank sent per call),
/// cpu_user_s and cpu_sys_s (this process's CPU seconds per call, all threads), and with a known link
/// rate bound_s = wire bytes / link rate and frac_of_bound = bound / measured time.
template <class T, class Step>
void run_net(benchmark::State& state, T& t, Step&& step) {
  using clock = std::chrono::steady_clock;
  auto cpu = [] {  // user and system seconds of this process (all its threads: engine I/O threads too)
    rusage u{};
    ::getrusage(RUSAGE_SELF, &u);
    auto secs = [](timeval v) { return static_cast<double>(v.tv_sec) + 1e-6 * static_cast<double>(v.tv_usec); };
    return std::pair{secs(u.ru_utime), secs(u.ru_stime)};
  };
  double total = 0, user = 0, sys = 0;
  std::size_t wire = 0;
  t.barrier(deadline::after(std::chrono::seconds(120)));
  (void)step();
  for (auto _ : state) {
    state.PauseTiming();
    t.barrier(deadline::after(std::chrono::seconds(120)));
    state.ResumeTiming();
    auto const c0 = cpu();
    auto const t0 = clock::now();
    wire = step();
    double const s = std::chrono::duration<double>(clock::now() - t0).count();
    auto const c1 = cpu();
    user += c1.first - c0.first;
    sys += c1.second - c0.second;
    state.SetIterationTime(s);
    total += s;
  }
  auto const iters = static_cast<double>(state.iterations());
  state.counters["ranks"] = t.size();
  state.counters["wire_bytes"] = static_cast<double>(wire);
  // CPU seconds per call of this rank (user, system): on shared cores they bound the wall time.
  state.counters["cpu_user_s"] = user / iters;
  state.counters["cpu_sys_s"] = sys / iters;
  state.SetBytesProcessed(static_cast<std::int64_t>(iters * static_cast<double>(wire)));
  if (double const bps = link_bps(); bps > 0) {
    double const bound = static_cast<double>(wire) * 8.0 / bps;
    state.counters["bound_s"] = bound;
    state.counters["frac_of_bound"] = bound * iters / total;
  }
}

}  // namespace sluice::bench
