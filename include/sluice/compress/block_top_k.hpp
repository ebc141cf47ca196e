// Cache-aware block top-k (StellaTrain, SIGCOMM'24 §4): keep the ceil(k/B) blocks of B contiguous
// elements (default 16 floats = one 64-byte line) with the largest L1 or L2 score, chosen exactly
// over the whole tensor (StellaTrain's scan stops early and never looks at the tail), one index per
// block on the wire. Scoring is one streaming read; selection runs on the n/B scores.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <type_traits>
#include <vector>

#include <fmt/core.h>

#include <sluice/compress/block_score.hpp>
#include <sluice/compress/concepts.hpp>
#include <sluice/compress/decode.hpp>
#include <sluice/compress/detail/block_score.hpp>
#include <sluice/compress/detail/common.hpp>
#include <sluice/compress/detail/fused_block.hpp>
#include <sluice/compress/detail/select.hpp>
#include <sluice/config.hpp>
#include <sluice/core/parallel.hpp>
#include <sluice/core/serial.hpp>
#include <sluice/core/sparse.hpp>
#include <sluice/core/varint.hpp>

namespace sluice {

/// Keeps the b = min(ceil(k / block), ceil(n / block)) blocks with the largest score, k =
/// keep_count(ratio, n) = ceil(ratio * n); ties go to the lower block; a NaN score ranks first.
/// Wire: section 0 = {u32 block, u32 score}, section 1 = b * block values as T (the part of a last
/// partial block past n is zero), section 2 = b sorted block indices, delta + LEB128 varint.
/// Decoded values are exact; every element outside the kept blocks decodes to 0.
struct block_top_k {
  using codec_concept = codec_tag;
  static constexpr bool is_sparse = true;

  double ratio = 0.01;  ///< fraction of elements kept, in (0, 1]
  /// Warm-up moves the ratio, from DGC's 25 % density (Lin et al. 2018).
  static constexpr codec_strength<block_top_k, double> strength{&block_top_k::ratio, "fraction kept", 0.25};
  std::size_t block = 16;               ///< elements per block, in [1, 65536]; 16 floats = one cache line
  block_score score = block_score::l1;  ///< block ranking

  friend bool operator==(block_top_k const&, block_top_k const&) = default;
  /// Identity of the value (attach checks, checkpoints): its fields, not its printed form.
  friend void hash_append(serial::hasher& h, block_top_k const& v) { h("block_top_k", v.ratio, v.block, v.score); }

  /// Per-tensor scratch: block scores, selection buffers and the selected blocks.
  template <Element T>
  struct workspace {
    std::vector<float> scores{};
    detail::compress::select_workspace<float> select{};
    std::vector<std::uint32_t> indices{};
    std::vector<float> kept_scores{};
  };

  /// Number of blocks of n elements.
  [[nodiscard]] std::size_t block_count(std::size_t n) const noexcept {
    return block == 0 ? 0 : (n + block - 1) / block;
  }
  /// Blocks kept out of n elements.
  [[nodiscard]] std::size_t keep_blocks(std::size_t n) const noexcept {
    if (block == 0) return 0;
    std::size_t const k = detail::compress::keep_count(ratio, n);
    return std::min((k + block - 1) / block, block_count(n));
  }

  /// Exact bound on the frame size for n elements of T (the default, float, bounds every T).
  template <Element T = float>
  [[nodiscard]] std::size_t max_encoded_bytes(std::size_t n) const noexcept {
    std::size_t const b = keep_blocks(n);
    return wire::frame_bytes({8, b * block * sizeof(T), wire::max_index_bytes(b, block_count(n))});
  }

  /// Throws errc::invalid_argument for a ratio outside (0, 1] or a block size outside [1, 65536].
  void validate() const {
    detail::compress::check_ratio(ratio, "block_top_k");
    require(block >= 1 && block <= 65536, errc::invalid_argument,
            "block_top_k: block size {} is outside [1, 65536]; 16 floats fill one 64-byte cache line", block);
    require(score == block_score::l1 || score == block_score::l2, errc::invalid_argument,
            "block_top_k: unknown block score {}", static_cast<int>(score));
  }

