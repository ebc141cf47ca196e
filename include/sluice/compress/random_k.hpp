// Random-k sparsification with shared randomness (Stich et al., NeurIPS 2018; GRACE): every rank
// draws the same k indices from the counter-based stream keyed by (seed, step, tensor), so only
// the values travel, and the receiver regenerates the indices.
#pragma once

#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <type_traits>
#include <vector>

#include <fmt/core.h>

#include <sluice/compress/concepts.hpp>
#include <sluice/compress/decode.hpp>
#include <sluice/compress/detail/common.hpp>
#include <sluice/compress/detail/sparse_frame.hpp>
#include <sluice/core/random.hpp>
#include <sluice/core/serial.hpp>
#include <sluice/core/sparse.hpp>

namespace sluice::detail::compress {

/// Draws k distinct indices in [0, n), uniformly over all k-subsets, from `stream` (Floyd's
/// algorithm: word j decides the j-th draw) and writes them in increasing order to idx[0, k).
/// `bitmap` is scratch. Memory and time are O(k), whatever n: when a bitmap of n bits would be
/// large next to k (n is the frame's extent, a number from the wire: a frame of a few KB may
/// claim 2^32 elements), the drawn set lives in an open-addressing table of about 2k slots and
/// is sorted at the end; both ways draw the same set.
inline void draw_indices(random_stream const& stream, std::size_t n, std::size_t k, std::vector<std::uint64_t>& bitmap,
                         std::uint32_t* idx) {
  std::size_t const words = (n + 63) / 64;
  if (words <= 4 * k + 64) {
    grow(bitmap, words);
    std::fill(bitmap.begin(), bitmap.begin() + static_cast<std::ptrdiff_t>(words), 0);
    auto test_set = [&](std::size_t i) {
      std::uint64_t const bit = std::uint64_t{1} << (i % 64);
      bool const was = (bitmap[i / 64] & bit) != 0;
      bitmap[i / 64] |= bit;
      return was;
    };
    for (std::size_t j = n - k; j < n; ++j) {
      std::size_t const t = stream.below(j - (n - k), static_cast<std::uint32_t>(j + 1));
      if (test_set(t)) test_set(j);
    }
    std::size_t o = 0;
    for (std::size_t w = 0; w < words; ++w)
      for (std::uint64_t b = bitmap[w]; b != 0; b &= b - 1)
        idx[o++] = static_cast<std::uint32_t>(w * 64 + static_cast<std::size_t>(std::countr_zero(b)));
    return;
  }
  // Sparse draw: slots hold index + 1 (0 = empty); indices are below 2^32 - 1.
  std::size_t const slots = std::bit_ceil(2 * k + 2);
  grow(bitmap, slots);
  std::fill(bitmap.begin(), bitmap.begin() + static_cast<std::ptrdiff_t>(slots), 0);
  auto test_set = [&](std::size_t i) {
    std::size_t h =
        static_cast<std::size_t>((static_cast<std::uint64_t>(i) * 0x9E3779B97F4A7C15ull) >> 32) & (slots - 1);
    while (bitmap[h] != 0) {
      if (bitmap[h] == i + 1) return true;
      h = (h + 1) & (slots - 1);
    }
    bitmap[h] = i + 1;
    return false;
  };
  for (std::size_t j = n - k; j < n; ++j) {
    std::size_t const t = stream.below(j - (n - k), static_cast<std::uint32_t>(j + 1));
    if (test_set(t)) test_set(j);
  }
  std::size_t o = 0;
  for (std::size_t h = 0; h < slots; ++h)
    if (bitmap[h] != 0) idx[o++] = static_cast<std::uint32_t>(bitmap[h] - 1);
  std::sort(idx, idx + o);
}

}  // namespace sluice::detail::compress

namespace sluice {

/// Keeps k = keep_count(ratio, n) = ceil(ratio * n) elements chosen uniformly at random, the same
/// on every rank: the indices come from random_stream(stream_key{seed, shared_rank, step, tensor}),
/// with step and tensor taken from the frame header when decoding. Wire: section 0 = k values as T
/// (times n / k when `rescale`); no indices. Decoded values are exact (or exactly rescaled);
/// with rescale the decoded tensor is unbiased, E[decoded] = x.
struct random_k {
  using codec_concept = codec_tag;
  static constexpr bool is_sparse = true;
  static constexpr bool shared_randomness = true;

  double ratio = 0.01;  ///< fraction of elements kept, in (0, 1]
  /// Warm-up moves the ratio, from DGC's 25 % density (Lin et al. 2018).
  static constexpr codec_strength<random_k, double> strength{&random_k::ratio, "fraction kept", 0.25};
  bool rescale = false;  ///< multiply sent values by n / k (unbiased)

  friend bool operator==(random_k const&, random_k const&) = default;
  /// Identity of the value (attach checks, checkpoints): its fields, not its printed form.
  friend void hash_append(serial::hasher& h, random_k const& v) { h("random_k", v.ratio, v.rescale); }

