// Exact top-k sparsification (the k largest |x|, ties to the lower index), selected in about one
// read of the data by a sampled bracket and a radix fallback, never a full sort
// (Aji & Heafield 2017; Lin et al., Deep Gradient Compression, ICLR 2018; StellaTrain SIGCOMM'24).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <type_traits>
#include <vector>

#include <fmt/core.h>

#include <sluice/compress/concepts.hpp>
#include <sluice/compress/decode.hpp>
#include <sluice/compress/detail/common.hpp>
#include <sluice/compress/detail/select.hpp>
#include <sluice/compress/detail/sparse_frame.hpp>
#include <sluice/compress/top_k_threshold.hpp>
#include <sluice/core/serial.hpp>
#include <sluice/core/sparse.hpp>

namespace sluice {

/// Keeps the k = keep_count(ratio, n) = ceil(ratio * n) elements of largest magnitude (ranked by
/// the bit pattern of |x|: NaN above +Inf, so a NaN is always sent). Ties go to the lower index.
/// Wire: section 0 = k values as T, section 1 = k sorted indices, delta + LEB128 varint.
/// Decoded values are exact; every element not sent decodes to 0.
struct top_k {
  using codec_concept = codec_tag;
  static constexpr bool is_sparse = true;

  double ratio = 0.01;  ///< fraction of elements kept, in (0, 1]
  /// Warm-up moves the ratio, from DGC's 25 % density (Lin et al. 2018).
  static constexpr codec_strength<top_k, double> strength{&top_k::ratio, "fraction kept", 0.25};

  friend bool operator==(top_k const&, top_k const&) = default;
  /// Identity of the value (attach checks, checkpoints): its fields, not its printed form.
  friend void hash_append(serial::hasher& h, top_k const& v) { h("top_k", v.ratio); }

  /// Per-tensor scratch: selection buffers and the selected indices and values.
  template <Element T>
  struct workspace {
    detail::compress::select_workspace<T> select{};
    std::vector<std::uint32_t> indices{};
    std::vector<T> values{};
  };

  /// Elements kept out of n.
  [[nodiscard]] std::size_t keep(std::size_t n) const noexcept { return detail::compress::keep_count(ratio, n); }

  /// Exact bound on the frame size for n elements of T (the default, float, bounds every T).
  template <Element T = float>
  [[nodiscard]] std::size_t max_encoded_bytes(std::size_t n) const noexcept {
    return detail::compress::sparse_frame_bytes(keep(n), n, sizeof(T));
  }

  /// Throws errc::invalid_argument for a ratio outside (0, 1].
  void validate() const { detail::compress::check_ratio(ratio, "top_k"); }

  /// Selects the top k of `in` into ws.indices / ws.values (first k entries) and returns the
  /// threshold that describes the selection (top_k_threshold); the building block of encode()
  /// and of fused error-feedback paths.
  template <Element T>
  top_k_threshold select(std::span<T const> in, workspace<T>& ws) const {
    validate();
    detail::compress::check_index_range(in.size(), "top_k");
    std::size_t const k = keep(in.size());
    detail::compress::grow(ws.indices, k);
    detail::compress::grow(ws.values, k);
    return detail::compress::select_top_k<T, std::uint32_t>(in, k, ws.select, std::span(ws.indices),
                                                            std::span(ws.values));
  }

  /// Writes the frame of a selection (k = keep(n) entries of ws.indices / ws.values).
  template <Element T>
  std::size_t write(std::size_t n, encode_context const& ctx, workspace<T> const& ws, std::span<std::byte> out) const {
    std::size_t const k = keep(n);
    return detail::compress::write_sparse_frame<T>(wire::codec_id::top_k, ctx, n,
                                                   std::span<std::uint32_t const>(ws.indices.data(), k),
                                                   std::span<T const>(ws.values.data(), k), out);
  }

  /// Encodes `in` into `out` (at least max_encoded_bytes<T>(in.size()) bytes); returns bytes written.
  template <Element T>
  std::size_t encode(std::type_identity_t<std::span<T const>> in, encode_context const& ctx, workspace<T>& ws,
                     std::span<std::byte> out) const {
    validate();
    detail::compress::check_out(out.size(), max_encoded_bytes<T>(in.size()), "top_k");
    (void)select(in, ws);
    return write(in.size(), ctx, ws, out);
  }

  /// Decodes into `dense` (zeros where nothing was sent): overwrite, or add into it (accumulate).
  template <Element T, DecodeMode M>
  void decode_into(std::span<std::byte const> msg, encode_context const& ctx, workspace<T>& ws,
                   std::type_identity_t<std::span<T>> dense, M mode) const {
    auto const f =
        detail::compress::read_sparse_frame<T>(msg, wire::codec_id::top_k, dense.size(), ws.indices, "top_k", ctx);
    detail::compress::apply_sparse<T>(f, ws.indices, dense, mode);
  }

  /// Decodes to indices + values (block size 1) for sparse aggregation and sparse optimizer steps.
  /// The extent is the frame's; the caller checks it against its tensor.
  template <Element T>
  void decode_sparse(std::span<std::byte const> msg, encode_context const& ctx, workspace<T>& ws,
                     sparse_buffer<T>& out) const {
    auto const f = detail::compress::read_sparse_frame<T>(msg, wire::codec_id::top_k, detail::compress::any_extent,
                                                          ws.indices, "top_k", ctx);
    detail::compress::to_sparse_buffer<T>(f, ws.indices, f.extent, out);
  }
};

// Conformance to its concepts: tests/static/test_conformance.cpp (checked there, not in every unit).

}  // namespace sluice

template <>
struct fmt::formatter<sluice::top_k> : sluice::detail::compress::policy_formatter {
  template <class FormatContext>
  auto format(sluice::top_k const& c, FormatContext& ctx) const {
    return fmt::format_to(ctx.out(), "top_k{{.ratio = {}}}", c.ratio);
  }
};
