// Benchmark conventions shared by every bench/<area>: the bandwidth reference kernel measured in
// the same process, and the counters each benchmark reports (bytes_per_second, items_per_second,
// bw_frac). bw_frac = achieved bytes/s over the reference kernel's bytes/s for the same read and
// write streams and the same thread count.
#pragma once

#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <vector>

#include <sluice/core/parallel.hpp>

namespace sluice::bench {

/// Elements of the working set the reference kernel streams over: large enough to leave cache.
inline constexpr std::size_t reference_elements = std::size_t{1} << 25;

/// Streams `read_bytes` per element from one array and writes `write_bytes` per element to another,
/// in one fused pass over cache-sized chunks on all threads; returns the best bytes/s of `reps`
/// runs. This is the kernel every bw_frac divides by: the limit for a kernel with these streams.
inline double measure_reference(double read_bytes, double write_bytes, int reps = 7) {
  std::size_t const n = reference_elements;
  std::size_t const rw = static_cast<std::size_t>(read_bytes * static_cast<double>(n)) / 8;
  std::size_t const ww = static_cast<std::size_t>(write_bytes * static_cast<double>(n)) / 8;
  std::vector<std::uint64_t> in(std::max<std::size_t>(rw, 1)), out(std::max<std::size_t>(ww, 1));
  sluice::parallel_chunks(in.size(), 1 << 16, [&](std::size_t b, std::size_t e, int) {
    for (std::size_t i = b; i < e; ++i) in[i] = i * 0x9E3779B97F4A7C15ull;
  });
  sluice::parallel_chunks(out.size(), 1 << 16,
                          [&](std::size_t b, std::size_t e, int) { std::memset(out.data() + b, 0, (e - b) * 8); });
  double best = 0;
  // Split the write stream proportionally to the read stream, chunk by chunk.
  std::size_t const chunk = 1 << 14;  // words of input per chunk (128 KiB)
  std::size_t const chunks = (rw + chunk - 1) / chunk;
  for (int r = 0; r < reps; ++r) {
    auto const t0 = std::chrono::steady_clock::now();
    sluice::parallel_chunks(std::max<std::size_t>(chunks, 1), 1, [&](std::size_t cb, std::size_t ce, int) {
      for (std::size_t c = cb; c < ce; ++c) {
        std::size_t const ib = c * chunk, ie = std::min(rw, ib + chunk);
        std::uint64_t acc = 0;
        for (std::size_t i = ib; i < ie; ++i) acc += in[i];
        std::size_t const ob = rw == 0 ? 0 : ww * ib / rw, oe = rw == 0 ? ww : ww * ie / rw;
        for (std::size_t i = ob; i < oe; ++i) out[i] = acc + i;
      }
    });
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
    double const s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    best = std::max(best, static_cast<double>((rw + ww) * 8) / s);
  }
  return best;
}

/// The reference bytes/s for (read, write) bytes per element. Measured afresh at every call, right
/// after the benchmark it normalises, so that both see the same machine load (on a shared machine a
/// reference measured once per process drifts by 2x against later benchmarks).
inline double reference_bandwidth(double read_bytes, double write_bytes) {
  return measure_reference(read_bytes, write_bytes, 5);
}

/// Sets the standard counters for a kernel over `elements` elements per iteration that must move
/// `read_bytes` + `write_bytes` per element. Call after the timing loop.
inline void report(benchmark::State& state, std::size_t elements, double read_bytes, double write_bytes) {
  double const per_iter = (read_bytes + write_bytes) * static_cast<double>(elements);
  auto const iters = static_cast<double>(state.iterations());
  state.SetItemsProcessed(static_cast<std::int64_t>(iters * static_cast<double>(elements)));
  state.SetBytesProcessed(static_cast<std::int64_t>(iters * per_iter));
  double const ref = reference_bandwidth(read_bytes, write_bytes);
  state.counters["ref_bytes_per_second"] = benchmark::Counter(ref);
  // bw_frac = (per_iter * iterations / time) / ref, expressed as a rate counter over per_iter/ref.
  state.counters["bw_frac"] = benchmark::Counter(iters * per_iter / ref, benchmark::Counter::kIsRate);
  state.counters["threads"] = benchmark::Counter(static_cast<double>(sluice::max_threads()));
}

}  // namespace sluice::bench
