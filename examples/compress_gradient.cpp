// Compresses one gradient-sized tensor the way a sluice worker does before it hits the wire, with
// three codecs (exact top-k, cache-aware block top-k, CGX max-min 4-bit quantization), then decodes
// each frame as a receiving rank would and reports size, fidelity and time.
//   compress_gradient [elements] [keep ratio]
#include <chrono>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include <sluice/compress/block_top_k.hpp>
#include <sluice/compress/maxmin_quantize.hpp>
#include <sluice/compress/top_k.hpp>
#include <sluice/sluice.hpp>

namespace {

using clock_type = std::chrono::steady_clock;

double ms_since(clock_type::time_point t) {
  return std::chrono::duration<double, std::milli>(clock_type::now() - t).count();
}

// Encodes `grad` with codec `c`, decodes the frame into a dense buffer and prints one line.
// Returns whether the frame fit its bound and the decoded tensor is closer to the gradient than 0.
template <class Codec>
bool run(char const* name, Codec const& c, std::vector<float> const& grad, sluice::encode_context const& ctx) {
  std::size_t const n = grad.size();
  sluice::codec_workspace<Codec, float> ws;
  std::vector<std::byte> frame(c.max_encoded_bytes(n));
  std::size_t bytes = c.encode(std::span<float const>(grad), ctx, ws, frame);  // warm-up sizes the workspace
  auto const t0 = clock_type::now();
  bytes = c.encode(std::span<float const>(grad), ctx, ws, frame);
  double const encode_ms = ms_since(t0);

  std::vector<float> dense(n);
  auto const t1 = clock_type::now();
  sluice::decode(c, std::span<std::byte const>(frame.data(), bytes), ctx, ws, std::span<float>(dense));
  double const decode_ms = ms_since(t1);

  double err = 0, norm = 0;
  for (std::size_t i = 0; i < n; ++i) {
    double const d = double(dense[i]) - double(grad[i]);
    err += d * d;
    norm += double(grad[i]) * double(grad[i]);
  }
  std::printf("%-28s %10zu B  %7.1fx smaller  rel. L2 error %.3f  encode %7.2f ms  decode %6.2f ms\n", name, bytes,
              double(n) * 4 / double(bytes), std::sqrt(err / norm), encode_ms, decode_ms);
  return bytes <= c.max_encoded_bytes(n) && err < norm;
}

}  // namespace

int main(int argc, char** argv) {
  // Default: the 3x3x512x512 conv weight of a ResNet-50 stage-4 block (2,359,296 elements).
  std::size_t const n = argc > 1 ? std::stoul(argv[1]) : std::size_t{3} * 3 * 512 * 512;
  double const ratio = argc > 2 ? std::stod(argv[2]) : 0.01;

  // A gradient with heavy-tailed magnitudes, drawn from the counter-based stream (reproducible).
  sluice::random_stream const rs({.seed = 2026, .rank = 0, .step = 1, .tensor = 7});
  std::vector<float> grad(n);
  for (std::size_t i = 0; i < n; ++i) {
    float const u = rs.uniform(2 * i) * 0.999f + 0.0005f, v = rs.uniform(2 * i + 1);
    grad[i] = (v < 0.5f ? -1.0f : 1.0f) * 1e-3f * std::pow(u, -0.7f);
  }
  sluice::encode_context const ctx{.seed = 2026, .rank = 0, .step = 1, .tensor = 7};

  std::printf("tensor: %zu fp32 elements (%.1f MiB), %d threads\n", n, double(n) * 4 / (1 << 20),
              sluice::max_threads());
  bool ok = run("top_k (exact)", sluice::top_k{.ratio = ratio}, grad, ctx);
  ok = run("block_top_k B=16", sluice::block_top_k{.ratio = ratio}, grad, ctx) && ok;
  ok = run("maxmin_quantize 4-bit", sluice::maxmin_quantize{.bits = 4, .bucket = 1024}, grad, ctx) && ok;
  return ok ? 0 : 1;
}