  /// Scratch: the drawn indices and the bitmap Floyd's algorithm marks them in.
  template <Element T>
  struct workspace {
    std::vector<std::uint32_t> indices{};
    std::vector<std::uint64_t> bitmap{};
  };

  [[nodiscard]] std::size_t keep(std::size_t n) const noexcept { return detail::compress::keep_count(ratio, n); }

  /// Exact frame size for n elements of T (the default, float, bounds every T).
  template <Element T = float>
  [[nodiscard]] std::size_t max_encoded_bytes(std::size_t n) const noexcept {
    return wire::frame_bytes({keep(n) * sizeof(T)});
  }

  /// Throws errc::invalid_argument for a ratio outside (0, 1].
  void validate() const { detail::compress::check_ratio(ratio, "random_k"); }

  /// The indices every rank selects for (seed, step, tensor) and n elements, into ws.indices[0, k).
  template <Element T>
  void draw(std::size_t n, std::uint64_t seed, std::uint64_t step, std::uint64_t tensor, workspace<T>& ws) const {
    std::size_t const k = keep(n);
    detail::compress::grow(ws.indices, k);
    random_stream const stream(stream_key{seed, stream_key::shared_rank, static_cast<std::uint32_t>(step),
                                          static_cast<std::uint32_t>(tensor)});
    detail::compress::draw_indices(stream, n, k, ws.bitmap, ws.indices.data());
  }

  /// Encodes `in` into `out` (at least max_encoded_bytes<T>(in.size()) bytes); returns bytes written.
  template <Element T>
  std::size_t encode(std::type_identity_t<std::span<T const>> in, encode_context const& ctx, workspace<T>& ws,
                     std::span<std::byte> out) const {
    validate();
    std::size_t const n = in.size(), k = keep(n);
    detail::compress::check_index_range(n, "random_k");
    detail::compress::check_out(out.size(), max_encoded_bytes<T>(n), "random_k");
    draw(n, ctx.seed, ctx.step, ctx.tensor, ws);
    wire::writer w(out, detail::compress::make_header<T>(wire::codec_id::random_k, ctx, n));
    std::byte* const o = w.next().data();
    float const scale = rescale && k > 0 ? static_cast<float>(static_cast<double>(n) / static_cast<double>(k)) : 1.0f;
    for (std::size_t j = 0; j < k; ++j) {
      T const v = scale == 1.0f ? in[ws.indices[j]] : from_float<T>(to_float(in[ws.indices[j]]) * scale);
      std::memcpy(o + j * sizeof(T), &v, sizeof(T));
    }
    w.commit(k * sizeof(T));
    return w.finish();
  }

  /// Decodes into `dense` (zeros where nothing was sent): overwrite, or add into it (accumulate).
  template <Element T, DecodeMode M>
  void decode_into(std::span<std::byte const> msg, encode_context const& ctx, workspace<T>& ws,
                   std::type_identity_t<std::span<T>> dense, M mode) const {
    auto const f = read<T>(msg, dense.size(), ctx, ws);
    detail::compress::apply_sparse<T>(f, ws.indices, dense, mode);
  }

  /// Decodes to indices + values (block size 1); the extent is the frame's.
  template <Element T>
  void decode_sparse(std::span<std::byte const> msg, encode_context const& ctx, workspace<T>& ws,
                     sparse_buffer<T>& out) const {
    auto const f = read<T>(msg, detail::compress::any_extent, ctx, ws);
    detail::compress::to_sparse_buffer<T>(f, ws.indices, f.extent, out);
  }

 private:
  template <Element T>
  detail::compress::sparse_frame_view read(std::span<std::byte const> msg, std::size_t extent,
                                           encode_context const& ctx, workspace<T>& ws) const {
    validate();
    wire::frame const f = detail::compress::parse_frame<T>(msg, wire::codec_id::random_k, extent, 1, ctx);
    std::size_t const n = detail::compress::checked_extent(f, "random_k"), k = keep(n);
    require(f.sections[0].size() == k * sizeof(T), errc::malformed_message,
            "random_k: values section has {} bytes, expected {} for {} of {} elements", f.sections[0].size(),
            k * sizeof(T), k, n);
    draw(n, ctx.seed, f.head.step, f.head.tensor, ws);
    return {k, n, f.sections[0]};
  }
};

// Conformance to its concepts: tests/static/test_conformance.cpp (checked there, not in every unit).

}  // namespace sluice

template <>
struct fmt::formatter<sluice::random_k> : sluice::detail::compress::policy_formatter {
  template <class FormatContext>
  auto format(sluice::random_k const& c, FormatContext& ctx) const {
    return fmt::format_to(ctx.out(), "random_k{{.ratio = {}, .rescale = {}}}", c.ratio, c.rescale);
  }
};
