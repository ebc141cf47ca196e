// GPU benchmarks of the CUDA backend, timed with CUDA events (UseManualTime), each against a
// reference measured in the same process:
//   BM_d2d_copy                  device-to-device copy: the bandwidth reference (read + write)
//   BM_feedback_maxmin4          fused c = g + e, 4-bit max-min quantize, e = c - decode;
//                                bw_frac = its bandwidth (bytes read + written) / the copy's
//   BM_dequantize_add4           dense += decode of 4-bit levels; bw_frac as above
//   BM_top_k                     exact top-k at 1% (radix select); floor_frac = the time one read of
//                                the input takes at copy bandwidth / its time
//   BM_baseline_cub_sort_top_k   the same top-k by a full cub::DeviceRadixSort of (key, index)
//   BM_random_k_feedback         fused c = g + e, random-k at 1% (shared-randomness draws, gather),
//                                e = c - sent; bw_frac = its 12 B/element + 8 B/kept entry / the copy's
//   BM_adam                      dense fp32 Adam step; bw_frac = its 28 B/element / the copy's
// Without a CUDA device the binary prints why and exits 0 (nothing to measure).
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdio>
#include <random>
#include <vector>

#include <cub/device/device_radix_sort.cuh>

#include <sluice/cuda/kernels.cuh>
#include <sluice/optim/adam.hpp>

namespace {

namespace sc = sluice::cuda;

std::size_t const big = std::size_t{1} << 26;

sc::device_buffer<float> random_device(std::size_t n, std::uint32_t seed, float scale = 1.0f) {
  std::vector<float> h(n);
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, scale);
  for (auto& x : h) x = d(rng);
  sc::device_buffer<float> b(n);
  sc::check(cudaMemcpy(b.data(), h.data(), 4 * n, cudaMemcpyHostToDevice), "upload");
  return b;
}

/// Times `body` (queued on `s`) with CUDA events, once per iteration; returns the mean seconds.
template <class F>
double timed(benchmark::State& state, cudaStream_t s, F&& body) {
  sc::event start, stop;
  body();  // warm-up
  sc::check(cudaStreamSynchronize(s), "warm-up");
  double total = 0;
  for (auto _ : state) {
    start.record(s);
    body();
    stop.record(s);
    stop.synchronize();
    double const t = static_cast<double>(stop.since(start)) / 1e3;
    state.SetIterationTime(t);
    total += t;
  }
  return total / static_cast<double>(std::max<benchmark::IterationCount>(state.iterations(), 1));
}

/// Device-to-device copy bandwidth (bytes read + written per second) over 2^26 floats, measured
/// once per process.
double copy_bandwidth() {
  static double const bw = [] {
    auto a = random_device(big, 1);
    sc::device_buffer<float> b(big);
    sc::stream s;
    sc::event start, stop;
    double best = 0;
    for (int r = 0; r < 20; ++r) {
      start.record(s.get());
      sc::check(cudaMemcpyAsync(b.data(), a.data(), 4 * big, cudaMemcpyDeviceToDevice, s.get()), "copy");
      stop.record(s.get());
      stop.synchronize();
      best = std::max(best, 8.0 * static_cast<double>(big) / (static_cast<double>(stop.since(start)) / 1e3));
    }
    return best;
  }();
  return bw;
}

/// Bytes per second and bw_frac = that bandwidth / the copy's.
void report_bandwidth(benchmark::State& state, double seconds, double bytes_per_iteration) {
  state.SetBytesProcessed(static_cast<std::int64_t>(bytes_per_iteration) * state.iterations());
  state.counters["bw_frac"] = bytes_per_iteration / seconds / copy_bandwidth();
}

void BM_d2d_copy(benchmark::State& state) {
  std::size_t const n = static_cast<std::size_t>(state.range(0));
  auto a = random_device(n, 1);
  sc::device_buffer<float> b(n);
  sc::stream s;
  double const t = timed(state, s.get(), [&] {
    sc::check(cudaMemcpyAsync(b.data(), a.data(), 4 * n, cudaMemcpyDeviceToDevice, s.get()), "copy");
  });
  report_bandwidth(state, t, 8.0 * static_cast<double>(n));
}
BENCHMARK(BM_d2d_copy)->Arg(big)->UseManualTime()->Unit(benchmark::kMicrosecond);

void BM_feedback_maxmin4(benchmark::State& state) {
  std::size_t const n = static_cast<std::size_t>(state.range(0));
  sc::maxmin_params const p{4, 1024, false};
  auto g = random_device(n, 2), e = random_device(n, 3, 0.01f);
  sc::device_buffer<std::byte> payload(sc::maxmin_payload_bytes(n, p));
  sc::stream s;
  double const t = timed(state, s.get(), [&] {
    sc::check(sc::feedback_maxmin(g.span(), e.span(), p, {}, payload.span(), s.get()), "feedback_maxmin");
  });
  // Reads g and e, writes e, the levels (n / 2 bytes) and the ranges.
  report_bandwidth(state, t, 12.0 * static_cast<double>(n) + static_cast<double>(payload.size()));
}
BENCHMARK(BM_feedback_maxmin4)->Arg(big)->UseManualTime()->Unit(benchmark::kMicrosecond);