  /// Scores all blocks and selects the kept ones into ws.indices (first keep_blocks(n) entries,
  /// increasing); the building block of encode() and of fused error-feedback paths.
  template <Element T>
  void select(std::span<T const> in, workspace<T>& ws) const {
    validate();
    detail::compress::check_index_range(in.size(), "block_top_k");
    std::size_t const nb = block_count(in.size()), b = keep_blocks(in.size());
    detail::compress::grow(ws.scores, nb);
    detail::compress::grow(ws.indices, b);
    detail::compress::grow(ws.kept_scores, b);
    std::span<float> scores(ws.scores.data(), nb);
    detail::compress::score_blocks(in, block, score, scores);
    detail::compress::select_top_k<float, std::uint32_t>(scores, b, ws.select, std::span(ws.indices),
                                                         std::span(ws.kept_scores));
  }

  /// Writes the frame of a selection made by select().
  template <Element T>
  std::size_t write(std::span<T const> in, encode_context const& ctx, workspace<T> const& ws,
                    std::span<std::byte> out) const {
    std::size_t const n = in.size(), nb = block_count(n), b = keep_blocks(n);
    wire::writer w(out, detail::compress::make_header<T>(wire::codec_id::block_top_k, ctx, n));
    std::uint32_t const params[2] = {static_cast<std::uint32_t>(block), static_cast<std::uint32_t>(score)};
    w.write(std::as_bytes(std::span(params)));
    std::byte* const v = w.next().data();
    std::size_t const row = block * sizeof(T);
    parallel_chunks(b, (std::size_t{1} << 18) / block + 1, [&](std::size_t jb, std::size_t je, int) {
      for (std::size_t j = jb; j < je; ++j) {
        // The kept blocks are scattered lines: ask for the ones a few rows ahead.
        if (j + 16 < je) {
          auto const* ahead = reinterpret_cast<char const*>(in.data() + std::size_t{ws.indices[j + 16]} * block);
          for (std::size_t o = 0; o < row; o += 64) __builtin_prefetch(ahead + o, 0, 0);
        }
        std::size_t const first = static_cast<std::size_t>(ws.indices[j]) * block;
        std::size_t const len = std::min(block, n - first);
        std::memcpy(v + j * row, in.data() + first, len * sizeof(T));
        if (len < block) std::memset(v + j * row + len * sizeof(T), 0, (block - len) * sizeof(T));
      }
    });
    w.commit(b * row);
    (void)nb;
    std::size_t const ib =
        wire::encode_sorted_indices<std::uint32_t>(std::span<std::uint32_t const>(ws.indices.data(), b), w.next());
    w.commit(ib);
    return w.finish();
  }

  /// Encodes `in` into `out` (at least max_encoded_bytes<T>(in.size()) bytes); returns bytes written.
  template <Element T>
  std::size_t encode(std::type_identity_t<std::span<T const>> in, encode_context const& ctx, workspace<T>& ws,
                     std::span<std::byte> out) const {
    validate();
    detail::compress::check_out(out.size(), max_encoded_bytes<T>(in.size()), "block_top_k");
    select(in, ws);
    return write(in, ctx, ws, out);
  }

  /// Fused error feedback for fp32 residuals and float gradients (the optional Codec member, see
  /// compress/concepts.hpp): residual += grad and the block scores in one pass, then the frame of
  /// the compensated tensor, then the sent blocks of the residual set to 0.
  template <class S, Element T, class Slice>
  requires std::same_as<S, float> && std::same_as<T, float> std::size_t encode_compensated(std::span<T const> grad,
                                                                                           Slice const& residual,
                                                                                           encode_context const& ctx,
                                                                                           workspace<T>& ws,
                                                                                           std::span<std::byte> out)
  const { return detail::compress::residual_fused_block<S>(*this, residual, grad, ctx, ws, out); }

