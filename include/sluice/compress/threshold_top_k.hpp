// Sampled-threshold top-k (Deep Gradient Compression, Lin et al. ICLR 2018 §3): estimate the
// magnitude threshold from a strided sample, keep everything above it in one filter pass, and fix
// the count up only when it leaves the tolerance band around k.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <type_traits>
#include <vector>

#include <fmt/core.h>

#include <sluice/compress/concepts.hpp>
#include <sluice/compress/decode.hpp>
#include <sluice/compress/detail/common.hpp>
#include <sluice/compress/detail/select.hpp>
#include <sluice/compress/detail/sparse_frame.hpp>
#include <sluice/core/serial.hpp>
#include <sluice/core/sparse.hpp>

namespace sluice {

/// DGC's threshold selection with k = keep_count(ratio, n) = ceil(ratio * n). The threshold is the
/// sample's k/n quantile of |x| (ranked as top_k ranks: NaN above +Inf); every element at or
/// above it is kept, in index order. If that count c is in [ceil(k (1 - tolerance)),
/// floor(k (1 + tolerance))] it is sent as is; if c is larger, the exact top k of the kept ones
/// are sent (DGC's hierarchical fix-up); if smaller, the exact top k of the tensor. tolerance = 0
/// always sends exactly top_k's selection. Every kept element is larger than every dropped one.
/// Wire: as top_k (section 0 = c values as T, section 1 = sorted indices as varints).
struct threshold_top_k {
  using codec_concept = codec_tag;
  static constexpr bool is_sparse = true;

  double ratio = 0.01;  ///< fraction of elements kept, in (0, 1]
  /// Warm-up moves the ratio, from DGC's 25 % density (Lin et al. 2018).
  static constexpr codec_strength<threshold_top_k, double> strength{&threshold_top_k::ratio, "fraction kept", 0.25};
  double sample = 0.01;     ///< fraction of elements sampled for the threshold, in (0, 1]
  double tolerance = 0.25;  ///< relative deviation of the count from k accepted, in [0, 1)

  friend bool operator==(threshold_top_k const&, threshold_top_k const&) = default;
  /// Identity of the value (attach checks, checkpoints): its fields, not its printed form.
  friend void hash_append(serial::hasher& h, threshold_top_k const& v) {
    h("threshold_top_k", v.ratio, v.sample, v.tolerance);
  }

  template <Element T>
  struct workspace {
    detail::compress::select_workspace<T> select{};
    std::vector<std::uint32_t> indices{};
    std::vector<T> values{};
    std::size_t count = 0;  ///< elements selected by the last select()
    bool fixed_up = false;  ///< whether the last select() needed an exact fix-up
  };

  [[nodiscard]] std::size_t keep(std::size_t n) const noexcept { return detail::compress::keep_count(ratio, n); }
  /// Most elements a frame carries for n elements.
  [[nodiscard]] std::size_t max_keep(std::size_t n) const noexcept {
    std::size_t const k = keep(n);
    auto const hi = static_cast<std::size_t>(std::floor(static_cast<double>(k) * (1.0 + tolerance)));
    return std::min(n, std::max(k, hi));
  }

  /// Exact bound on the frame size for n elements of T (the default, float, bounds every T).
  template <Element T = float>
  [[nodiscard]] std::size_t max_encoded_bytes(std::size_t n) const noexcept {
    return detail::compress::sparse_frame_bytes(max_keep(n), n, sizeof(T));
  }

  /// Throws errc::invalid_argument for ratio or sample outside (0, 1] or tolerance outside [0, 1).
  void validate() const {
    detail::compress::check_ratio(ratio, "threshold_top_k");
    require(sample > 0.0 && sample <= 1.0, errc::invalid_argument,
            "threshold_top_k: sample fraction {} is outside (0, 1]", sample);
    require(tolerance >= 0.0 && tolerance < 1.0, errc::invalid_argument,
            "threshold_top_k: tolerance {} is outside [0, 1)", tolerance);
  }