void BM_dequantize_add4(benchmark::State& state) {
  std::size_t const n = static_cast<std::size_t>(state.range(0));
  sc::maxmin_params const p{4, 1024, false};
  auto g = random_device(n, 2), dense = random_device(n, 4);
  sc::device_buffer<std::byte> payload(sc::maxmin_payload_bytes(n, p));
  sc::stream s;
  sc::check(sc::feedback_maxmin(g.span(), {}, p, {}, payload.span(), s.get()), "feedback_maxmin");
  double const t = timed(state, s.get(), [&] {
    sc::check(sc::dequantize_add(dense.span(), p, payload.span(), s.get()), "dequantize_add");
  });
  report_bandwidth(state, t, 8.0 * static_cast<double>(n) + static_cast<double>(payload.size()));
}
BENCHMARK(BM_dequantize_add4)->Arg(big)->UseManualTime()->Unit(benchmark::kMicrosecond);

/// floor_frac = the time one read of n floats takes at copy bandwidth (which moves 8 bytes per
/// float) / the measured time.
void report_floor(benchmark::State& state, double seconds, std::size_t n) {
  state.counters["floor_frac"] = 4.0 * static_cast<double>(n) / copy_bandwidth() / seconds;
}

void BM_top_k(benchmark::State& state) {
  std::size_t const n = static_cast<std::size_t>(state.range(0)), k = (n + 99) / 100;
  auto x = random_device(n, 5);
  sc::device_buffer<std::uint32_t> idx(k);
  sc::device_buffer<float> val(k);
  sc::top_k_workspace ws(n);
  sc::stream s;
  double const t = timed(state, s.get(), [&] {
    sc::check(sc::top_k_select({}, x.span(), k, ws, idx.span(), val.span(), s.get()), "top_k_select");
  });
  report_floor(state, t, n);
}
BENCHMARK(BM_top_k)->Arg(big)->UseManualTime()->Unit(benchmark::kMicrosecond);

__global__ void magnitude_keys(float const* x, std::uint32_t* keys, std::uint32_t* idx, std::size_t n) {
  std::size_t const i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x;
  if (i < n) keys[i] = sc::magnitude_key(x[i]), idx[i] = static_cast<std::uint32_t>(i);
}

void BM_baseline_cub_sort_top_k(benchmark::State& state) {
  std::size_t const n = static_cast<std::size_t>(state.range(0));
  auto x = random_device(n, 5);
  sc::device_buffer<std::uint32_t> keys(n), idx(n), keys_out(n), idx_out(n);
  std::size_t bytes = 0;
  sc::check(cub::DeviceRadixSort::SortPairsDescending(nullptr, bytes, keys.data(), keys_out.data(), idx.data(),
                                                      idx_out.data(), static_cast<std::int64_t>(n)),
            "sort");
  sc::device_buffer<std::byte> temp(bytes);
  sc::stream s;
  double const t = timed(state, s.get(), [&] {
    magnitude_keys<<<static_cast<unsigned>((n + 255) / 256), 256, 0, s.get()>>>(x.data(), keys.data(), idx.data(), n);
    std::size_t b = temp.size();
    sc::check(cub::DeviceRadixSort::SortPairsDescending(temp.data(), b, keys.data(), keys_out.data(), idx.data(),
                                                        idx_out.data(), static_cast<std::int64_t>(n), 0, 31, s.get()),
              "sort");
  });
  report_floor(state, t, n);
}
BENCHMARK(BM_baseline_cub_sort_top_k)->Arg(big)->UseManualTime()->Unit(benchmark::kMicrosecond);

void BM_random_k_feedback(benchmark::State& state) {
  std::size_t const n = static_cast<std::size_t>(state.range(0)), k = (n + 99) / 100;
  auto g = random_device(n, 10), e = random_device(n, 11, 0.01f);
  sc::device_buffer<std::uint32_t> idx(k);
  sc::device_buffer<float> val(k);
  sc::random_k_workspace ws(n, k);
  auto const f = sc::random_k_element::of(n, k, false);
  sc::stream s;
  std::uint32_t step = 0;
  double const t = timed(state, s.get(), [&] {
    sluice::stream_key const key{1, sluice::stream_key::shared_rank, ++step, 0};
    sc::check(sc::random_k_select(g.span(), e.span(), k, key, f, ws, idx.span(), val.span(), s.get()),
              "random_k_select");
  });
  // Reads g and e, writes e; writes the k indices and values.
  report_bandwidth(state, t, 12.0 * static_cast<double>(n) + 8.0 * static_cast<double>(k));
}
BENCHMARK(BM_random_k_feedback)->Arg(big)->UseManualTime()->Unit(benchmark::kMicrosecond);

void BM_adam(benchmark::State& state) {
  std::size_t const n = static_cast<std::size_t>(state.range(0));
  auto p = random_device(n, 6), g = random_device(n, 7), m = random_device(n, 8, 0.01f), v = random_device(n, 9, 0.0f);
  auto const f = sc::adam_element::from(sluice::adam{}.kernel(10));
  sc::stream s;
  double const t = timed(state, s.get(), [&] {
    sc::check(sc::adam_step(p.span(), g.span(), m.span(), v.span(), f, {}, s.get()), "adam_step");
  });
  report_bandwidth(state, t, 28.0 * static_cast<double>(n));  // reads p, g, m, v; writes p, m, v
}
BENCHMARK(BM_adam)->Arg(big)->UseManualTime()->Unit(benchmark::kMicrosecond);

}  // namespace

int main(int argc, char** argv) {
  if (sc::device_count() == 0) {
    std::printf("bench_cuda: SKIPPED: no CUDA device is visible (these benchmarks need a GPU)\n");
    return 0;
  }
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, 0) == cudaSuccess) benchmark::AddCustomContext("cuda_device", prop.name);
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
