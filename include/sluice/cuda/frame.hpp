// Host side of the device codecs: where a device kernel writes the sections of a wire frame, how
// the host finishes the frame (parameters, header, checksum) after copying the sections back, and
// the same per-bucket work as the kernels run on the CPU with the shared functors (the reference
// the tests compare with the CPU codecs, and a fallback without a device). Plain C++.
#pragma once

#include <algorithm>
#include <atomic>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <utility>
#include <vector>

#include <sluice/compress/block_top_k.hpp>
#include <sluice/compress/maxmin_quantize.hpp>
#include <sluice/compress/random_k.hpp>
#include <sluice/compress/sections.hpp>
#include <sluice/compress/top_k.hpp>
#include <sluice/core/parallel.hpp>
#include <sluice/cuda/functors.hpp>
#include <sluice/feedback/non_finite.hpp>
#include <sluice/feedback/state.hpp>

namespace sluice::cuda {

/// Byte offsets of a maxmin_quantize frame of n floats. A device encoder writes the ranges
/// section ({f32 min, f32 unit} per bucket) followed by the levels section as one contiguous
/// `payload_bytes` block; the host copies it to `frame + ranges_offset` and calls
/// finish_maxmin_frame.
struct maxmin_layout {
  std::size_t n = 0;
  std::size_t buckets = 0;
  std::size_t ranges_offset = 0;  ///< frame offset of the ranges section (= 96)
  std::size_t ranges_bytes = 0;   ///< 8 per bucket (a multiple of 8: no padding before the levels)
  std::size_t levels_bytes = 0;   ///< ceil(n * bits / 8)
  std::size_t frame_bytes = 0;    ///< the whole frame, = max_encoded_bytes(n)
  /// Bytes the device writes: ranges then levels.
  [[nodiscard]] std::size_t payload_bytes() const noexcept { return ranges_bytes + levels_bytes; }
};

/// The layout of c's frame for n elements (validates c).
inline maxmin_layout layout_of(maxmin_quantize const& c, std::size_t n) {
  c.validate();
  std::size_t const nb = c.bucket_count(n);
  return {n, nb, wire::header_bytes + 16, 8 * nb, packed_level_bytes(n, c.bits), c.max_encoded_bytes<float>(n)};
}

/// Completes a maxmin_quantize frame of n floats whose ranges and levels sections already lie in
/// `frame` at their layout offsets: writes the parameter section, the header, the padding and the
/// checksum. Returns the frame size. The result equals c.encode() of the same values bit for bit
/// when the sections were produced by the shared functors (the device kernels or
/// host::feedback_maxmin).
inline std::size_t finish_maxmin_frame(maxmin_quantize const& c, encode_context const& ctx, std::size_t n,
                                       std::span<std::byte> frame) {
  auto const l = layout_of(c, n);
  require_frame_bytes(frame.size(), l.frame_bytes, "cuda::finish_maxmin_frame");
  wire::writer w(frame, frame_header<float>(wire::codec_id::maxmin_quantize, ctx, n));
  std::uint32_t const params[4] = {c.bits, static_cast<std::uint32_t>(c.bucket), static_cast<std::uint32_t>(c.round),
                                   0};
  w.write(std::as_bytes(std::span(params)));
  w.commit(l.ranges_bytes);
  w.commit(l.levels_bytes);
  return w.finish();
}

/// The top_k frame of a selection made elsewhere (the device): `indices` strictly increasing and
/// below n, values in the same order, as many as c.keep(n). Equals c.encode() of the input when
/// the selection is the same.
inline std::size_t write_top_k_frame(top_k const& c, encode_context const& ctx, std::size_t n,
                                     std::span<std::uint32_t const> indices, std::span<float const> values,
                                     std::span<std::byte> out) {
  c.validate();
  require(indices.size() == c.keep(n) && values.size() == indices.size(), errc::size_mismatch,
          "cuda::write_top_k_frame: {} indices and {} values for k = {} of n = {}", indices.size(), values.size(),
          c.keep(n), n);
  require_frame_bytes(out.size(), c.max_encoded_bytes<float>(n), "cuda::write_top_k_frame");
  return sluice::write_sparse_frame<float>(wire::codec_id::top_k, ctx, n, indices, values, out);
}

/// The block_top_k frame of a selection made elsewhere (the device): `blocks` strictly
/// increasing block indices, c.keep_blocks(n) of them, and `values` their elements, c.block per
/// block (the last block of the tensor zero-padded). Equals c.encode() of the input when the
/// selection is the same.
inline std::size_t write_block_top_k_frame(block_top_k const& c, encode_context const& ctx, std::size_t n,
                                           std::span<std::uint32_t const> blocks, std::span<float const> values,
                                           std::span<std::byte> out) {
  c.validate();
  std::size_t const b = c.keep_blocks(n);
  require(blocks.size() == b && values.size() == b * c.block, errc::size_mismatch,
          "cuda::write_block_top_k_frame: {} blocks and {} values for {} blocks of {}", blocks.size(), values.size(), b,
          c.block);
  require_frame_bytes(out.size(), c.max_encoded_bytes<float>(n), "cuda::write_block_top_k_frame");
  wire::writer w(out, frame_header<float>(wire::codec_id::block_top_k, ctx, n));
  std::uint32_t const params[2] = {static_cast<std::uint32_t>(c.block), static_cast<std::uint32_t>(c.score)};
  w.write(std::as_bytes(std::span(params)));
  w.write(std::as_bytes(values));
  w.commit(wire::encode_sorted_indices<std::uint32_t>(blocks, w.next()));
  return w.finish();
}

/// The random_k frame of values gathered elsewhere (the device): c.keep(n) values, in the order
/// of the drawn indices (increasing) and already scaled (random_k_element::sent). Equals
/// c.encode() of the input when the indices were drawn with ctx.key().shared().
inline std::size_t write_random_k_frame(random_k const& c, encode_context const& ctx, std::size_t n,
                                        std::span<float const> values, std::span<std::byte> out) {
  c.validate();
  require_index_range(n, "cuda::write_random_k_frame");
  require(values.size() == c.keep(n), errc::size_mismatch, "cuda::write_random_k_frame: {} values for k = {} of n = {}",
          values.size(), c.keep(n), n);
  require_frame_bytes(out.size(), c.max_encoded_bytes<float>(n), "cuda::write_random_k_frame");
  wire::writer w(out, frame_header<float>(wire::codec_id::random_k, ctx, n));
  w.write(std::as_bytes(values));
  return w.finish();
}

/// What sluice::residual does before it changes anything when the gradient of slice `s` holds a
/// NaN or Inf at `at` (the index non_finite_counter::find returns, std::size_t(-1) for none):
/// nothing for none or non_finite_policy::propagate (returns false: run the fused call, count
/// with non_finite_counter and record the count with s.state().record_non_finite); for skip_step
/// records the skip in s.state().report() and returns true (send nothing); for throw_error throws
/// errc::non_finite naming the tensor, element and step. The same counters and message as the CPU.
inline bool apply_non_finite_policy(non_finite_policy p, feedback_slice const& s, std::size_t at, std::uint64_t step) {
  if (p == non_finite_policy::propagate || at == static_cast<std::size_t>(-1)) return false;
  return on_non_finite(p, s, at, step, "residual");
}

namespace host {

/// Bucket b of error feedback around max-min quantization, as the device kernel computes it:
/// c = g + e (c = g when e is null), the bucket's grid, its levels packed into `levels` (the
/// levels section) and, when e is not null, e = c - decode(level) (+0 where not finite). `ranges`
/// receives the grid at 8 * b. When bucket * bits is not a multiple of 8, buckets share bytes.
/// `levels` must start zeroed (bits are OR-ed in) and buckets must not run concurrently on shared
/// bytes. Returns how many compensated values were NaN or Inf (0 when e is null).
inline std::uint32_t feedback_maxmin_bucket(float const* g, float* e, std::size_t n, std::size_t b,
                                            maxmin_quantize const& c, philox_stream const& rs, std::byte* ranges,
                                            std::byte* levels) noexcept {
  std::size_t const first = b * c.bucket, len = std::min(c.bucket, n - first);
  float cv[4096];
  std::uint8_t q[4096 + 8] = {};
  maxmin_range_acc acc;
  std::uint32_t bad = 0;
  for (std::size_t j = 0; j < len; ++j) {
    cv[j] = e != nullptr ? feedback_maxmin_element::compensate(g[first + j], e[first + j]) : g[first + j];
    acc.add(cv[j]);
    bad += e != nullptr ? non_finite_count(cv[j]) : 0u;
  }
  maxmin_grid const grid = acc.grid(len, c.bits);
  std::memcpy(ranges + 8 * b, &grid.min, 4);
  std::memcpy(ranges + 8 * b + 4, &grid.unit, 4);
  maxmin_encoder const enc(grid, c.bits, c.round == rounding::stochastic);
  for (std::size_t j = 0; j < len; ++j) {
    q[j] = enc.level(cv[j], enc.stochastic ? rs.uniform(first + j) : 0.0f);
    if (e != nullptr) e[first + j] = feedback_maxmin_element::residual(cv[j], grid, q[j]);
  }
  std::size_t const bit0 = first * c.bits;
  if (bit0 % 8 == 0) {
    // Whole groups of 8 levels are `bits` bytes; the last partial group writes what it covers.
    for (std::size_t j = 0; j < len; j += 8) {
      std::uint64_t const w = pack8(q + j, c.bits);
      std::size_t const bytes = packed_level_bytes(std::min<std::size_t>(8, len - j), c.bits);
      for (std::size_t t = 0; t < bytes; ++t)
        levels[(bit0 + j * c.bits) / 8 + t] |= static_cast<std::byte>((w >> (8 * t)) & 0xffu);
    }
  } else {
    pack_levels_at(q, len, c.bits, levels, bit0);
  }
  return bad;
}

/// Error feedback around max-min quantization over a whole tensor (see feedback_maxmin_bucket):
/// writes the ranges and levels sections at `payload` (layout_of(c, n).payload_bytes()). Returns
/// how many compensated values were NaN or Inf (what sluice::residual records).
inline std::uint64_t feedback_maxmin(std::span<float const> g, float* e, maxmin_quantize const& c,
                                     stream_key const& key, std::span<std::byte> payload) {
  auto const l = layout_of(c, g.size());
  require(payload.size() >= l.payload_bytes(), errc::size_mismatch,
          "cuda::host::feedback_maxmin: payload of {} bytes, {} needed", payload.size(), l.payload_bytes());
  std::memset(payload.data(), 0, l.payload_bytes());
  philox_stream const rs(key);
  std::byte* const levels = payload.data() + l.ranges_bytes;
  // Groups of 8 buckets end on a byte boundary, so groups never share a byte.
  std::atomic<std::uint64_t> bad{0};
  parallel_chunks((l.buckets + 7) / 8, 4, [&](std::size_t gb, std::size_t ge, int) {
    std::uint64_t own = 0;
    for (std::size_t b = gb * 8; b < std::min(l.buckets, ge * 8); ++b)
      own += feedback_maxmin_bucket(g.data(), e, g.size(), b, c, rs, payload.data(), levels);
    bad.fetch_add(own, std::memory_order_relaxed);
  });
  return bad.load();
}

/// random_k's selection as the device computes it (random_k_draw's decomposition, then a bitmap
/// of the drawn set read in order), with error feedback fused when `g` is not empty: x holds e on
/// entry, c = g + e is sampled, and x holds the residual on exit (c where not sent, c - sent where
/// sent; when any c was NaN or Inf, every non-finite residual becomes +0, as sluice::residual
/// clears them). Without g, x is the input and is left as it is. `indices` and `values` receive k
/// entries. Returns how many compensated values were NaN or Inf (0 without g).
inline std::uint64_t random_k_select(std::span<float const> g, std::span<float> x, std::size_t k, stream_key const& key,
                                     random_k_element f, std::span<std::uint32_t> indices, std::span<float> values) {
  std::size_t const n = x.size();
  require(k <= n && indices.size() >= k && values.size() >= k && (g.empty() || g.size() == n), errc::size_mismatch,
          "cuda::host::random_k_select: k = {} of n = {}, {} indices, {} values, {} gradients", k, n, indices.size(),
          values.size(), g.size());
  require_index_range(n, "cuda::host::random_k_select");
  std::uint64_t bad = 0;
  if (!g.empty())
    for (std::size_t i = 0; i < n; ++i) bad += non_finite_count(x[i] = feedback_maxmin_element::compensate(g[i], x[i]));
  random_k_draw const d{philox_stream(key), n, k};
  std::vector<std::uint32_t> targets(k);
  std::vector<std::pair<std::uint32_t, std::size_t>> by_value(k);
  for (std::size_t j = 0; j < k; ++j) by_value[j] = {targets[j] = d.target(j), j};
  std::sort(by_value.begin(), by_value.end());
  std::vector<std::uint8_t> repeat(k, 0);
  for (std::size_t r = 1; r < k; ++r)
    if (by_value[r].first == by_value[r - 1].first) repeat[by_value[r].second] = 1;
  std::vector<std::uint32_t> bitmap((n + 31) / 32, 0);
  auto set = [&](std::uint64_t i) { bitmap[i / 32] |= 1u << (i % 32); };
  for (std::size_t j = 0; j < k; ++j) {
    set(targets[j]);
    if (d.own_inserted(targets.data(), repeat.data(), j)) set(d.own(j));
  }
  std::size_t o = 0;
  for (std::size_t w = 0; w < bitmap.size(); ++w)
    for (std::uint32_t b = bitmap[w]; b != 0 && o < k; b &= b - 1)
      indices[o++] = static_cast<std::uint32_t>(32 * w + static_cast<std::size_t>(std::countr_zero(b)));
  for (std::size_t j = 0; j < k; ++j) {
    float const c = x[indices[j]];
    values[j] = f.sent(c);
    if (!g.empty()) x[indices[j]] = random_k_element::residual(c, values[j]);
  }
  if (bad != 0)
    for (auto& v : x) v = kept_residual(v);
  return bad;
}

}  // namespace host

}  // namespace sluice::cuda
