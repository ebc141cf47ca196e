// Plain reference implementations for feedback tests: EF-SGD residual, DGC momentum correction
// and EF21 as scalar loops over dense vectors, plus a small dense test codec (rounding to a grid)
// so the generic path is exercised by a non-sparse codec whatever compress/ has landed.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <vector>

#include <fmt/format.h>

#include <sluice/compress/concepts.hpp>
#include <sluice/compress/context.hpp>
#include <sluice/core/serial.hpp>
#include <sluice/core/wire.hpp>

namespace sluice::test {

/// A dense lossy codec: values rounded to multiples of `step_size`, sent as float. Deterministic.
struct grid_codec {
  using codec_concept = codec_tag;
  float step_size = 0.125f;
  friend bool operator==(grid_codec const&, grid_codec const&) = default;
  /// Identity of the value (attach checks, checkpoints): its fields, not its printed form.
  friend void hash_append(serial::hasher& h, grid_codec const& v) { h("grid_codec", v.step_size); }

  [[nodiscard]] std::size_t max_encoded_bytes(std::size_t n) const noexcept { return wire::frame_bytes({n * 4}); }
  template <Element T>
  std::size_t encode(std::span<T const> in, encode_context const& ctx, codec_workspace<grid_codec, T>&,
                     std::span<std::byte> out) const {
    wire::writer w(out, {.codec = wire::codec_id::none, .tensor = ctx.tensor, .step = ctx.step, .extent = in.size()});
    auto dst = w.next();
    require(dst.size() >= in.size() * 4, errc::size_mismatch, "grid_codec: short output");
    for (std::size_t i = 0; i < in.size(); ++i) {
      float const v = std::nearbyint(to_float(in[i]) / step_size) * step_size;
      std::memcpy(dst.data() + 4 * i, &v, 4);
    }
    w.commit(in.size() * 4);
    return w.finish();
  }
  template <Element T, DecodeMode M>
  void decode_into(std::span<std::byte const> msg, encode_context const&, codec_workspace<grid_codec, T>&,
                   std::span<T> dense, M) const {
    auto const f = wire::parse(msg, {.extent = dense.size(), .sections = 1});
    std::vector<float> v(dense.size());
    wire::read_array<float>(f.section(0), std::span<float>(v), "grid values");
    for (std::size_t i = 0; i < dense.size(); ++i) {
      T const d = from_float<T>(v[i]);
      dense[i] = M::accumulates ? from_float<T>(to_float(dense[i]) + to_float(d)) : d;
    }
  }
};
static_assert(Codec<grid_codec, float>);

/// Reference EF-SGD step on fp32 state: c = g + e; sent = compress(c); e = c - sent.
template <class Compress>
std::vector<float> reference_residual_step(std::vector<float>& e, std::span<float const> g, Compress&& compress) {
  std::vector<float> c(g.size());
  for (std::size_t i = 0; i < g.size(); ++i) c[i] = g[i] + e[i];
  std::vector<float> sent = compress(c);
  for (std::size_t i = 0; i < g.size(); ++i) e[i] = c[i] - sent[i];
  return sent;
}

/// Reference DGC step: u = m u + g; v = v + u; sent = compress(v); u = v = 0 where sent.
template <class Compress>
std::vector<float> reference_momentum_step(std::vector<float>& u, std::vector<float>& v, std::span<float const> g,
                                           float m, Compress&& compress) {
  for (std::size_t i = 0; i < g.size(); ++i) {
    u[i] = m * u[i] + g[i];
    v[i] = v[i] + u[i];
  }
  std::vector<float> sent = compress(v);
  for (std::size_t i = 0; i < g.size(); ++i)
    if (sent[i] != 0.0f) u[i] = 0.0f, v[i] = v[i] - sent[i];
  return sent;
}

/// Reference EF21 step: c = g - h; sent = compress(c); h = h + sent.
template <class Compress>
std::vector<float> reference_ef21_step(std::vector<float>& h, std::span<float const> g, Compress&& compress) {
  std::vector<float> c(g.size());
  for (std::size_t i = 0; i < g.size(); ++i) c[i] = g[i] - h[i];
  std::vector<float> sent = compress(c);
  for (std::size_t i = 0; i < g.size(); ++i) h[i] = h[i] + sent[i];
  return sent;
}

/// Exact top-k by magnitude (ties to the lower index) as a dense vector: the compress reference.
inline std::vector<float> reference_top_k(std::span<float const> x, std::size_t k) {
  std::vector<std::size_t> idx(x.size());
  for (std::size_t i = 0; i < idx.size(); ++i) idx[i] = i;
  std::stable_sort(idx.begin(), idx.end(),
                   [&](std::size_t a, std::size_t b) { return std::abs(x[a]) > std::abs(x[b]); });
  std::vector<float> out(x.size(), 0.0f);
  for (std::size_t j = 0; j < k && j < idx.size(); ++j) out[idx[j]] = x[idx[j]];
  return out;
}

}  // namespace sluice::test

template <>
struct fmt::formatter<sluice::test::grid_codec> : fmt::formatter<std::string_view> {
  template <class Ctx>
  auto format(sluice::test::grid_codec const& c, Ctx& ctx) const {
    return fmt::format_to(ctx.out(), "grid_codec{{.step_size = {}}}", c.step_size);
  }
};
