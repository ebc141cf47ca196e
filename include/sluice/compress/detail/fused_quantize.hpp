// Fused compensate + quantize + residual update for the max-min quantizer (its
// encode_compensated): per bucket, c = g + e lives in L1 while it is ranged, quantized, packed and
// subtracted, so memory sees one pass (read g, read e, write e, write the packed bits). Built on
// the per-bucket building blocks and the codec's frame layout; bit-identical to encode + decode.
#pragma once

#include <algorithm>
#include <array>
#include <atomic>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <span>
#include <type_traits>

#include <sluice/compress/concepts.hpp>
#include <sluice/compress/detail/common.hpp>
#include <sluice/compress/detail/pack.hpp>
#include <sluice/compress/detail/quantize.hpp>
#include <sluice/compress/detail/residual.hpp>
#include <sluice/core/parallel.hpp>
#include <sluice/core/random.hpp>
#include <sluice/core/simd.hpp>
#include <sluice/core/wire.hpp>

namespace sluice::detail::compress {

/// The encoders' walk over the buckets of a max-min frame (maxmin_quantize::encode and the fused
/// pass below): groups of 8 buckets (which always end on a byte boundary) on the thread pool,
/// body(b0, b1, done) quantizing and packing buckets [b0, b1) into the level section at `packed`
/// (zeroed first where buckets do not end on a byte), and done(b) after bucket b hashing the level
/// bytes that are then final (a shared last byte is not) into `digests`, while they are in cache.
template <class F>
void maxmin_bucket_groups(std::size_t n, std::size_t bucket, unsigned bits, std::byte* packed,
                          sluice::wire::block_digests& digests, F&& body) {
  std::size_t const nb = (n + bucket - 1) / bucket, groups = (nb + 7) / 8;
  std::size_t const at = 16 + 8 * nb;  // payload offset of the level section
  parallel_chunks(groups, 4, [&](std::size_t gb, std::size_t ge, int) {
    std::size_t const b0 = gb * 8, b1 = std::min(nb, ge * 8);
    std::size_t const from = b0 * bucket * bits / 8;
    std::size_t const to = packed_bytes(std::min(n, b1 * bucket), bits);
    if (bucket % 8 != 0) std::memset(packed + from, 0, to - from);
    sluice::wire::block_digests::hasher hash(digests, packed - at, at + from, at + to);
    auto const done = [&](std::size_t b) {
      hash.done(at + (b + 1 == b1 ? to : std::min(n, (b + 1) * bucket) * bits / 8));
    };
    body(b0, b1, done);
  });
}

/// Residual + maxmin_quantize (C) in one pass per bucket. Writes the frame maxmin_quantize::encode
/// writes for c = g + e (same header, parameter, range and level sections) and sets
/// e = c - decode(frame) bucket by bucket. `s` is the feedback's slice (Codec's encode_compensated).
template <class S, class C, class T, class Slice, class W>
std::size_t residual_fused_quantize(C const& c, Slice const& s, std::span<T const> grad, encode_context const& ctx, W&,
                                    std::span<std::byte> out) {
  c.validate();
  std::size_t const n = grad.size(), nb = c.bucket_count(n), bucket = c.bucket;
  unsigned const bits = c.bits;
  auto const e = s.template buffer<S>(0);
  sluice::wire::writer w(out, detail::compress::make_header<T>(sluice::wire::codec_id::maxmin_quantize, ctx, n));
  std::uint32_t const params[4] = {bits, static_cast<std::uint32_t>(bucket), static_cast<std::uint32_t>(c.round), 0};
  w.write(std::as_bytes(std::span(params)));
  std::byte* const ranges = w.next().data();
  std::byte* const packed = ranges + 8 * nb;
  random_stream const stream(ctx.key());
  auto const rs = state_stream(ctx, s.tensor());
  std::size_t const offset = s.offset();
  std::atomic<std::uint64_t> bad_total{0};
  sluice::wire::block_digests digests(c.max_encoded_bytes(n) - sluice::wire::header_bytes);
  maxmin_bucket_groups(n, bucket, bits, packed, digests, [&](std::size_t b0, std::size_t b1, auto const& finished) {
    alignas(64) std::array<float, 4096> cf;
    alignas(64) std::array<T, 4096> ct;
    alignas(64) std::array<std::uint8_t, 4096> codes;
    std::uint32_t bad = 0;
    constexpr bool all_float = std::is_same_v<T, float> && std::is_same_v<S, float>;
    for (std::size_t b = b0; b < b1; ++b) {
      std::size_t const first = b * bucket, len = std::min(bucket, n - first);
      T const* const g = grad.data() + first;
      S* const eb = e.data() + first;
      // Memory streams the next bucket while this one is worked on in L1: its lines are requested
      // spread over the 4-bit residual loop where that body runs, else all at once here.
      std::size_t const next = b + 1 < b1 ? std::min(bucket, n - first - len) : 0;
      bool const pack4 = all_float && bits == 4 && c.round == rounding::nearest && len % 32 == 0 && first % 2 == 0;
      if (!pack4) {
        detail::compress::prefetch_range(g + len, next);
        detail::compress::prefetch_range(eb + len, next);
      }
      detail::compress::maxmin_range r;
      T const* x = nullptr;
      bool simd_done = false;  // float: c = g + e and its range in one pass
      if constexpr (all_float) {
        x = cf.data();
        if (len % 16 == 0) {
          float mn = std::numeric_limits<float>::infinity(), mx = -mn;
          bool poisoned = false;
          detail::compress::add_range_f32(g, eb, cf.data(), len, mn, mx, poisoned);
          if (poisoned)
            for (std::size_t j = 0; j < len; ++j) bad += non_finite(cf[j]) ? 1u : 0u;
          r = detail::compress::maxmin_grid(mn, mx, poisoned, len, bits);
          simd_done = true;
        }
      }
      if (!simd_done) {
        for (std::size_t j = 0; j < len; ++j) {
          cf[j] = to_float(g[j]) + to_float(eb[j]);
          bad += non_finite(cf[j]) ? 1u : 0u;
        }
        if constexpr (std::is_same_v<T, float>) {
          x = cf.data();
        } else {
          for (std::size_t j = 0; j < len; ++j) ct[j] = from_float<T>(cf[j]);
          x = ct.data();
        }
        r = detail::compress::maxmin_bucket_range(x, len, bits);
      }
      std::memcpy(ranges + 8 * b, &r.min, 4);
      std::memcpy(ranges + 8 * b + 4, &r.unit, 4);
      if constexpr (all_float) {
        // 4-bit nearest on a finite bucket: levels, packing and residual in one pass over c.
        float const inv = 1.0f / r.unit;
        if (simd_done && pack4 && r.min == r.min && std::isfinite(inv)) {
          detail::compress::levels4_residual_f32(cf.data(), len, r.min, inv, r.unit, packed + first / 2, eb, g + len,
                                                 eb + len, 4 * next);
          finished(b);
          continue;
        }
      }
      if (pack4) {  // the 4-bit body did not run: its prefetches were not made
        detail::compress::prefetch_range(g + len, next);
        detail::compress::prefetch_range(eb + len, next);
      }
      detail::compress::maxmin_quantize_bucket(x, len, r, bits, c.round, stream, first, codes.data());
      detail::compress::pack_codes_at(codes.data(), len, bits, packed, first * bits);
      // The receiver's value, narrowed to T as decode narrows it, then e = c - value.
      std::size_t done = 0;
      if constexpr (all_float)
        if (simd_done && r.min == r.min)  // finite bucket: no NaN to clear
          done = detail::compress::residual_f32(cf.data(), codes.data(), r.min, r.unit, eb, len);
      store_range<S>(eb, done, len, rs, offset + first, [&](std::size_t j) {
        return cf[j] - to_float(from_float<T>(detail::compress::maxmin_value(r, codes[j])));
      });
      finished(b);
    }
    if (bad != 0) bad_total.fetch_add(bad, std::memory_order_relaxed);
  });
  w.commit(8 * nb);
  w.commit(detail::compress::packed_bytes(n, bits));
  if (auto const bad = bad_total.load()) s.state().record_non_finite(bad);
  return w.finish(&digests);
}

}  // namespace sluice::detail::compress
