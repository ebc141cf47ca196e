// Wire-format throughput: framing with checksum, parse+validate, and delta-varint index coding.
#include <random>
#include <vector>

#include <sluice/core/varint.hpp>
#include <sluice/core/wire.hpp>

#include "support/bench.hpp"

namespace {

std::vector<std::uint32_t> sorted_indices(std::size_t extent, double density) {
  std::vector<std::uint32_t> idx;
  std::mt19937 rng(1);
  std::uniform_real_distribution<double> u(0, 1);
  for (std::size_t i = 0; i < extent; ++i)
    if (u(rng) < density) idx.push_back(static_cast<std::uint32_t>(i));
  return idx;
}

// Frame of one section of n floats: reads the values once (copy + checksum), writes them once.
void BM_wire_frame(benchmark::State& state) {
  auto const n = static_cast<std::size_t>(state.range(0));
  std::vector<float> values(n, 1.25f);
  std::vector<std::byte> out(sluice::wire::frame_bytes({n * 4}));
  for (auto _ : state) {
    sluice::wire::writer w(out, {.codec = sluice::wire::codec_id::dense, .extent = n});
    sluice::wire::write_array<float>(w, values);
    benchmark::DoNotOptimize(w.finish());
  }
  sluice::bench::report(state, n, {.read = 4, .write = 4});
}

// Parse + checksum verification: one read of the frame.
void BM_wire_parse(benchmark::State& state) {
  auto const n = static_cast<std::size_t>(state.range(0));
  std::vector<float> values(n, 1.25f);
  std::vector<std::byte> out(sluice::wire::frame_bytes({n * 4}));
  sluice::wire::writer w(out, {.codec = sluice::wire::codec_id::dense, .extent = n});
  sluice::wire::write_array<float>(w, values);
  w.finish();
  for (auto _ : state) benchmark::DoNotOptimize(sluice::wire::parse(out).size);
  sluice::bench::report(state, n, {.read = 4});
}

// Index coding at 1% density: 4 bytes read per index, ~1-2 bytes written.
void BM_varint_encode(benchmark::State& state) {
  auto const idx = sorted_indices(static_cast<std::size_t>(state.range(0)), 0.01);
  std::vector<std::byte> out(sluice::wire::max_index_bytes(idx.size(), static_cast<std::size_t>(state.range(0))));
  std::size_t bytes = 0;
  for (auto _ : state) benchmark::DoNotOptimize(bytes = sluice::wire::encode_sorted_indices<std::uint32_t>(idx, out));
  sluice::bench::report(state, idx.size(),
                        {.read = 4, .write = static_cast<double>(bytes) / static_cast<double>(idx.size())});
}

void BM_varint_decode(benchmark::State& state) {
  auto const extent = static_cast<std::size_t>(state.range(0));
  auto const idx = sorted_indices(extent, 0.01);
  std::vector<std::byte> buf(sluice::wire::max_index_bytes(idx.size(), extent));
  std::size_t const bytes = sluice::wire::encode_sorted_indices<std::uint32_t>(idx, buf);
  std::vector<std::uint32_t> back(idx.size());
  for (auto _ : state) {
    sluice::wire::decode_sorted_indices<std::uint32_t>(std::span<std::byte const>(buf.data(), bytes), extent,
                                                       std::span<std::uint32_t>(back));
    benchmark::DoNotOptimize(back.data());
  }
  sluice::bench::report(state, idx.size(),
                        {.read = static_cast<double>(bytes) / static_cast<double>(idx.size()), .write = 4});
}

}  // namespace

BENCHMARK(BM_wire_frame)->Arg(1 << 24)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_wire_parse)->Arg(1 << 24)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_varint_encode)->Arg(1 << 24)->UseRealTime()->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_varint_decode)->Arg(1 << 24)->UseRealTime()->Unit(benchmark::kMicrosecond);