  /// Decodes into `dense`: overwrites every element (overwrite) or adds into it (accumulate).
  template <Element T, DecodeMode M>
  void decode_into(std::span<std::byte const> msg, encode_context const& ctx, workspace<T>& ws,
                   std::type_identity_t<std::span<T>> dense, M) const {
    constexpr bool add = M::accumulates;
    auto const f = read(msg, ctx, dense.size(), ws.indices, sizeof(T), element_type_of<T>);
    std::size_t const n = dense.size();
    if (!add) std::fill(dense.begin(), dense.end(), T(0.0f));
    auto const ix = std::span<std::uint32_t const>(ws.indices).first(f.count);
    for (std::size_t j = 0; j < f.count; ++j) {
      sluice::detail::prefetch_scatter(ix, j, block, dense.data());
      std::size_t const first = static_cast<std::size_t>(ix[j]) * block;
      std::size_t const len = std::min(block, n - first);
      std::byte const* src = f.values.data() + j * block * sizeof(T);
      if (!add) {
        std::memcpy(dense.data() + first, src, len * sizeof(T));
      } else {
        for (std::size_t e = 0; e < len; ++e) {
          T v;
          std::memcpy(&v, src + e * sizeof(T), sizeof(T));
          dense[first + e] = from_float<T>(to_float(dense[first + e]) + to_float(v));
        }
      }
    }
  }

  /// Decodes to a sparse_buffer with block_size = block (values of a partial last block past the
  /// extent are padding). The extent is the frame's.
  template <Element T>
  void decode_sparse(std::span<std::byte const> msg, encode_context const& ctx, workspace<T>& ws,
                     sparse_buffer<T>& out) const {
    auto const f = read(msg, ctx, detail::compress::any_extent, ws.indices, sizeof(T), element_type_of<T>);
    out.reset(f.extent, block);
    out.resize_for_overwrite(f.count);
    std::copy_n(ws.indices.begin(), f.count, out.indices().begin());
    if (f.count != 0) std::memcpy(out.values().data(), f.values.data(), f.values.size());
  }

 private:
  struct view {
    std::size_t count = 0, extent = 0;
    std::span<std::byte const> values;
  };

  view read(std::span<std::byte const> msg, encode_context const& ctx, std::size_t extent,
            std::vector<std::uint32_t>& idx, std::size_t vbytes, element_type et) const {
    validate();
    wire::frame const f = detail::compress::parse_frame<float>(msg, wire::codec_id::block_top_k, extent, 3, ctx, et);
    std::size_t const n = detail::compress::checked_extent(f, "block_top_k");
    auto const p = f.sections[0];
    require(p.size() == 8, errc::malformed_message, "block_top_k: parameter section has {} bytes, expected 8",
            p.size());
    std::uint32_t const fb = detail::compress::param_u32(p, 0), fs = detail::compress::param_u32(p, 1);
    require(fb == block && fs == static_cast<std::uint32_t>(score), errc::malformed_message,
            "block_top_k: frame has block {} and score {}, this decoder block {} and score {}", fb, fs, block,
            static_cast<int>(score));
    std::size_t const row = block * vbytes;
    auto const vals = f.sections[1];
    require(vals.size() % row == 0, errc::malformed_message,
            "block_top_k: values section of {} bytes is not a whole number of {}-byte blocks", vals.size(), row);
    std::size_t const count = vals.size() / row, nb = block_count(n);
    require(count <= nb, errc::malformed_message, "block_top_k: {} blocks for a tensor of {} blocks", count, nb);
    detail::compress::grow(idx, count);
    wire::decode_sorted_indices<std::uint32_t>(f.sections[2], nb, std::span<std::uint32_t>(idx.data(), count));
    return {count, n, vals};
  }
};

// Conformance to its concepts: tests/static/test_conformance.cpp (checked there, not in every unit).

}  // namespace sluice

template <>
struct fmt::formatter<sluice::block_top_k> : sluice::detail::compress::policy_formatter {
  template <class FormatContext>
  auto format(sluice::block_top_k const& c, FormatContext& ctx) const {
    return fmt::format_to(ctx.out(), "block_top_k{{.ratio = {}, .block = {}, .score = {}}}", c.ratio, c.block,
                          c.score == sluice::block_score::l1 ? "l1" : "l2");
  }
};
