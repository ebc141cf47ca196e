// Compresses one gradient-sized tensor the way a sluice worker does before it hits the wire:
// keep the largest 1% of entries, send their indices delta+varint coded and their values as fp16
// in one checksummed frame, then validate and decode the frame as a receiving rank would.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <vector>

#include <sluice/sluice.hpp>

int main(int argc, char** argv) {
  // Default: the 3x3x512x512 conv weight of a ResNet-50 stage-4 block (2,359,296 elements).
  std::size_t const n = argc > 1 ? std::stoul(argv[1]) : std::size_t{3} * 3 * 512 * 512;
  double const ratio = argc > 2 ? std::stod(argv[2]) : 0.01;

  // A gradient with a heavy tail, drawn from the counter-based stream (reproducible per seed).
  sluice::random_stream const rs({.seed = 2026, .rank = 0, .step = 1, .tensor = 7});
  std::vector<float> grad(n);
  for (std::size_t i = 0; i < n; ++i) {
    float const u = rs.uniform(2 * i) * 0.999f + 0.0005f, v = rs.uniform(2 * i + 1);
    grad[i] = (v < 0.5f ? -1.0f : 1.0f) * 1e-3f * std::pow(u, -0.7f);  // Pareto-like magnitudes
  }

  auto const t0 = std::chrono::steady_clock::now();
  auto const k = static_cast<std::size_t>(std::ceil(ratio * static_cast<double>(n)));
  std::vector<std::uint32_t> order(n);
  std::iota(order.begin(), order.end(), 0u);
  std::nth_element(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(k), order.end(),
                   [&](std::uint32_t a, std::uint32_t b) { return std::abs(grad[a]) > std::abs(grad[b]); });
  std::vector<std::uint32_t> idx(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(k));
  std::sort(idx.begin(), idx.end());
  std::vector<Eigen::half> vals(k);
  for (std::size_t j = 0; j < k; ++j) vals[j] = sluice::from_float<Eigen::half>(grad[idx[j]]);

  std::vector<std::byte> frame(sluice::wire::frame_bytes({sluice::wire::max_index_bytes(k, n), k * 2}));
  sluice::wire::writer w(frame, {.codec = sluice::wire::codec_id::sparse,
                                 .element = sluice::element_type::f16,
                                 .tensor = 7,
                                 .step = 1,
                                 .extent = n});
  w.commit(sluice::wire::encode_sorted_indices<std::uint32_t>(idx, w.next()));
  sluice::wire::write_array<Eigen::half>(w, vals);
  std::size_t const bytes = w.finish();
  auto const t1 = std::chrono::steady_clock::now();

  // Receiver side: validate everything, then scatter into a dense buffer.
  auto const f =
      sluice::wire::parse(std::span<std::byte const>(frame.data(), bytes), {.tensor = 7, .step = 1, .extent = n});
  std::vector<std::uint32_t> ridx(k);
  std::vector<Eigen::half> rvals(k);
  sluice::wire::decode_sorted_indices<std::uint32_t>(f.section(0), n, std::span<std::uint32_t>(ridx));
  sluice::wire::read_array<Eigen::half>(f.section(1), rvals, "values");
  std::vector<float> dense(n, 0.0f);
  sluice::scatter(sluice::sparse_view<Eigen::half const>{ridx, rvals, n}, std::span<float>(dense), false);
  auto const t2 = std::chrono::steady_clock::now();

  double kept = 0, total = 0;
  for (std::size_t i = 0; i < n; ++i) total += double(grad[i]) * grad[i], kept += double(dense[i]) * dense[i];
  std::printf("tensor: %zu fp32 elements (%.1f MiB), keep %.2f%% -> %zu entries\n", n, double(n) * 4 / (1 << 20),
              ratio * 100, k);
  std::printf("frame: %zu bytes (%.1fx smaller than dense fp32), indices %zu B (%.2f B/index), values %zu B\n", bytes,
              double(n) * 4 / double(bytes), f.section(0).size(), double(f.section(0).size()) / double(k),
              f.section(1).size());
  std::printf("energy kept: %.1f%% of ||g||^2; encode %.2f ms, validate+decode %.2f ms\n", 100 * kept / total,
              std::chrono::duration<double, std::milli>(t1 - t0).count(),
              std::chrono::duration<double, std::milli>(t2 - t1).count());
  return ridx == idx ? 0 : 1;
}