  /// Selects into ws.indices / ws.values (first ws.count entries, indices increasing).
  template <Element T>
  void select(std::span<T const> in, workspace<T>& ws) const {
    using namespace detail::compress;
    validate();
    check_index_range(in.size(), "threshold_top_k");
    std::size_t const n = in.size(), k = keep(n), hi = max_keep(n);
    auto const lo = static_cast<std::size_t>(std::ceil(static_cast<double>(k) * (1.0 - tolerance)));
    grow(ws.indices, hi);
    grow(ws.values, hi);
    ws.fixed_up = false;
    auto exact = [&] {
      ws.fixed_up = true;
      ws.count = k;
      select_top_k<T, std::uint32_t>(in, k, ws.select, std::span(ws.indices), std::span(ws.values));
    };
    if (k == 0 || k == n || tolerance == 0.0) return exact();
    auto& s = ws.select;
    std::size_t const m =
        std::min(n, std::max<std::size_t>(256, static_cast<std::size_t>(std::ceil(sample * static_cast<double>(n)))));
    std::size_t const step = n / m;
    grow(s.sample, m);
    for (std::size_t j = 0; j < m; ++j) s.sample[j] = magnitude_key(in[j * step]);
    std::size_t const r = std::min(
        m - 1, static_cast<std::size_t>(static_cast<double>(k) * static_cast<double>(m) / static_cast<double>(n)));
    std::int32_t const threshold = key_at_rank(std::span(s.sample.data(), m), r);
    std::size_t const chunks = select_chunks(n);
    prepare_chunks(s, chunks);
    s.cap_cand = std::min(n / chunks + 1, 2 * hi + 1024);
    grow(s.cand, chunks * list_stride(s.cap_cand));
    filter_band(in, s, chunks, threshold, std::numeric_limits<std::int32_t>::max());
    std::size_t c = 0;
    bool overflow = false;
    for (std::size_t i = 0; i < chunks; ++i) c += s.n_cand[i], overflow |= s.n_cand[i] > s.cap_cand;
    if (overflow || c < lo) return exact();
    if (c > hi) {
      ws.fixed_up = true;
      ws.count = k;
      emit_entries(s, chunks, band_threshold(s, chunks, k), std::span(ws.indices), std::span(ws.values));
      return;
    }
    top_k_threshold const thr{threshold, std::numeric_limits<std::size_t>::max()};
    ws.count = plan_output(s, chunks, thr);
    emit_entries(s, chunks, thr, std::span(ws.indices), std::span(ws.values));
  }

  /// Encodes `in` into `out` (at least max_encoded_bytes<T>(in.size()) bytes); returns bytes written.
  template <Element T>
  std::size_t encode(std::type_identity_t<std::span<T const>> in, encode_context const& ctx, workspace<T>& ws,
                     std::span<std::byte> out) const {
    validate();
    detail::compress::check_out(out.size(), max_encoded_bytes<T>(in.size()), "threshold_top_k");
    select(in, ws);
    return detail::compress::write_sparse_frame<T>(wire::codec_id::threshold_top_k, ctx, in.size(),
                                                   std::span<std::uint32_t const>(ws.indices.data(), ws.count),
                                                   std::span<T const>(ws.values.data(), ws.count), out);
  }

  /// Decodes into `dense` (zeros where nothing was sent): overwrite, or add into it (accumulate).
  template <Element T, DecodeMode M>
  void decode_into(std::span<std::byte const> msg, encode_context const& ctx, workspace<T>& ws,
                   std::type_identity_t<std::span<T>> dense, M mode) const {
    auto const f = detail::compress::read_sparse_frame<T>(msg, wire::codec_id::threshold_top_k, dense.size(),
                                                          ws.indices, "threshold_top_k", ctx);
    detail::compress::apply_sparse<T>(f, ws.indices, dense, mode);
  }

  /// Decodes to indices + values (block size 1); the extent is the frame's.
  template <Element T>
  void decode_sparse(std::span<std::byte const> msg, encode_context const& ctx, workspace<T>& ws,
                     sparse_buffer<T>& out) const {
    auto const f = detail::compress::read_sparse_frame<T>(
        msg, wire::codec_id::threshold_top_k, detail::compress::any_extent, ws.indices, "threshold_top_k", ctx);
    detail::compress::to_sparse_buffer<T>(f, ws.indices, f.extent, out);
  }
};

// Conformance to its concepts: tests/static/test_conformance.cpp (checked there, not in every unit).

}  // namespace sluice

template <>
struct fmt::formatter<sluice::threshold_top_k> : sluice::detail::compress::policy_formatter {
  template <class FormatContext>
  auto format(sluice::threshold_top_k const& c, FormatContext& ctx) const {
    return fmt::format_to(ctx.out(), "threshold_top_k{{.ratio = {}, .sample = {}, .tolerance = {}}}", c.ratio, c.sample,
                          c.tolerance);
  }
};
